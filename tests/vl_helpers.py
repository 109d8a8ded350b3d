"""A tiny Qwen3-VL that plays MageRAG-Chat-v0 from OpenAI messages with images, for the vision tests.

Why scripted replies: a randomly initialised model never writes a tool call,
and images reach a tool result only after a call activates a page or opens a
figure. So each reply is chosen by a short script from what the conversation
shows (activate a listed visual element or page, open a visual element held,
stop), and the model reads the conversation with that reply in one forward
pass, the vision tower over every image, scoring the reply (what a trainer's
forward pass does with a rollout). Everything on the way is real: OpenAI
``image_url`` data URIs decoded into pixels, Qwen3-VL's own chat template
(TRL's copy, so TRL recognises it), the processor and the model. Each reply
records how many images and image tokens the model read and the reply's mean
log-probability.

``VLChatServer`` serves the policy as an OpenAI-compatible chat server on a
loopback port (what verifiers' evaluation calls). Nothing is downloaded.
"""
from __future__ import annotations

import base64
import io
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from tiny_models import SPECIAL, build_tiny_qwen3vl

VISUAL = ("table", "chart", "figure", "formula")


def vl_tokenizer(vocab_size: int = 700):
    """A BPE fitted on the toy chat env's text with Qwen3-VL's special tokens (prompts a few times shorter than
    bytes)."""
    from agent_helpers import fitted_bpe

    return fitted_bpe(vocab_size, SPECIAL)


def build_tiny_vl_chat_model(out: Path) -> Path:
    """The tiny Qwen3-VL with :func:`vl_tokenizer` and Qwen3-VL's real chat template (TRL ships a copy)."""
    from mage_gym._compat import ensure_torchvision

    ensure_torchvision()
    from trl.chat_template_utils import qwen3_vl_chat_template

    return build_tiny_qwen3vl(out, tokenizer=vl_tokenizer(), chat_template=qwen3_vl_chat_template)


def tool_call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def scripted_reply(messages: list[dict[str, Any]]) -> str:
    """Activate listed visual elements (or pages, or the first two candidates), then open a visual element held,
    then stop."""
    said = sum(m["role"] == "assistant" for m in messages)
    text = "\n".join(part.get("text", "") for m in messages for part in (
        m["content"] if isinstance(m.get("content"), list) else [{"text": m.get("content") or ""}]))
    listed = re.findall(r'<c n="(\d+)" id="[^"]+" type="(\w+)"', text)
    if said == 0 and listed:
        visual = [int(n) for n, t in listed if t in VISUAL or t == "page"][:3]
        return tool_call("activate", candidates=visual or [int(n) for n, _ in listed[:2]])
    if said == 1:
        held = re.findall(r'<(?:added|element) id="([^"]+:e\d+)" type="(\w+)"', text)
        visual = [i for i, t in held if t in VISUAL]
        if visual:
            return tool_call("open", ids=[visual[0]])
    return tool_call("stop")


def decode_image(url: str) -> Any:
    from PIL import Image

    data = base64.b64decode(url.split(",", 1)[1])
    return Image.open(io.BytesIO(data)).convert("RGB")


@dataclass
class Reading:
    """What the model read for one reply."""

    images: int
    image_tokens: int
    new_images: int = 0
    reply_logprob: float = 0.0


@dataclass
class TinyVLPolicy:
    """The tiny Qwen3-VL reading a conversation and scoring the scripted reply (see the module docstring)."""

    model_dir: Path
    readings: list[Reading] = field(default_factory=list)

    def __post_init__(self) -> None:
        from mage_gym._compat import ensure_torchvision

        ensure_torchvision()
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(self.model_dir)
        self.model = AutoModelForImageTextToText.from_pretrained(self.model_dir).eval()
        self.lock = threading.Lock()
        self._seen_images = 0

    def reply(self, messages: list[dict[str, Any]]) -> str:
        """The assistant's reply to OpenAI messages (images as ``image_url`` data URIs or PIL ``image`` parts)."""
        import torch

        target = scripted_reply(messages)
        if not any(m["role"] == "assistant" for m in messages):
            self._seen_images = 0  # a new conversation
        images, chat = [], []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list):
                parts = []
                for p in content:
                    if p.get("type") == "image_url":
                        images.append(decode_image(p["image_url"]["url"]))
                        parts.append({"type": "image"})
                    elif p.get("type") == "image":
                        images.append(p["image"].convert("RGB"))
                        parts.append({"type": "image"})
                    else:
                        parts.append({"type": "text", "text": p.get("text", "")})
                content = parts
            chat.append({**{k: v for k, v in m.items() if k in ("role", "tool_calls", "name")},
                         "content": content if content is not None else ""})
        prompt = self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        tok = self.processor.tokenizer
        n_reply = len(tok(target + "<|im_end|>", add_special_tokens=False).input_ids)
        enc = self.processor(text=[prompt + target + "<|im_end|>"], images=images or None, return_tensors="pt")
        with self.lock, torch.inference_mode():
            logits = self.model(**enc).logits[0, -n_reply - 1:-1]
        ids = enc["input_ids"][0, -n_reply:]
        logprob = float(torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).mean())
        image_id = self.model.config.image_token_id
        reading = Reading(len(images), int((enc["input_ids"] == image_id).sum()), len(images) - self._seen_images,
                          logprob)
        self._seen_images = len(images)
        self.readings.append(reading)
        return target


class VLChatServer:
    """:class:`TinyVLPolicy` as an OpenAI-compatible ``/v1/chat/completions`` server on a loopback port."""

    def __init__(self, policy: TinyVLPolicy) -> None:
        self.policy = policy
        self.requests: list[list[dict[str, Any]]] = []
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "tiny-qwen3-vl", "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.requests.append(body["messages"])
            import asyncio

            text = await asyncio.get_running_loop().run_in_executor(None, self.policy.reply, body["messages"])
            return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "tiny-qwen3-vl"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

        from mage_gym.agent.service.runner import bind

        import uvicorn

        self._sock = bind("127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._sock.close()
