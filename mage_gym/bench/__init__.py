"""The evaluation harness as a library (filled in by issue 32): see docs/ARCHITECTURE.md."""
