"""Import openenv-core without its Gradio web UI: every service module reaches OpenEnv through here.

Why: ``openenv.core`` imports its whole server package on first import, and
that package tries Gradio for an optional web playground. Gradio costs about
5 s of import and 120 MB of resident memory per process (measured here:
205 MB against 84 MB for a process holding the server classes), paid by every
uvicorn worker and every client, for a UI this service never mounts. OpenEnv
guards that import (``except ModuleNotFoundError``), so hiding Gradio for the
duration of the first import turns the UI off cleanly; the block is lifted at
once, so the process can still import Gradio for itself afterwards.
"""
from __future__ import annotations

import sys
from types import ModuleType

INSTALL_HINT = ("the chat-env service needs openenv-core: pip install 'torch==2.13.0' -e '.[serve]' "
                "(the `serve` extra; `all` includes it)")


def openenv_server() -> ModuleType:
    """``openenv.core.env_server`` (types, Environment, HTTPEnvServer), imported without the web UI."""
    hide = "gradio" not in sys.modules and "openenv.core" not in sys.modules
    if hide:
        sys.modules["gradio"] = None  # type: ignore[assignment]  # makes `import gradio` raise ModuleNotFoundError
    try:
        import openenv.core.env_server as server
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("openenv", "fastapi", "uvicorn", "websockets"):
            raise ModuleNotFoundError(f"{INSTALL_HINT} ({err})", name=err.name) from err
        raise
    finally:
        if hide and sys.modules.get("gradio", 0) is None:
            del sys.modules["gradio"]
    return server


__all__ = ["INSTALL_HINT", "openenv_server"]
