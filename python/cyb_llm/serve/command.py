"""`cyb-llm serve`: its options, the app they build (models loaded, checked against the pipeline
registry) and its run under uvicorn. The CLI (cyb_llm.cli) and each Ray Serve replica
(cyb_llm.serve.ray) build the server through this module, so both take the same options and
give the same answers and errors.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any, Callable

from .. import hub, pipelines
from ..base import load as load_model_file
from ..errors import InvalidConfig

# The serve extra's packages (pyproject.toml; in the base install too). Named one by one so that a
# source install adds them without building the wheel again (pip install ".[serve]" would compile the
# native core anew: docs/install.md).
SERVE_INSTALL = ("pip install 'cyb_llm[serve]', or in a source install without compiling again: "
                 "pip install 'fastapi>=0.110' 'uvicorn>=0.29' 'python-multipart>=0.0.9'")

#: A model loader: (options, model reference) -> a loaded model.
Loader = Callable[[argparse.Namespace, str], Any]


class Usage(Exception):
    """A mistake in the command line (the CLI prints it with the usage)."""


def add_arguments(srv: argparse.ArgumentParser) -> None:
    """The options of `cyb-llm serve` on `srv`."""
    srv.add_argument("models", nargs="*", metavar="MODEL",
                     help="models to serve (path or known name; default: the hub's default model); requests "
                          "name them by this argument (a path by its file stem)")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    srv.add_argument("--port", type=int, default=8080)
    srv.add_argument("--parallel", "-np", type=int, default=1,
                     help="slots per text model: requests generating at the same time (default 1)")
    srv.add_argument("--ctx", type=int, help="context of each slot (default: min(model context, 4096))")
    srv.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (default: no key; "
                                       "also read from $CYB_LLM_API_KEY)")
    srv.add_argument("--max-queue", type=int, default=16,
                     help="requests waiting for a slot, per model, before 429 (default 16)")
    srv.add_argument("--request-timeout", type=float, default=600.0,
                     help="seconds a request may wait for a slot and run (default 600; 0 = none)")
    srv.add_argument("--max-body", type=int, default=8 * 2**20, help="largest request body in bytes (default 8 MiB)")
    srv.add_argument("--cors-origin", action="append", help="allowed CORS origin (repeatable; default: CORS off)")
    srv.add_argument("--shutdown-timeout", type=float, default=10.0,
                     help="on SIGTERM/SIGINT, seconds to let in-flight requests finish (default 10)")
    srv.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    r = srv.add_argument_group("scale-out on Ray Serve (the ray extra; docs/serve.md)")
    r.add_argument("--ray", action="store_true",
                   help="serve through Ray Serve: --replicas copies of this server behind Ray's HTTP proxy on "
                        "--host/--port (a running Ray cluster when there is one, else a local Ray instance)")
    r.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas, each loading the models once (default 1)")
    r.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, a cluster started on this "
                                         "machine with `ray start`, else a new local instance)")
    g = srv.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, wgpu+rs, ...)")
    g.add_argument("--threads", type=int, help="CPU threads per model (default: all cores)")
    g.add_argument("--precise", action="store_true", help="f32 activations and KV cache (reference-exact mode)")


def parser() -> argparse.ArgumentParser:
    """A parser of `cyb-llm serve`'s arguments alone."""
    p = argparse.ArgumentParser(prog="cyb-llm serve")
    add_arguments(p)
    return p


def serve_id(arg: str) -> str:
    """The id a served model answers to: a known name as given, a path by its file stem."""
    base = os.path.basename(os.fspath(arg).rstrip("/\\"))
    for ext in (".model", ".gguf"):
        if base.endswith(ext):
            return base[:-len(ext)]
    return base


def load_served(a: argparse.Namespace, ref: str) -> Any:
    """A served model: the numeric flags checked first (a bad request fails before a slow load), any
    reference (cyb_llm.hub.resolve), and a model whose pipeline `cyb-llm serve` takes."""
    for name, lo in (("threads", 0), ("ctx", 1)):
        v = getattr(a, name, None)
        if v is not None and v < lo:
            raise InvalidConfig(field=name, reason=f"must be >= {lo}, got {v}")
    resolved = hub.resolve(ref)
    m = load_model_file(os.fspath(getattr(resolved, "model", resolved)), backend=a.backend, precise=a.precise,
                        threads=a.threads)
    pipelines.check_verb(m, "serve", ref)
    return m


def serve_app(a: argparse.Namespace, load: Loader | None = None) -> tuple[Any, list[str]]:
    """The server's ASGI app and its model ids from `cyb-llm serve`'s options (checked, models loaded
    with `load`, default load_served): what `cyb-llm serve` runs under uvicorn and what each Ray
    Serve replica builds (cyb_llm.serve.ray)."""
    try:
        from .app import create_app  # needs the serve extra (FastAPI)
    except ImportError as e:
        raise Usage(f"serve needs the serve extra ({e.name or e} is not installed): {SERVE_INSTALL}") from None
    for name, v, lo in (("parallel", a.parallel, 1), ("max_queue", a.max_queue, 0), ("port", a.port, 0),
                        ("max_body", a.max_body, 1)):
        if v < lo:
            raise InvalidConfig(field=name, reason=f"must be >= {lo}, got {v}")
    if a.port > 65535:
        raise InvalidConfig(field="port", reason=f"must be <= 65535, got {a.port}")
    args = a.models or [hub.DEFAULT_MODEL]
    ids = [serve_id(m) for m in args]
    if len(set(ids)) != len(ids):
        raise Usage(f"two models would be served under one name: {', '.join(ids)}")
    a.exec_path, a.no_fuse = None, False
    load = load or load_served
    models = {mid: load(a, m) for mid, m in zip(ids, args)}
    app = create_app(models, parallel=a.parallel, api_key=a.api_key or os.environ.get("CYB_LLM_API_KEY"),
                     max_queue=a.max_queue, ctx=a.ctx, cors_origin=a.cors_origin,
                     request_timeout=a.request_timeout or None, max_body=a.max_body)
    return app, ids


def run(a: argparse.Namespace, load: Loader | None = None) -> int:
    """`cyb-llm serve` under uvicorn (--ray: cyb_llm.serve.ray.run_cli)."""
    try:
        import uvicorn
    except ImportError as e:
        raise Usage(f"serve needs the serve extra ({e.name or e} is not installed): {SERVE_INSTALL}") from None
    app, ids = serve_app(a, load)
    print(f"cyb-llm serve: {', '.join(ids)} on http://{a.host}:{a.port}/v1 ({a.parallel} slot(s) per text model)",
          file=sys.stderr)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # uvicorn handles SIGTERM/SIGINT: it stops accepting, waits up to the shutdown timeout for
    # in-flight requests (streams are cancelled after it) and runs the app's shutdown. It then
    # re-raises the signal to the handler it found; these no-op handlers make that an exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=a.host, port=a.port, log_level=a.log_level, access_log=False,
                timeout_graceful_shutdown=a.shutdown_timeout)
    return 0


__all__ = ["add_arguments", "parser", "serve_id", "load_served", "serve_app", "run", "Usage", "SERVE_INSTALL"]
