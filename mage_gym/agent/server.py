"""``python -m mage_gym.agent.server``: MageRAG-Chat-v0 as an OpenEnv environment server, for remote trainers.

Why: remote RL trainers (verl agent loops, prime-rl, TRL with vLLM, OpenEnv
clients) run their own generation and drive environments over the network,
one session per rollout, hundreds at once. The server is built on
openenv-core (:mod:`mage_gym.agent.service`): OpenEnv's WebSocket sessions
(``/ws``, what its ``EnvClient`` speaks) and HTTP session routes (``/reset``,
``/step``, ``/state``, ``/close``) share one session table, documents are held
once per process under a cap, and every fault is answered with a typed error
and counted (``/metrics``). The stdlib server this module used to hold is
retired; its routes and their JSON shapes live on, except that an
observation is now OpenEnv's: ``{"messages", "info", "terminated",
"truncated"}`` with ``reward`` and ``done`` beside it.

Start (loopback by default; ``--workers 2`` for uvicorn worker processes)::

    python -m mage_gym.agent.server --dataset synth --split test --parser fast --port 8090
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["ChatEnvServer", "main"]


def __getattr__(name: str) -> Any:
    if name == "ChatEnvServer":  # lazily: the service imports openenv-core (the `serve` extra)
        from mage_gym.agent.service.runner import ChatEnvServer

        return ChatEnvServer
    raise AttributeError(name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m mage_gym.agent.server", description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="synth", help="a dataset, or several comma-separated (mixed)")
    ap.add_argument("--root", default=None)
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--doc-ids", default="", help="comma-separated: serve only episodes on these documents")
    ap.add_argument("--parser", default="fast")
    ap.add_argument("--retriever", default="hybrid")
    ap.add_argument("--vision", action="store_true", help="page images and crops in tool results")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (WebSocket sessions stay in "
                                                          "theirs)")
    ap.add_argument("--threads", type=int, default=2, help="threads per worker running env calls (the env is CPU-bound "
                                                              "Python; raise it for a reader that waits on a remote model)")
    ap.add_argument("--max-sessions", type=int, default=256, help="live sessions per worker")
    ap.add_argument("--max-documents", type=int, default=16, help="documents in memory per worker")
    ap.add_argument("--prebuilt-only", action="store_true", help="serve only documents whose graph is cached "
                                                                 "(else a reset may build one, minutes for a long PDF)")
    ap.add_argument("--episode-timeout", type=float, default=600.0)
    ap.add_argument("--idle-timeout", type=float, default=300.0)
    ap.add_argument("--step-timeout", type=float, default=120.0)
    ap.add_argument("--max-request-bytes", type=int, default=1 << 20)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from mage_gym.agent.service.config import ServiceConfig
    from mage_gym.agent.service.runner import serve
    from mage_gym.agent.service.runtime import ServiceLimits
    from mage_gym.data.registry import NoEpisodesError

    limits = ServiceLimits(max_sessions=args.max_sessions, episode_timeout=args.episode_timeout,
                           idle_timeout=args.idle_timeout, step_timeout=args.step_timeout,
                           max_request_bytes=args.max_request_bytes)
    config = ServiceConfig(dataset=args.dataset, root=args.root, split=args.split, limit=args.limit,
                           doc_ids=tuple(d for d in args.doc_ids.split(",") if d), parser=args.parser,
                           retriever=args.retriever, vision=args.vision, max_documents=args.max_documents,
                           prebuilt_only=args.prebuilt_only,
                           threads=args.threads, limits=limits)

    def announce(line: str) -> None:
        print(line, flush=True)

    try:
        serve(config, host=args.host, port=args.port, workers=args.workers, announce=announce)
    except NoEpisodesError as err:
        raise SystemExit(str(err)) from None
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()


if __name__ == "__main__":
    main()
