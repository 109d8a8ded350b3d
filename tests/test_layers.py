"""The code's layers, checked from the code itself: no import circles and no import that runs up the layers.

Every ``import`` counts, also those inside functions and under
``TYPE_CHECKING``: a lazy import that runs upward still ties a lower layer
to a higher one (it breaks when the higher one changes, and it hides a
dependency a reader of the lower layer cannot see). ``docs/ARCHITECTURE.md``
describes the layers in this order.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("mage_gym", "policies", "experiments")

#: Lowest first. A module may import modules of its own layer (without circles) or of lower ones.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilities", ("mage_gym._compat", "mage_gym.paths", "mage_gym.device", "mage_gym.jsonio", "mage_gym.cache",
                   "mage_gym.progress", "mage_gym.ids")),
    ("scoring", ("mage_gym.scoring",)),
    ("graph", ("mage_gym.graph",)),
    ("readers", ("mage_gym.readers",)),
    ("retrieval", ("mage_gym.retrieval",)),
    ("data", ("mage_gym.data",)),
    ("evidence", ("mage_gym.coverage", "mage_gym.render", "mage_gym.reward")),
    ("env", ("mage_gym.env",)),
    ("wrappers", ("mage_gym.wrappers", "mage_gym.trace", "mage_gym.make")),
    ("agent", ("mage_gym.agent",)),
    ("bench", ("mage_gym.bench",)),
    ("report", ("mage_gym.report",)),
    ("package", ("mage_gym",)),  # mage_gym/__init__.py: registration by strings, lazy attributes
    ("testing", ("mage_gym.testing",)),  # helpers for tests: production code never imports it
    ("policies", ("policies",)),
    ("experiments", ("experiments",)),
)


def module_files() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (function-level and TYPE_CHECKING imports included)."""
    mods = module_files()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [f"{stem}.{a.name}" for a in node.names] + [stem]
            else:
                continue
            for target in targets:
                r = resolve(target)
                # a package's own __init__ imported from inside it is not an edge between files
                if r and r != mod and not (mods[r].name == "__init__.py" and mod.startswith(r + ".")):
                    edges[mod].add(r)
    return edges


def layer_of(mod: str) -> int:
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    assert best is not None, f"{mod} is in no declared layer: add it to LAYERS (and docs/ARCHITECTURE.md)"
    return best


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_among_files() -> None:
    assert circles(import_graph()) == []


def test_no_import_runs_up_the_layers() -> None:
    upward = sorted(f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
                    for m, ts in import_graph().items() for t in ts if layer_of(t) > layer_of(m))
    assert upward == []


def test_production_code_never_imports_the_test_helpers() -> None:
    users = sorted(m for m, ts in import_graph().items() for t in ts
                   if t == "mage_gym.testing" and not m.startswith("mage_gym.testing"))
    assert users == []


def test_the_check_sees_imports_inside_functions(tmp_path) -> None:
    """The walker counts an import nested in a function body (the kind that hid the loops before)."""
    tree = ast.parse("def f():\n    from mage_gym.env import make_env\n")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "mage_gym.env" for n in ast.walk(tree))
    assert layer_of("mage_gym.graph.union") < layer_of("mage_gym.data.gold") < layer_of("mage_gym.env.env")
