"""The README stays a short guide whose commands point at things that exist (issue 15, item 9)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_is_short_and_uses_wrapper_access_only() -> None:
    assert len(README.encode("utf-8")) <= 15_000
    assert ".unwrapped" not in README and "1 + 5K" not in README


def test_every_script_and_module_the_readme_names_exists() -> None:
    scripts = set(re.findall(r"experiments/([\w/]+)\.py", README))
    scripts |= {m.replace(".", "/") for m in re.findall(r"-m experiments\.([\w.]+)", README)}
    missing = [s for s in sorted(scripts) if not (REPO / "experiments" / f"{s}.py").is_file()]
    assert scripts and not missing, missing
    for path in re.findall(r"`((?:mage_gym|policies|scripts|conf|docs|tests)/[\w/.]+)`", README):
        assert (REPO / path.rstrip("/")).exists(), path


def test_every_policy_the_readme_lists_is_registered() -> None:
    from policies import POLICIES

    listed = set(re.findall(r"^\| `(\w+)` \|", README, flags=re.M))
    assert listed == set(POLICIES), listed ^ set(POLICIES)
