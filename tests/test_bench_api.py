"""The harness's public API (:mod:`mage_gym.bench`) works as its docstring shows, from a user's own script."""
from __future__ import annotations

import re
import subprocess
import sys

import mage_gym.bench as bench


def test_every_public_name_resolves_and_the_package_stays_light() -> None:
    for name in bench.__all__:
        assert getattr(bench, name) is not None, name
    code = "import sys, mage_gym.bench; print(any(m.startswith(('torch', 'policies')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_docstring_example_runs_on_toy_episodes() -> None:
    """The module docstring's first example, with the toy episodes in place of a dataset (no files needed)."""
    example = re.search(r"top-k::\n\n(.*?)\n\nand the whole", bench.__doc__, re.S).group(1)
    code = "\n".join(line[4:] for line in example.splitlines())
    assert "play_episodes" in code and "paired_delta" in code
    code = code.replace('episodes = load_dataset("mmlongbench", split="val", limit=20)',
                        "from mage_gym.testing import hash_query_fn, toy_episodes\nepisodes = toy_episodes()")
    code = code.replace('parser="fast")', 'query_fn=hash_query_fn(16), K=16)')
    namespace: dict = {}
    exec(compile(code, "bench-docstring", "exec"), namespace)  # noqa: S102 - our own docstring
    mine, base = namespace["mine"], namespace["base"]
    assert len(mine) == len(base) == 4 and {r.episode_id for r in mine} == {"elem", "page", "region", "unans"}
