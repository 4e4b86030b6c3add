"""Scale-out on Ray Serve: the `cyb-llm serve` app as a Ray Serve deployment of N replicas
(docs/serve.md, "Scale out on Ray"). Needs the ray extra (`pip install 'cyb_llm[ray]'`).

Each replica is a process of its own that loads the models once and runs the same app as
`cyb-llm serve` (cyb_llm.serve.command.serve_app -> create_app: same options, same answers, same errors);
Ray's HTTP proxy spreads requests over the replicas, on one machine or a cluster.

    from ray import serve
    from cyb_llm.serve.ray import deployment
    serve.run(deployment(["smollm2"], parallel=4, threads=2, num_replicas=2), route_prefix="/")

or from the command line: `cyb-llm serve smollm2 --ray --replicas 2`, or `serve run` / `serve deploy`
with `import_path: cyb_llm.serve.ray:app_builder` (its `args` are `cyb-llm serve`'s options).
Every answer names the replica that served it in the `x-cyb-replica` header (Ray's replica id)
and its process in `x-cyb-pid`.
"""
from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import signal
import sys
import threading
from typing import Any, Mapping, Sequence

try:
    import ray
    from ray import serve
except ImportError as e:  # pragma: no cover - exercised by the CLI's message
    raise ImportError("cyb-llm serve --ray needs the ray extra: pip install 'cyb_llm[ray]'") from e

from ..errors import InvalidConfig
from . import command

#: `cyb-llm serve` options that are not the app's: where to listen is the Ray proxy's (http_options),
#: and the scale-out options are the deployment's.
_NOT_APP_OPTIONS = frozenset({"func", "command", "help", "host", "port", "ray", "replicas", "ray_address"})
#: Requests a replica accepts beyond its slots and queue (health checks, /metrics while it is busy).
_SPARE_REQUESTS = 8


def serve_options(models: Sequence[str] | str | None = None, **options: Any) -> argparse.Namespace:
    """`cyb-llm serve`'s options as its parser reads them (defaults, types and checks are the CLI's):
    `models` (names or paths; a string may list several, separated by commas or spaces) and options
    by their dest name (parallel=4, ctx=2048, threads=2, api_key=..., cors_origin=[...], precise=True).
    Values may be strings (`serve run ... parallel=4`, a config file's `args`)."""
    parser = command.parser()
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    if isinstance(models, str):
        models = models.replace(",", " ").split()
    argv = [str(m) for m in (models or ())]
    for name, value in options.items():
        act = by_dest.get(name)
        if act is None or name in _NOT_APP_OPTIONS:
            raise InvalidConfig(field=name, reason="not an option of a cyb-llm serve replica (options: "
                                + ", ".join(sorted(set(by_dest) - _NOT_APP_OPTIONS)) + ")")
        if value is None:
            continue
        if act.nargs == 0:  # a flag
            on = value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")
            if on:
                argv.append(act.option_strings[0])
            continue
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            argv += [act.option_strings[-1], str(v)]
    try:
        return parser.parse_args(argv)
    except SystemExit:  # argparse has printed what is wrong
        raise InvalidConfig(field="options", reason=f"cyb-llm serve does not accept {argv}") from None


class _ReplicaApp:
    """The ASGI app of one replica: builds the server (loads the models) at the replica's ASGI
    lifespan startup, in a thread so the replica's event loop keeps answering Ray, then hands
    every request to it with the replica's id and process id as response headers."""

    def __init__(self, options: argparse.Namespace):
        self.options = {k: v for k, v in vars(options).items() if k != "func"}
        self.app: Any = None
        self.headers: list[tuple[bytes, bytes]] = []

    def _build(self) -> Any:
        app, _ = command.serve_app(argparse.Namespace(**self.options))
        return app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if self.app is None:
            self.app = await asyncio.get_running_loop().run_in_executor(None, self._build)
            try:
                tag = serve.get_replica_context().replica_tag
            except Exception:  # noqa: BLE001 - outside a replica (a direct ASGI test): the pid says enough
                tag = "-"
            self.headers = [(b"x-cyb-replica", str(tag).encode()), (b"x-cyb-pid", str(os.getpid()).encode())]
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_tagged(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                msg = dict(msg, headers=list(msg.get("headers") or []) + self.headers)
            await send(msg)

        await self.app(scope, receive, send_tagged)


def deployment(models: Sequence[str] | str | None = None, *, name: str = "cyb_llm", num_replicas: int | str | None = 1,
               autoscaling_config: Mapping[str, Any] | None = None, ray_actor_options: Mapping[str, Any] | None = None,
               max_ongoing_requests: int | None = None, **options: Any) -> Any:
    """A Ray Serve application (`serve.run` it) of replicas of `cyb-llm serve MODELS ...`.

    `options` are the server's (serve_options: parallel, ctx, threads, backend, precise, api_key,
    max_queue, request_timeout, max_body, cors_origin, shutdown_timeout, log_level). `num_replicas`,
    `autoscaling_config` (then num_replicas is left to it) and `ray_actor_options` go to
    `serve.deployment` as given; `ray_actor_options` defaults to {"num_cpus": threads} when
    `threads` is set. `max_ongoing_requests` (requests Ray lets into one replica) defaults to the
    replica's slots + queue + a few, so the server's own queue answers 429 when it is full."""
    opts = serve_options(models, **options)
    dep: dict[str, Any] = {"name": name}
    if autoscaling_config is not None:
        dep["autoscaling_config"] = dict(autoscaling_config)
        if num_replicas not in (None, 1, "auto"):
            dep["num_replicas"] = num_replicas
    elif num_replicas is not None:
        dep["num_replicas"] = num_replicas
    if ray_actor_options is None and opts.threads:
        ray_actor_options = {"num_cpus": opts.threads}
    if ray_actor_options is not None:
        dep["ray_actor_options"] = dict(ray_actor_options)
    if max_ongoing_requests is None:
        max_ongoing_requests = opts.parallel + opts.max_queue + _SPARE_REQUESTS
    params = inspect.signature(serve.deployment).parameters
    dep["max_ongoing_requests" if "max_ongoing_requests" in params else "max_concurrent_queries"] = max_ongoing_requests
    ingress = serve.ingress(_ReplicaApp(opts))(type("CybLLMServer", (), {"__doc__": "cyb-llm serve replica"}))
    return serve.deployment(ingress, **dep).bind()


#: Keys of app_builder's args that are the deployment's, not the server's.
_DEPLOYMENT_ARGS = ("name", "num_replicas", "autoscaling_config", "ray_actor_options", "max_ongoing_requests")


def app_builder(args: Mapping[str, Any]) -> Any:
    """The application builder of `serve run cyb_llm.serve.ray:app_builder models=smollm2 parallel=4
    num_replicas=2` and of a `serve deploy` config (`import_path: cyb_llm.serve.ray:app_builder`,
    `args: {models: [...], parallel: 4, num_replicas: 2, ...}`): `models`, the deployment keys
    (name, num_replicas, autoscaling_config, ray_actor_options, max_ongoing_requests) and the
    server's options (serve_options)."""
    args = dict(args)
    dep = {k: args.pop(k) for k in _DEPLOYMENT_ARGS if k in args}
    if isinstance(dep.get("num_replicas"), str) and dep["num_replicas"].isdigit():
        dep["num_replicas"] = int(dep["num_replicas"])
    if isinstance(dep.get("max_ongoing_requests"), str):
        dep["max_ongoing_requests"] = int(dep["max_ongoing_requests"])
    return deployment(args.pop("models", None), **dep, **args)


def run_cli(a: argparse.Namespace) -> int:
    """`cyb-llm serve --ray`: joins the Ray cluster (--ray-address, $RAY_ADDRESS, one started on
    this machine with `ray start`, else a new local instance), starts Serve's HTTP proxy on
    --host/--port, deploys --replicas replicas and waits for SIGINT/SIGTERM, then deletes the
    application (and stops the local instance it started)."""
    if a.replicas < 1:
        raise InvalidConfig(field="replicas", reason=f"must be >= 1, got {a.replicas}")
    app_options = {k: v for k, v in vars(a).items() if k not in _NOT_APP_OPTIONS and k != "models"}
    app = deployment(a.models, num_replicas=a.replicas, **app_options)
    ray.init(address=a.ray_address or os.environ.get("RAY_ADDRESS") or None,
             logging_level=logging.getLevelName(a.log_level.upper()))
    serve.start(http_options={"host": a.host, "port": a.port})
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.run(app, name="cyb_llm", route_prefix="/")
        print(f"cyb-llm serve --ray: {a.replicas} replica(s) on http://{a.host}:{a.port}/v1", file=sys.stderr,
              flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        serve.delete("cyb_llm")  # this application only: Serve keeps running other clusters' applications
        ray.shutdown()  # disconnects; a local instance started here stops with it
    return 0


__all__ = ["deployment", "app_builder", "serve_options", "run_cli"]
