"""mage-gym: Gymnasium environments for evidence controllers (MAGE-RAG setting)."""
__version__ = "0.1.0"
