"""`cyb-llm serve`: an OpenAI-compatible HTTP server (docs/serve.md).

`create_app` (app.py) needs the serve extra (`pip install 'cyb_llm[serve]'`: FastAPI, uvicorn);
importing this package alone does not. `cyb_llm.serve.ray` deploys the same app as Ray Serve replicas
(the ray extra, `pip install 'cyb_llm[ray]'`; docs/serve.md, "Scale out on Ray").
"""
from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any):
    """cyb_llm.serve.app.create_app (imported on first use: it needs FastAPI)."""
    from .app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["create_app"]
