"""``import mage_gym`` registers MageRAG-v0; ``gym.make("mage_gym:MageRAG-v0")`` works from a fresh process."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from mage_gym.env import ActionLayout

REPO = Path(__file__).resolve().parents[1]

TOY = """
from mage_gym.testing import hash_query_fn, toy_episodes
kw = dict(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=8, retriever="bm25")
"""


def run_fresh(*parts: str) -> str:
    code = "\n".join(textwrap.dedent(p) for p in parts)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_mage_gym_registers_the_env_and_stays_light():
    out = run_fresh("""
        import sys
        import gymnasium as gym
        assert "MageRAG-v0" not in gym.registry
        import mage_gym
        assert "MageRAG-v0" in gym.registry
        heavy = [m for m in ("mage_gym.env", "mage_gym.graph", "torch", "transformers") if m in sys.modules]
        assert not heavy, heavy
        assert isinstance(gym.spec("MageRAG-v0").entry_point, str)
    """, TOY, """
        env = gym.make("MageRAG-v0", **kw)
        obs, info = env.reset(seed=0)
        mask = env.get_wrapper_attr("action_masks")()
        print(type(env.unwrapped).__name__, len(mask))
    """)
    assert out.split() == ["MageRAGEnv", str(ActionLayout(8).n)]


def test_gym_make_with_module_prefix_from_a_fresh_process():
    out = run_fresh("""
        import sys
        import gymnasium as gym
        assert "mage_gym" not in sys.modules
        try:  # the prefix imports mage_gym, which registers the id; the env then asks for episodes
            gym.make("mage_gym:MageRAG-v0")
        except ValueError as err:
            assert "episodes" in str(err), err
        else:
            raise AssertionError("gym.make without episodes should fail in the env")
        assert "mage_gym" in sys.modules
    """, TOY, """
        env = gym.make("mage_gym:MageRAG-v0", **kw)
        env.reset(seed=0)
        _, r, terminated, truncated, info = env.step(0)
        print(terminated, truncated, info["stop_reason"])
    """)
    assert out.split() == ["True", "False", "stop"]
