"""The OpenAI-compatible HTTP app (FastAPI) over loaded models; docs/serve.md describes it.

    from cyb_llm.serve import create_app
    app = create_app({"smollm2": cyb_llm.load("smollm2")}, parallel=2)
    uvicorn.run(app, port=8080)

Generation, sampling, chat templates, tool-call parsing, embeddings and transcription are the
library's (the model's methods; cyb_llm.text, cyb_llm.encode, cyb_llm.speech); which engine runs
a model and which endpoints answer for it is the pipeline registry's (cyb_llm.pipelines). This
module checks requests, schedules them on slots (engine.py) and shapes the answers.
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import Any, Callable, Mapping

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.middleware.cors import CORSMiddleware
except ImportError as e:  # pragma: no cover - exercised by the CLI's message
    raise ImportError("cyb-llm serve needs the serve extra: pip install 'cyb_llm[serve]'") from e

import numpy as np

from .. import __version__, pipelines
from ..speech.audio import load_audio
from ..errors import Error, InvalidConfig, OutOfMemory
from ..text.generate import chat_constraint, merge_chat_chunks, merge_completion_chunks
from ..text.structured import constraint_of
from ..text.toolcalls import check_tool_choice, tool_names
from ..speech.transcript import FORMATS, GRANULARITIES, render
from .engine import DONE, Job, QueueFull, QueueTimeout, RequestTimeout, TextEngine

log = logging.getLogger("cyb_llm.serve")

DEFAULT_MAX_BODY = 8 * 2**20   # bytes of a request body
MAX_AUDIO_BODY = 32 * 2**20    # bytes of an audio upload (multipart): 17 min of 16 kHz 16-bit wav
DEFAULT_MAX_QUEUE = 16         # requests waiting for a slot, per model
DEFAULT_REQUEST_TIMEOUT = 600.0
MAX_N = 8                      # choices per request
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank",
             "/v1/audio/transcriptions", "/v1/audio/translations", "/v1/audio/speech", "/v1/images/generations",
             "/v1/models", "/health", "/metrics")
SPEECH_SPEED = (0.25, 4.0)     # OpenAI's range of /v1/audio/speech's `speed`
MAX_IMAGES = 10                # OpenAI's limit of /v1/images/generations' `n`


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def api_error_of(e: BaseException) -> ApiError:
    """The answer to an exception: ApiError as it is; a cyb_llm.Error of the request 400 (OutOfMemory
    503); a timeout 503; anything else 500 (logged by the caller)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, OutOfMemory):
        return ApiError(503, f"out of memory: {e}", type="server_error", code="out_of_memory")
    if isinstance(e, Error):
        param = getattr(e, "field", None)
        return ApiError(400, f"{type(e).__name__}: {e}", param=param if isinstance(param, str) else None,
                        code=type(e).__name__)
    if isinstance(e, RequestTimeout):
        return ApiError(503, "the request ran past the server's request timeout", type="server_error",
                        code="timeout")
    return ApiError(500, f"internal error ({type(e).__name__}); the server log has the details",
                    type="server_error", code="internal_error")


# --- metrics ------------------------------------------------------------------------


class Metrics:
    """Counters for GET /metrics (Prometheus text format 0.0.4)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.prompt_tokens: dict[str, int] = defaultdict(int)
        self.completion_tokens: dict[str, int] = defaultdict(int)
        self.decode_seconds: dict[str, float] = defaultdict(float)

    def request(self, endpoint: str, status: int) -> None:
        with self.lock:
            self.requests[(endpoint, status)] += 1

    def tokens(self, model: str, usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None = None) -> None:
        with self.lock:
            if usage:
                self.prompt_tokens[model] += int(usage.get("prompt_tokens") or 0)
                self.completion_tokens[model] += int(usage.get("completion_tokens") or 0)
            if timings:
                self.decode_seconds[model] += float(timings.get("decode_ms") or 0.0) / 1000.0

    def render(self, engines: Mapping[str, Any]) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help: str, rows: list[tuple[str, Any]]) -> None:
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in rows)

        with self.lock:
            family("cyb_llm_requests_total", "counter", "HTTP requests by endpoint and status.",
                   [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in sorted(self.requests.items())])
            family("cyb_llm_prompt_tokens_total", "counter", "Prompt tokens processed.",
                   [(f'{{model="{m}"}}', n) for m, n in sorted(self.prompt_tokens.items())])
            family("cyb_llm_completion_tokens_total", "counter", "Tokens generated.",
                   [(f'{{model="{m}"}}', n) for m, n in sorted(self.completion_tokens.items())])
            family("cyb_llm_decode_seconds_total", "counter",
                   "Seconds spent decoding (completion tokens / this = tokens per second).",
                   [(f'{{model="{m}"}}', f"{v:.6f}") for m, v in sorted(self.decode_seconds.items())])
        text = {k: e for k, e in engines.items() if isinstance(e, TextEngine)}
        family("cyb_llm_queue_length", "gauge", "Requests waiting for a slot.",
               [(f'{{model="{k}"}}', e.queue_length) for k, e in text.items()])
        family("cyb_llm_active_slots", "gauge", "Slots running a request.",
               [(f'{{model="{k}"}}', e.active_slots) for k, e in text.items()])
        family("cyb_llm_slots", "gauge", "Slots (--parallel).",
               [(f'{{model="{k}"}}', len(e.slots)) for k, e in text.items()])
        return "\n".join(out) + "\n"


# --- the front: request id, API key, access log, metrics --------------------------------


class _Front:
    """ASGI middleware: a request id (the x-request-id response header), the API key check, one
    access-log line per request and the per-endpoint request counter."""

    def __init__(self, app: Any, api_key: str | None, metrics: Metrics):
        self.app = app
        self.api_key = api_key
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req-" + uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        t0 = time.perf_counter()
        status = [0]

        async def send_with_id(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
                msg = dict(msg, headers=list(msg.get("headers") or []) + [(b"x-request-id", rid.encode())])
            await send(msg)

        path = scope.get("path", "")
        try:
            if self.api_key is not None and path != "/health" and scope.get("method") != "OPTIONS" \
                    and not self._authorized(scope):
                err = ApiError(401, "missing or invalid API key (send 'Authorization: Bearer <key>')",
                               code="invalid_api_key")
                await err.response()(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            ms = (time.perf_counter() - t0) * 1000.0
            code = status[0] or 499  # no response started: the client went away (nginx's 499)
            self.metrics.request(path if path in ENDPOINTS else "other", code)
            client = scope.get("client") or ("-", 0)
            log.info("%s %s %s %s %d %.1fms", rid, client[0], scope.get("method"), path, code, ms)

    def _authorized(self, scope: dict) -> bool:
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        if given.lower().startswith("bearer "):
            given = given[7:].strip()
        else:
            given = headers.get(b"x-api-key", b"").decode("latin-1")
        return hmac.compare_digest(given.encode("utf-8"), self.api_key.encode("utf-8"))  # type: ignore[union-attr]


# --- request checks ---------------------------------------------------------------


async def read_json(request: Request, limit: int) -> dict:
    """The body as a JSON object: 413 over `limit` bytes (from Content-Length before reading, and
    while reading), 400 when it is not JSON or not an object."""
    cl = request.headers.get("content-length")
    if cl is not None:
        if not cl.isdigit():
            raise ApiError(400, f"invalid Content-Length {cl!r}", code="invalid_request")
        if int(cl) > limit:
            raise ApiError(413, f"the request body of {int(cl)} bytes is over the limit of {limit} bytes",
                           code="request_too_large")
    buf = bytearray()
    async for piece in request.stream():
        buf += piece
        if len(buf) > limit:
            raise ApiError(413, f"the request body is over the limit of {limit} bytes", code="request_too_large")
    try:
        body = json.loads(bytes(buf))
    except (ValueError, RecursionError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


def _type_error(name: str, want: str, v: Any) -> ApiError:
    return ApiError(400, f"'{name}' must be {want}, got {json.dumps(v)[:80]}", param=name, code="invalid_type")


def _bool(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _type_error(name, "a boolean", v)
    return v


def _int(body: dict, name: str, default: int, lo: int, hi: int) -> int:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise _type_error(name, "an integer", v)
    if not lo <= v <= hi:
        raise ApiError(400, f"'{name}' must be in [{lo}, {hi}], got {v}", param=name, code="invalid_value")
    return v


def _str_list(body: dict, name: str, allow_str: bool = True) -> list[str]:
    v = body.get(name)
    if isinstance(v, str) and allow_str:
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _type_error(name, "a string or a list of strings" if allow_str else "a list of strings", v)
    return v


def _unsupported(body: dict) -> None:
    """Parameters this release refuses rather than ignores."""
    if body.get("echo"):
        raise ApiError(400, "'echo' is not supported", param="echo", code="unsupported_parameter")
    if body.get("suffix") is not None:
        raise ApiError(400, "'suffix' is not supported", param="suffix", code="unsupported_parameter")
    if body.get("best_of") not in (None, 1):
        raise ApiError(400, "'best_of' is not supported", param="best_of", code="unsupported_parameter")


def _choice_seed(seed: Any, i: int) -> Any:
    """The seed of choice i of a request with n > 1: distinct, reproducible choices from one seed."""
    if i and isinstance(seed, int) and not isinstance(seed, bool):
        return (seed + i) % 2**64
    return seed


def _max_tokens_param(body: dict) -> str:
    """The request's name for the token limit: max_completion_tokens (chat, newer clients) or max_tokens."""
    return "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"


def _sampling_kwargs(body: dict) -> dict:
    """The generation keywords of cyb_llm.text.generate from the request (their types and ranges are checked
    there: InvalidConfig names the field, answered 400)."""
    name = _max_tokens_param(body)
    max_tokens = body.get(name)
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0):
        raise InvalidConfig(field=name, reason=f"must be an integer >= 0 or None, got {max_tokens!r}")
    rp = body.get("repetition_penalty")
    if rp is None:
        rp = body.get("repeat_penalty")  # llama-server's spelling
    kw = {"max_tokens": max_tokens, "repetition_penalty": rp, "stop": body.get("stop")}
    for name in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "seed",
                 "logit_bias", "response_format", "grammar"):
        kw[name] = body.get(name)
    return kw


# --- the app -----------------------------------------------------------------------


def create_app(models: Mapping[str, Any], parallel: int = 1, api_key: str | None = None,
               max_queue: int = DEFAULT_MAX_QUEUE, ctx: int | None = None, cors_origin: str | list[str] | None = None,
               request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
               max_body: int = DEFAULT_MAX_BODY) -> FastAPI:
    """The server over loaded models (id -> cyb_llm.Model; the ids are what requests name in "model";
    the first is the default). Each model gets the engine of its pipeline (cyb_llm.pipelines) and
    answers that pipeline's endpoints: text models get `parallel` slots of `ctx` positions each
    (default: min(model context, 4096)) and a queue of `max_queue`; encoder models serve
    /v1/embeddings and /v1/rerank; speech models /v1/audio/*. `request_timeout` (seconds, None =
    none) bounds the wait for a slot and the run."""
    if not models:
        raise InvalidConfig(field="models", reason="give at least one model")
    for name, v, lo in (("parallel", parallel, 1), ("max_queue", max_queue, 0), ("max_body", max_body, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise InvalidConfig(field=name, reason=f"must be an integer >= {lo}, got {v!r}")
    engines: dict[str, Any] = {}
    kinds: dict[str, pipelines.Pipeline] = {}
    for mid, m in models.items():
        kinds[mid] = pipelines.of(m)
        if not kinds[mid].engine:
            served = ", ".join(p.what for p in pipelines.PIPELINES if p.engine)
            raise InvalidConfig(field="model", reason=f"{mid!r} is one of the {kinds[mid].what}, which the server "
                                                      f"does not serve (it serves {served})")
        engines[mid] = kinds[mid].load_engine()(mid, m, parallel=parallel, ctx=ctx, max_queue=max_queue)
    default_id = next(iter(models))
    metrics = Metrics()
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        for e in engines.values():  # in-flight requests are finished or cancelled by now (uvicorn's shutdown)
            if isinstance(e, TextEngine):
                e.close()

    app = FastAPI(title="cyb_llm", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.engines = engines
    app.state.metrics = metrics
    app.add_middleware(_Front, api_key=api_key, metrics=metrics)
    if cors_origin:
        origins = [cors_origin] if isinstance(cors_origin, str) else list(cors_origin)
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST", "OPTIONS"],
                           allow_headers=["*"], expose_headers=["x-request-id"])

    # --- errors ---
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return e.response()

    @app.exception_handler(Error)
    async def _lib_error(request: Request, e: Error):
        return api_error_of(e).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        return ApiError(e.status_code, str(e.detail), code=code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        return ApiError(400, str(e), code="invalid_request").response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception):
        log.error("%s: unexpected %s", request.scope.get("state", {}).get("request_id"), type(e).__name__,
                  exc_info=e)
        return api_error_of(e).response()

    # --- helpers ---
    def engine_for(body: dict, endpoint: str) -> Any:
        """The engine of the request's model; 400 wrong_model_kind unless its pipeline serves `endpoint`."""
        mid = body.get("model", default_id)
        if mid is None:
            mid = default_id
        if not isinstance(mid, str):
            raise _type_error("model", "a string", mid)
        e = engines.get(mid)
        if e is None:
            raise ApiError(404, f"the model '{mid}' does not exist (served: {', '.join(engines)})", param="model",
                           code="model_not_found")
        if endpoint not in kinds[mid].endpoints:
            what = " or ".join(f"{'an' if p.kind[0] in 'aeiou' else 'a'} {p.kind} model"
                               for p in pipelines.PIPELINES if endpoint in p.endpoints)
            raise ApiError(400, f"the model '{mid}' is not {what} (it is a {kinds[mid].kind} model: "
                                f"{', '.join(kinds[mid].endpoints)})", param="model", code="wrong_model_kind")
        return e

    def check_context(eng: TextEngine, ids: list[int], max_tokens: Any, n: int, param: str = "max_tokens") -> None:
        if len(ids) > eng.ctx:
            raise ApiError(400, f"the prompt has {len(ids)} tokens, more than the context of {eng.ctx}",
                           param="messages", code="context_length_exceeded")
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and len(ids) + max_tokens > eng.ctx:
            raise ApiError(400, f"the prompt ({len(ids)} tokens) plus {param} ({max_tokens}) is more than the "
                                f"context of {eng.ctx} tokens", param=param, code="context_length_exceeded")

    async def start(eng: TextEngine, ids: list[int], make: Callable[[Any, int], Any], n: int) -> Job:
        """Takes a slot (or 429/503), builds the first choice's iterator (the request's errors come from
        here, before any answer is sent) and hands the run to the model's worker thread. The choices
        of one request run one after another in its slot."""
        deadline = time.monotonic() + request_timeout if request_timeout else None
        try:
            slot = await eng.acquire(ids, deadline)
        except QueueFull:
            raise ApiError(429, f"the server is busy: all {len(eng.slots)} slots of '{eng.model_id}' are taken "
                                f"and {eng.max_queue} requests wait; retry later", type="server_error",
                           code="queue_full") from None
        except QueueTimeout:
            raise ApiError(503, "no slot became free before the request timeout", type="server_error",
                           code="queue_timeout") from None
        try:
            first = await run_in_threadpool(make, slot, 0)
        except BaseException:
            eng.release(slot)
            raise

        def choices():
            for i in range(n):
                it = first if i == 0 else make(slot, i)
                try:
                    for item in it:
                        yield i, item
                finally:
                    it.close()

        job = Job(asyncio.get_running_loop(), slot, choices(), deadline)
        eng.submit(job)
        return job

    async def collect(job: Job, request: Request) -> dict[int, list[dict]]:
        """Every chunk of a job, per choice (non-streaming answers); cancels it when the client leaves."""
        per: dict[int, list[dict]] = defaultdict(list)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(job.queue.get(), 1.0)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        job.cancel()
                        raise ApiError(499, "client closed the request", code="client_closed") from None
                    continue
                if item is DONE:
                    return per
                if isinstance(item, BaseException):
                    raise item
                i, chunk = item
                per[i].append(chunk)
        finally:
            job.cancel()  # no-op when finished

    def combine(merged: list[dict], model_id: str) -> dict:
        out = dict(merged[0])
        out["model"] = model_id
        out["choices"] = [dict(m["choices"][0], index=i) for i, m in enumerate(merged)]
        usages = [m.get("usage") or {} for m in merged]
        prompt = usages[0].get("prompt_tokens", 0)
        completion = sum(u.get("completion_tokens", 0) for u in usages)
        out["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                        "total_tokens": prompt + completion}
        for m in merged:
            metrics.tokens(model_id, None, m.get("timings"))
        metrics.tokens(model_id, out["usage"])
        return out

    def sse(job: Job, model_id: str, include_usage: bool, chat: bool) -> StreamingResponse:
        async def events():
            ident = created = None
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            try:
                while True:
                    item = await job.queue.get()
                    if item is DONE:
                        break
                    if isinstance(item, BaseException):
                        err = api_error_of(item)
                        if err.status >= 500 and not isinstance(item, (RequestTimeout, OutOfMemory)):
                            log.error("unexpected %s in a stream", type(item).__name__, exc_info=item)
                        yield f"data: {json.dumps(err.body())}\n\n"
                        break
                    i, chunk = item
                    ident = ident or chunk["id"]
                    created = created or chunk["created"]
                    chunk.update(id=ident, created=created, model=model_id)
                    chunk["choices"][0]["index"] = i
                    u = chunk.pop("usage", None)
                    if u:
                        usage["prompt_tokens"] = u["prompt_tokens"] if i == 0 else usage["prompt_tokens"]
                        usage["completion_tokens"] += u["completion_tokens"]
                        metrics.tokens(model_id, {"prompt_tokens": u["prompt_tokens"] if i == 0 else 0,
                                                  "completion_tokens": u["completion_tokens"]}, chunk.get("timings"))
                    if include_usage:
                        chunk["usage"] = None
                    yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
                if include_usage and item is DONE:
                    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                    last = {"id": ident, "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": created, "model": model_id, "choices": [], "usage": usage}
                    yield f"data: {json.dumps(last)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                job.cancel()  # the client went away (or the server stops): the worker frees the slot

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def stream_flags(body: dict) -> tuple[bool, bool]:
        stream = _bool(body, "stream")
        so = body.get("stream_options")
        if so is not None and not isinstance(so, dict):
            raise _type_error("stream_options", "an object", so)
        include_usage = bool(so and _bool(so, "include_usage"))
        return stream, include_usage

    # --- endpoints ---
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await read_json(request, max_body)
        eng: TextEngine = engine_for(body, "/v1/chat/completions")
        stream, include_usage = stream_flags(body)
        n = _int(body, "n", 1, 1, MAX_N)
        _unsupported(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or \
                not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise _type_error("messages", "a non-empty list of {role, content} objects", messages)
        if getattr(eng.model, "chat", None) is None:
            raise ApiError(400, f"the model '{eng.model_id}' has no chat template; use /v1/completions",
                           param="model", code="no_chat_template")
        logprobs = _bool(body, "logprobs")
        top_logprobs = body.get("top_logprobs") or 0
        tools, tool_choice = body.get("tools"), body.get("tool_choice")
        kw = _sampling_kwargs(body)

        def encode() -> list[int]:
            rendered_tools = tools if check_tool_choice(tool_choice, tools) != "none" and tool_names(tools) else None
            # an invalid schema, grammar or tool choice: 400 before the request takes a slot
            chat_constraint(eng.model, kw["response_format"], kw["grammar"], rendered_tools, tool_choice,
                            body.get("parallel_tool_calls"))
            return eng.model.generator().encode_prompt(messages, tools=rendered_tools)

        ids = await run_in_threadpool(encode)
        check_context(eng, ids, kw["max_tokens"], n, _max_tokens_param(body))

        def make(slot: Any, i: int):
            k = dict(kw, seed=_choice_seed(kw["seed"], i))
            return eng.model.create_chat_completion(messages, stream=True, logprobs=logprobs,
                                          top_logprobs=top_logprobs, tools=tools, tool_choice=tool_choice,
                                          parallel_tool_calls=body.get("parallel_tool_calls"),
                                          generator=slot.generator, conversation=slot.conversation, **k)

        job = await start(eng, ids, make, n)
        if stream:
            return sse(job, eng.model_id, include_usage, chat=True)
        per = await collect(job, request)
        return combine([merge_chat_chunks(per[i]) for i in range(n)], eng.model_id)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await read_json(request, max_body)
        eng: TextEngine = engine_for(body, "/v1/completions")
        stream, include_usage = stream_flags(body)
        n = _int(body, "n", 1, 1, MAX_N)
        _unsupported(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt))):
            raise _type_error("prompt", "a string or a list of token ids", prompt)
        logprobs = body.get("logprobs")
        kw = _sampling_kwargs(body)
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            kw["max_tokens"] = 16  # OpenAI's default for completions
        def encode() -> list[int]:
            constraint_of(eng.model, kw["response_format"], kw["grammar"])  # invalid: 400 before taking a slot
            return eng.model.generator().encode_prompt(prompt)

        ids = await run_in_threadpool(encode)
        check_context(eng, ids, kw["max_tokens"], n, _max_tokens_param(body))

        def make(slot: Any, i: int):
            k = dict(kw, seed=_choice_seed(kw["seed"], i))
            return eng.model.create_completion(prompt, stream=True, logprobs=logprobs, generator=slot.generator,
                                               conversation=slot.conversation, **k)

        job = await start(eng, ids, make, n)
        if stream:
            return sse(job, eng.model_id, include_usage, chat=False)
        per = await collect(job, request)
        return combine([merge_completion_chunks(per[i]) for i in range(n)], eng.model_id)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await read_json(request, max_body)
        eng = engine_for(body, "/v1/embeddings")
        texts = _str_list(body, "input")
        if not texts:
            raise ApiError(400, "'input' is an empty list", param="input", code="invalid_value")
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"'encoding_format' must be 'float' or 'base64', got {fmt!r}",
                           param="encoding_format", code="invalid_value")
        if body.get("dimensions") is not None:
            raise ApiError(400, "'dimensions' is not supported", param="dimensions", code="unsupported_parameter")
        inp = body["input"] if isinstance(body["input"], str) else texts
        out = await run_in_threadpool(eng.run, lambda: eng.model.create_embedding(inp, model=eng.model_id))
        if fmt == "base64":
            for d in out["data"]:
                d["embedding"] = base64.b64encode(np.asarray(d["embedding"], dtype=np.float32).tobytes()).decode()
        metrics.tokens(eng.model_id, out.get("usage"))
        return out

    @app.post("/v1/rerank")
    async def rerank(request: Request):
        body = await read_json(request, max_body)
        eng = engine_for(body, "/v1/rerank")
        query = body.get("query")
        if not isinstance(query, str):
            raise _type_error("query", "a string", query)
        docs = _str_list(body, "documents", allow_str=False)
        top_n = _int(body, "top_n", len(docs), 0, 2**31 - 1)
        return_documents = _bool(body, "return_documents", True)
        model = eng.model

        def score() -> tuple[list[float], int]:
            tok = model.tokenizer
            used = sum(len(tok.encode(t)) for t in [query, *docs])
            if not docs:
                return [], used
            if int(model._native.num_labels) > 0:  # a cross-encoder: its own scores
                s = np.asarray(model.rerank(query, docs))
                if s.ndim != 1:
                    raise ApiError(400, f"the model '{eng.model_id}' has {s.shape[1]} labels; reranking needs a "
                                        "one-label cross-encoder", param="model", code="wrong_model_kind")
                return [float(x) for x in s], used
            v = model.embed([query, *docs], normalize=True)  # an embedding model: cosine similarity
            return [float(x) for x in v[1:] @ v[0]], used

        scores, used = await run_in_threadpool(eng.run, score)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]
        results = []
        for i in order:
            r: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            if return_documents:
                r["document"] = {"text": docs[i]}
            results.append(r)
        metrics.tokens(eng.model_id, {"prompt_tokens": used})
        return {"object": "list", "model": eng.model_id, "results": results,
                "usage": {"prompt_tokens": used, "total_tokens": used}}

    async def audio_request(request: Request, task: str) -> Any:
        """/v1/audio/transcriptions and /translations: a multipart form with `file` (any format
        soundfile reads), `model`, `language` (transcriptions), `prompt`, `temperature` (0: the
        fallback sequence 0.0, 0.2, ..., 1.0, as OpenAI's API), `response_format` and
        `timestamp_granularities[]` (segment, word: verbose_json's "words"); extensions:
        `vad_filter` (true/false: transcribe only the speech the Silero VAD finds) and
        `vad_parameters` (a JSON object of its options)."""
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(400, "the body must be multipart/form-data with a 'file' part", param="file",
                           code="invalid_request")
        cl = request.headers.get("content-length")
        if cl is not None and cl.isdigit() and int(cl) > MAX_AUDIO_BODY:
            raise ApiError(413, f"the upload of {int(cl)} bytes is over the limit of {MAX_AUDIO_BODY} bytes",
                           code="request_too_large")
        try:
            form = await request.form(max_files=1, max_fields=32)
        except Exception as e:  # malformed multipart
            raise ApiError(400, f"the multipart body cannot be read: {e}", code="invalid_request") from None
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "the form has no 'file' upload", param="file", code="invalid_request")

        def field(name: str) -> str | None:
            v = form.get(name)
            if v is not None and not isinstance(v, str):
                raise _type_error(name, "a form field", str(type(v).__name__))
            return v if v not in ("", None) else None

        endpoint = "/v1/audio/transcriptions" if task == "transcribe" else "/v1/audio/translations"
        eng = engine_for({"model": field("model")}, endpoint)
        fmt = field("response_format") or "json"
        if fmt not in FORMATS:
            raise ApiError(400, f"'response_format' must be one of {', '.join(FORMATS)}, got {fmt!r}",
                           param="response_format", code="invalid_value")
        granularities = form.getlist("timestamp_granularities[]") or ["segment"]
        for g in granularities:
            if g not in GRANULARITIES:
                raise ApiError(400, f"unknown timestamp granularity {g!r} (one of {', '.join(GRANULARITIES)})",
                               param="timestamp_granularities[]", code="invalid_value")
        words = "word" in granularities
        if words and fmt != "verbose_json":
            raise ApiError(400, "timestamp_granularities[]=word needs response_format=verbose_json, got "
                           f"{fmt!r}", param="timestamp_granularities[]", code="invalid_value")
        t = field("temperature")
        try:
            temperature = float(t) if t is not None else 0.0
        except ValueError:
            raise _type_error("temperature", "a number", t) from None
        if not (0.0 <= temperature <= 1.0):
            raise ApiError(400, f"'temperature' must be in [0, 1], got {temperature}", param="temperature",
                           code="invalid_value")
        temps = tuple(round(0.2 * i, 1) for i in range(6)) if temperature == 0.0 else (temperature,)
        language = field("language") if task == "transcribe" else None
        vf = (field("vad_filter") or "false").strip().lower()
        if vf not in ("true", "false", "1", "0"):
            raise ApiError(400, f"'vad_filter' must be true or false, got {vf!r}", param="vad_filter",
                           code="invalid_value")
        vad_filter = vf in ("true", "1")
        vad_parameters = None
        vp = field("vad_parameters")
        if vp is not None:
            from ..speech.vad import vad_options

            try:
                vad_parameters = vad_options(json.loads(vp))
            except ValueError as e:
                raise ApiError(400, f"'vad_parameters' is not a JSON object: {e}", param="vad_parameters",
                               code="invalid_value") from None
            except Error as e:
                raise ApiError(400, f"{type(e).__name__}: {e}", param="vad_parameters",
                               code="invalid_value") from None
        data = await upload.read()
        if len(data) > MAX_AUDIO_BODY:
            raise ApiError(413, f"the upload is over the limit of {MAX_AUDIO_BODY} bytes", code="request_too_large")

        def run() -> dict:
            import io

            try:
                audio = load_audio(io.BytesIO(data))
            except Error as e:
                raise ApiError(400, f"{type(e).__name__}: {e}", param="file", code="invalid_audio") from None
            return eng.model.transcribe(audio, language=language, task=task, initial_prompt=field("prompt"),
                                        temperature=temps, word_timestamps=words, vad_filter=vad_filter,
                                        vad_parameters=vad_parameters)

        result = await run_in_threadpool(eng.run, run)
        metrics.tokens(eng.model_id, {"prompt_tokens": 0,
                                      "completion_tokens": sum(len(s.get("tokens", ())) for s in result["segments"])})
        text = render(result, fmt, task=task, granularities=granularities)
        if fmt in ("json", "verbose_json"):
            return JSONResponse(json.loads(text))
        return PlainTextResponse(text)

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        return await audio_request(request, "transcribe")

    @app.post("/v1/audio/translations")
    async def translations(request: Request):
        return await audio_request(request, "translate")

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        """OpenAI's text to speech: a JSON body with `model`, `input`, `voice` (a single-voice model
        takes any name; a multi-speaker one its speaker_id_map's), `response_format` (wav, pcm, flac;
        mp3 and opus where PyAV is installed; default mp3 there, else wav), `speed` (0.25 to 4);
        extensions `seed`, `noise_scale`, `noise_w`. wav and pcm bodies stream sentence by sentence."""
        from ..tts import encode as tts_encode

        body = await read_json(request, max_body)
        eng = engine_for(body, "/v1/audio/speech")
        text = body.get("input")
        if not isinstance(text, str):
            raise _type_error("input", "a string", text)
        if not text.strip():
            raise ApiError(400, "'input' is empty", param="input", code="invalid_value")
        voice = body.get("voice")
        if voice is not None and not isinstance(voice, str):
            raise _type_error("voice", "a string", voice)
        fmt = body.get("response_format")
        if fmt is None:
            fmt = "mp3" if "mp3" in tts_encode.supported_formats() else "wav"
        try:
            fmt = tts_encode.check_format(fmt)
        except Error as e:
            raise ApiError(400, str(e.fields.get("reason") or e), param="response_format",
                           code="unsupported_value") from None
        speed = body.get("speed", 1.0)
        if speed is None:
            speed = 1.0
        if isinstance(speed, bool) or not isinstance(speed, (int, float)):
            raise _type_error("speed", "a number", speed)
        if not SPEECH_SPEED[0] <= speed <= SPEECH_SPEED[1]:
            raise ApiError(400, f"'speed' must be in [{SPEECH_SPEED[0]}, {SPEECH_SPEED[1]}], got {speed}",
                           param="speed", code="invalid_value")
        for name in ("instructions",):
            if body.get(name) is not None:
                raise ApiError(400, f"'{name}' is not supported by this model", param=name,
                               code="unsupported_parameter")
        if body.get("stream_format") not in (None, "audio"):
            raise ApiError(400, f"'stream_format' must be 'audio' (the body streams), got "
                                f"{json.dumps(body.get('stream_format'))[:40]}", param="stream_format",
                           code="unsupported_value")
        extra = {}
        for name in ("seed", "noise_scale", "noise_w"):
            if body.get(name) is not None:
                extra[name] = body[name]
        m = eng.model
        # the arguments and the text's phonemes are checked before the first byte (a 400 while we can)
        sentences = await run_in_threadpool(
            eng.run, lambda: m.speak_stream(text, voice=voice, speed=float(speed), **extra))

        def next_sentence() -> Any:
            return next(sentences, None)

        async def chunks():
            while True:
                c = await run_in_threadpool(eng.run, next_sentence)
                if c is None:
                    return
                yield c

        async def body_bytes():
            if fmt in tts_encode.STREAMED:
                if fmt == "wav":
                    yield tts_encode.wav_stream_header(m.sample_rate)
                async for c in chunks():
                    if c.size:
                        yield tts_encode.pcm16(c)
                return
            parts = [c async for c in chunks()]
            audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            yield await run_in_threadpool(tts_encode.encode, audio, m.sample_rate, fmt)

        return StreamingResponse(body_bytes(), media_type=tts_encode.MEDIA_TYPES[fmt])

    @app.post("/v1/images/generations")
    async def images(request: Request):
        """OpenAI's image generation: a JSON body with `model`, `prompt`, `n` (1 to 10), `size` ("WxH",
        multiples of 8; default the model's), `response_format` (b64_json, the default here: this
        server keeps no files to link to, so "url" is a 400); extensions `seed` (image i of the
        request uses seed + i), `negative_prompt`, `steps`, `guidance_scale`, `scheduler`. `quality`,
        `style` and `user` are accepted and ignored. The answer: {"created", "data": [{"b64_json" (a
        PNG), "revised_prompt": null, "seed"}]}."""
        from ..diffusion.model import parse_size
        from ..diffusion.png import encode_png

        body = await read_json(request, max_body)
        eng = engine_for(body, "/v1/images/generations")
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise _type_error("prompt", "a string", prompt)
        if not prompt.strip():
            raise ApiError(400, "'prompt' is empty", param="prompt", code="invalid_value")
        n = body.get("n")
        n = 1 if n is None else n
        if isinstance(n, bool) or not isinstance(n, int):
            raise _type_error("n", "an integer", n)
        if not 1 <= n <= MAX_IMAGES:
            raise ApiError(400, f"'n' must be in [1, {MAX_IMAGES}], got {n}", param="n", code="invalid_value")
        fmt = body.get("response_format")
        if fmt == "url":
            raise ApiError(400, "response_format 'url' is not supported: this server keeps no image files to "
                                "link to; ask for 'b64_json'", param="response_format", code="unsupported_value")
        if fmt not in (None, "b64_json"):
            raise ApiError(400, f"'response_format' must be 'b64_json', got {json.dumps(fmt)[:40]}",
                           param="response_format", code="invalid_value")
        width = height = None
        size = body.get("size")
        if size not in (None, "auto"):
            if not isinstance(size, str):
                raise _type_error("size", "a string WxH", size)
            try:
                width, height = parse_size(size)
            except Error as e:
                raise ApiError(400, f"'size': {e.fields.get('reason')}", param="size", code="invalid_value") from None
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed <= 2 ** 63 - 1 - MAX_IMAGES):
            raise ApiError(400, f"'seed' must be an integer in [0, 2^63 - {MAX_IMAGES + 1}], got "
                                f"{json.dumps(seed)[:40]}", param="seed", code="invalid_value")
        opts: dict[str, Any] = {}
        for name, want, types in (("negative_prompt", "a string", (str,)), ("steps", "an integer", (int,)),
                                  ("guidance_scale", "a number", (int, float)), ("scheduler", "a string", (str,))):
            v = body.get(name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, types):
                raise _type_error(name, want, v)
            opts[name] = v
        m = eng.model
        if seed is None:
            import secrets

            seed = secrets.randbits(62)
        data = []
        for i in range(n):
            try:
                img = await run_in_threadpool(eng.run, lambda i=i: m.generate_image(
                    prompt, height=height, width=width, seed=seed + i, **opts))
            except InvalidConfig as e:
                if e.fields.get("field") not in ("height", "width"):
                    raise
                raise ApiError(400, f"'size' {size}: {e.fields.get('reason')}", param="size",
                               code="invalid_value") from None
            data.append({"b64_json": base64.b64encode(encode_png(img)).decode("ascii"), "revised_prompt": None,
                         "seed": seed + i})
        return {"created": int(time.time()), "data": data}

    def model_card(mid: str) -> dict:
        e = engines[mid]
        card: dict[str, Any] = {"id": mid, "object": "model", "created": started, "owned_by": "cyb_llm"}
        card["meta"] = {"kind": kinds[mid].kind, "name": e.model.name}
        if isinstance(e, TextEngine):
            card["meta"].update(context=e.ctx, slots=len(e.slots))
        return card

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [model_card(mid) for mid in engines]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str):
        if model_id not in engines:
            raise ApiError(404, f"the model '{model_id}' does not exist", param="model", code="model_not_found")
        return model_card(model_id)

    @app.get("/health")
    async def health():
        return {"status": "ok",
                "models": {k: ({"slots": len(e.slots), "active": e.active_slots, "queued": e.queue_length}
                               if isinstance(e, TextEngine) else {"kind": kinds[k].kind})
                           for k, e in engines.items()}}

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(metrics.render(engines), media_type="text/plain; version=0.0.4")

    return app


__all__ = ["create_app", "ApiError", "Metrics", "DEFAULT_MAX_BODY", "DEFAULT_MAX_QUEUE", "DEFAULT_REQUEST_TIMEOUT"]
