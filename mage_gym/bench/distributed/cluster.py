"""Join (or start) the Ray cluster named by the ``executor`` config, and pin what every worker must share.

Why pin: a graph's vectors depend on the embedding precision, which each
process resolves from its own CPU (int8 where it has VNNI, else bfloat16 or
float32) and which is not in the graph cache key. Two nodes with different
CPUs would then fill one shared cache with vectors of two precisions without
a word. The driver resolves the precision once and every task runs with it
(:func:`pinned_env`); a node that cannot run it fails loudly
(:class:`mage_gym.graph.embed.TextEncoder` refuses an explicit precision it
cannot honour) instead of silently differing.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Mapping

log = logging.getLogger("experiments.distributed")

#: the keys of ``conf/executor/ray.yaml``; missing keys take these values
RAY_DEFAULTS: dict[str, Any] = {"name": "ray", "address": "local", "cpus_per_task": 1, "max_retries": 3,
                                "object_store_memory": None, "actors": None, "reader_cache": None, "servers": None,
                                "server_concurrency": None, "chunk_pages": 64}
#: test-only hook: ``<substring of a document path or episode id>:<marker file>``; the first task on a
#: matching item creates the marker and kills its own process (tests/test_ray_executor.py)
KILL_ONCE_ENV = "MAGE_GYM_RAY_KILL_ONCE"


def ray_options(executor: Mapping[str, Any]) -> dict[str, Any]:
    """``executor`` merged onto :data:`RAY_DEFAULTS`; a misspelt key is an error, not a silent default."""
    unknown = sorted(set(executor) - set(RAY_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown executor options {unknown}; expected {sorted(RAY_DEFAULTS)}")
    out = {**RAY_DEFAULTS, **dict(executor)}
    if float(out["cpus_per_task"]) <= 0 or int(out["max_retries"]) < 0:
        raise ValueError(f"executor: need cpus_per_task > 0 and max_retries >= 0, got {out}")
    servers = out["servers"]
    if isinstance(servers, str):  # one URL given as a string: a list of one
        out["servers"] = servers = [servers]
    if servers is not None and (not list(servers) or not all(isinstance(u, str) and u for u in servers)):
        raise ValueError(f"executor.servers must be null or a non-empty list of base URLs, got {servers!r}")
    if out["chunk_pages"] is not None and int(out["chunk_pages"]) < 1:
        raise ValueError(f"executor.chunk_pages must be null or >= 1, got {out['chunk_pages']}")
    if out["server_concurrency"] is not None and int(out["server_concurrency"]) < 1:
        raise ValueError(f"executor.server_concurrency must be null or >= 1, got {out['server_concurrency']}")
    return out


def connect(executor: Mapping[str, Any]) -> Any:
    """The ``ray`` module, initialised: an already connected driver (tests) is reused as it is.

    ``address: local`` starts a single-node cluster inside this process
    (``object_store_memory`` caps its shared memory); anything else
    (``auto``, ``ray://host:10001``, ``host:6379``) joins a running cluster.
    """
    import ray

    if ray.is_initialized():
        return ray
    opts = ray_options(executor)
    address = opts["address"]
    if address in (None, "", "local"):
        mem = opts["object_store_memory"]
        ray.init(include_dashboard=False, object_store_memory=int(mem) if mem else None,
                 logging_level=logging.WARNING)
    else:
        ray.init(address=str(address), logging_level=logging.WARNING)
    log.info("ray cluster: %s", ray.cluster_resources())
    return ray


def pinned_env(threads: int) -> dict[str, str]:
    """Environment every Ray task or actor sets before its first import of the encoder.

    The driver's embedding precision (resolved here, once), the graph cache
    root (the shared folder must be mounted at the same path on every node),
    one thread budget per task, and the test-only kill hook when set.
    """
    from mage_gym.graph.embed import resolve_precision
    from mage_gym.paths import cache_root

    env = {"MAGE_GYM_EMBED_PRECISION": resolve_precision(None, "cpu"), "MAGE_GYM_CACHE": str(cache_root()),
           "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    for name in (KILL_ONCE_ENV, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def apply_env(env: Mapping[str, str]) -> None:
    """In a worker: take the driver's pinned settings (overriding the node's own; worker processes are reused,
    so a test hook left by an earlier job is cleared)."""
    if KILL_ONCE_ENV not in env:
        os.environ.pop(KILL_ONCE_ENV, None)
    os.environ.update(env)


def maybe_die_once(item: str) -> None:
    """Test-only: kill this process the first time an item matching ``$MAGE_GYM_RAY_KILL_ONCE`` is worked on.

    The marker file (on a folder every node sees) makes it once per run, so
    the retried task goes through: what the fault test checks is that the
    retry loses and duplicates nothing.
    """
    spec = os.environ.get(KILL_ONCE_ENV)
    if not spec or ":" not in spec:
        return
    needle, marker = spec.split(":", 1)
    if needle not in item:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os._exit(1)


def node_reader_cache(executor: Mapping[str, Any]) -> str:
    """Where an actor's reader keeps its response cache (``cache: true``): a file on the node's own disk.

    Why not under ``$MAGE_GYM_CACHE``: on a cluster that root is the shared
    folder (graphs, OCR lines), and sqlite must never live on a network
    filesystem (its locks are unreliable there). ``executor.reader_cache``
    names another node-local path.
    """
    from pathlib import Path

    return str(executor.get("reader_cache") or Path.home() / ".cache" / "mage_gym" / "readers" / "responses.sqlite")


def node_evaluator_cache(executor: Mapping[str, Any]) -> str:
    """Where an actor's LLM evaluator keeps its reply cache (``cache: true``): on the node's own disk too.

    Next to ``executor.reader_cache`` when that is set, else
    ``~/.cache/mage_gym/evaluator/responses.sqlite`` (the evaluator's local
    default lives under ``$MAGE_GYM_CACHE``, the shared folder on a cluster).
    """
    from pathlib import Path

    if executor.get("reader_cache"):
        return str(Path(str(executor["reader_cache"])).with_name("evaluator_responses.sqlite"))
    return str(Path.home() / ".cache" / "mage_gym" / "evaluator" / "responses.sqlite")
