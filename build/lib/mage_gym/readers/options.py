"""Reader backend options, checked once when a reader is built.

Why: configs are layered (a policy's default backend, a paper override, the
command line), so a backend's mapping often carries a key written for another
backend: ``max_new_tokens`` (transformers' name) under an OpenAI-compatible
backend, whose name for the same thing is ``max_tokens``. Such a key used to
reach the constructor as an unexpected keyword in the middle of a run, where
the evaluator swallowed it and silently fell back on every round. Here every
key is settled before any episode runs:

- a key the backend accepts is kept;
- a key that means the same thing under another name (:data:`RENAMED`) is
  translated; when both names are given with different values, the
  backend's own name wins and a warning says which value was dropped;
- a key for a setting the backend cannot change is accepted only at the
  value the backend always uses (:data:`FIXED`, e.g. ``temperature: 0`` for
  local greedy decoding);
- ``null`` (None) means "the backend's default" and is dropped;
- anything else fails with one :class:`ReaderConfigError` naming the backend,
  every bad key (and which backend it belongs to) and the accepted keys.
"""
from __future__ import annotations

import inspect
import logging
from typing import Any, Mapping

from mage_gym.readers.errors import ReaderConfigError

log = logging.getLogger(__name__)

#: Backend names accepted by ``get_reader`` -> canonical backend name.
BACKEND_ALIASES: dict[str, str] = {
    "hf": "hf", "transformers": "hf", "smollm2": "hf",
    "openai": "openai", "openai_compat": "openai", "vllm": "openai", "sglang": "openai", "llamacpp": "openai",
    "oracle": "oracle",
}

#: One meaning, another backend's name: ``{backend: {foreign name: own name}}``.
RENAMED: dict[str, dict[str, str]] = {
    "openai": {"max_new_tokens": "max_tokens"},
    "hf": {"max_tokens": "max_new_tokens"},
}

#: Settings a backend has no knob for: ``{backend: {name: (the value it always uses, why)}}``.
FIXED: dict[str, dict[str, tuple[Any, str]]] = {
    "hf": {
        "temperature": (0.0, "local models decode greedily (temperature 0)"),
        "prefill": (True, "local models always continue the reply prefix (switch the prefix off with the "
                          "evaluator's prompt.prefill=false)"),
    },
}


def canonical_backend(name: str) -> str:
    """``hf``, ``openai`` or ``oracle`` for any accepted alias; ReaderConfigError otherwise."""
    key = (name or "").lower()
    if key not in BACKEND_ALIASES:
        raise ReaderConfigError(f"unknown reader {name!r}; choose one of {sorted(set(BACKEND_ALIASES.values()))} "
                                f"(aliases: {sorted(BACKEND_ALIASES)})")
    return BACKEND_ALIASES[key]


def backend_class(backend: str) -> type:
    """The reader class of a canonical backend name (imports stay light: heavy libraries load on use)."""
    if backend == "hf":
        from mage_gym.readers.hf import HFReader

        return HFReader
    if backend == "openai":
        from mage_gym.readers.openai_compat import OpenAIReader

        return OpenAIReader
    if backend == "oracle":
        from mage_gym.readers.oracle import OracleReader

        return OracleReader
    raise ReaderConfigError(f"unknown reader backend {backend!r}")


def accepted_options(cls: type) -> tuple[str, ...]:
    """The keyword options of ``cls``'s constructor, sorted."""
    params = inspect.signature(cls.__init__).parameters.values()
    return tuple(sorted(p.name for p in params if p.name != "self"
                        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)))


def _owners(key: str, exclude: str) -> list[str]:
    """Other backends that accept ``key`` (for the error message)."""
    out = []
    for backend in ("hf", "openai"):
        if backend != exclude and key in accepted_options(backend_class(backend)):
            out.append(backend)
    return out


def normalise_options(backend: str, options: Mapping[str, Any], *, cls: type | None = None) -> dict[str, Any]:
    """The constructor keywords of ``backend`` for ``options`` (see the module docstring for the rules)."""
    backend = canonical_backend(backend)
    cls = cls or backend_class(backend)
    accepted = accepted_options(cls)
    renamed = RENAMED.get(backend, {})
    fixed = FIXED.get(backend, {})
    given = {str(k): v for k, v in dict(options).items() if v is not None}
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in given.items():
        if key in accepted:
            out[key] = value
        elif key in renamed:
            own = renamed[key]
            if own in given and given[own] != value:
                log.warning("%s reader backend: %s=%r and %s=%r both given; using %s=%r (%s is this backend's "
                            "name for it)", backend, key, value, own, given[own], own, given[own], own)
            elif own not in given:
                out[own] = value
        elif key in fixed:
            value_it_has, why = fixed[key]
            if value != value_it_has:
                problems.append(f"{key}={value!r} cannot be set ({why})")
        else:
            owners = _owners(key, backend)
            problems.append(f"{key!r} is not an option of this backend"
                            + (f" (an option of the {' and '.join(owners)} backend)" if owners else ""))
    if problems:
        extra = sorted(set(renamed) | set(fixed))
        raise ReaderConfigError(
            f"{backend} reader backend ({cls.__name__}): " + "; ".join(problems)
            + f". Accepted options: {', '.join(accepted)}"
            + (f" (also translated or fixed here: {', '.join(extra)})" if extra else "") + ".")
    return out


def build_reader(backend: str, options: Mapping[str, Any]) -> Any:
    """Construct a backend's reader from checked options; constructor value errors become ReaderConfigError."""
    backend = canonical_backend(backend)
    cls = backend_class(backend)
    kwargs = normalise_options(backend, options, cls=cls)
    try:
        return cls(**kwargs)
    except ReaderConfigError:
        raise
    except (TypeError, ValueError) as err:  # e.g. max_tokens="many"
        raise ReaderConfigError(f"{backend} reader backend ({cls.__name__}): bad option value: {err}") from err
