"""``python -m mage_gym.readers.gguf_server``: llama.cpp's OpenAI-compatible server from a prebuilt wheel.

The server really listens on loopback and answers chat completions; its own
log, read back by :meth:`LlamaServer.requests`, records each completion
request with the status it got (finished, refused before generating, failed
while generating), in order. A command-line misuse exits with a clear message.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from llama_server import LlamaServer

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with _NO_PROXY.open(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _chat(content, **extra) -> bytes:
    return json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": content}], "max_tokens": 4,
                       "temperature": 0, **extra}).encode()


def test_server_answers_chat_completions_and_its_log_records_each_request(tmp_path):
    with LlamaServer(tmp_path / "server.log", alias="smollm2", n_ctx=256) as server:
        with _NO_PROXY.open(server.base_url + "/models", timeout=10) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["smollm2"]
        assert server.requests() == []  # the /models probes are not completions
        url = server.base_url + "/chat/completions"
        status, ok = _post(url, _chat("What is 2+2?"))
        assert status == 200 and isinstance(ok["choices"][0]["message"]["content"], str)
        assert ok["usage"]["completion_tokens"] <= 4
        image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
        assert _post(url, _chat(image))[0] == 500  # text-only model: refused before generating
        too_long = _post(url, _chat("word " * 400))
        assert too_long[0] == 400 and "context" in too_long[1]["error"]["message"]
        assert _post(url, b"{not json")[0] == 400
        assert server.requests(at_least=4) == [200, 500, 400, 400]
        with pytest.raises(ValueError, match="completion requests only"):
            server.requests("/v1/models")


def test_command_line_names_a_missing_model_file(tmp_path):
    missing = tmp_path / "absent.gguf"
    run = subprocess.run([sys.executable, "-m", "mage_gym.readers.gguf_server", "--model", str(missing)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "GGUF model file not found" in run.stderr and str(missing) in run.stderr
