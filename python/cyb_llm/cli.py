"""The `cyb-llm` command.

    cyb-llm run [MODEL] PROMPT      generate from one prompt, streaming to stdout
    cyb-llm chat [MODEL]            interactive chat keeping the KV cache between turns
    cyb-llm import SRC -o OUT       GGUF / HF checkpoint (or a known name's source) -> .model
    cyb-llm inspect MODEL           describe a .model file
    cyb-llm fetch NAME [--source]   download a known model into the cache (--source: print its GGUF/folder)
    cyb-llm pull hf://ORG/REPO[/FILE.gguf]   download through huggingface_hub, import once
    cyb-llm list | rm NAME          the models in the cache
    cyb-llm embed MODEL TEXT...     sentence embeddings of an encoder model (docs/encoders.md)
    cyb-llm transcribe MODEL FILE...   speech to text with a whisper model (docs/whisper.md)
    cyb-llm speak MODEL TEXT -o OUT.wav   text to speech with a Piper voice (docs/tts.md; `-o -`: raw PCM)
    cyb-llm imagine MODEL PROMPT -o OUT.png   text to image with a diffusion model (docs/diffusion.md)
    cyb-llm serve MODEL [MODEL...]  OpenAI-compatible HTTP server (docs/serve.md; the serve extra)
    cyb-llm run-graph MODEL --input NAME=FILE.npy ... [-o OUT.npz] [--plan]   run a graph model (docs/import.md "ONNX")

MODEL is a .model or .gguf path, an HF folder, hf://ORG/REPO[/FILE.gguf], a
known model name or a name `cyb-llm list` shows (default:
cyb_llm.hub.DEFAULT_MODEL), the same for every command and for cyb_llm.load:
cyb_llm.hub.resolve reads them all. Names, .gguf files and folders are
imported into the cache once and reused. Which commands take a model is its pipeline's
(cyb_llm.pipelines: text models run, chat, serve, bench; encoders embed, serve; whisper models
transcribe, serve; tts models speak, serve; diffusion models imagine, serve; graphs run-graph). Errors of the request or of the model file print one line,
`error: <Class>: <message>`, and exit with status 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from . import __version__, pipelines
from .base import load
from .errors import Error, InvalidConfig
from .text.sampling import SamplingParams
from .serve import command as serve_command
from .speech.transcript import render

# --- model loading (a seam for tests) -------------------------------------------


def resolve_model_path(arg: str | None) -> str:
    """A .model path for MODEL: what cyb_llm.hub.resolve gives (fetching and importing on first use)."""
    from . import hub

    resolved = hub.resolve(arg or hub.DEFAULT_MODEL)
    return os.fspath(getattr(resolved, "model", resolved))


def load_model(arg: str | None, backend: str | None = None, precise: bool = False,
               threads: int | None = None, **graph_opts: Any) -> Any:
    return load(resolve_model_path(arg), backend=backend, precise=precise, threads=threads, **graph_opts)


# --- argument parsing ------------------------------------------------------------


def _model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, wgpu+rs, nox, ...); unsupported ops still fall back to cpu")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    g.add_argument("--precise", action="store_true", help="f32 activations and KV cache (reference-exact mode)")
    g.add_argument("--ctx", type=int, help="context length of the conversation (default: min(model context, 4096))")
    g.add_argument("--path", choices=("curated", "graph"), dest="exec_path",
                   help="execution path (default: curated when the family has one, else the graph section)")
    g.add_argument("--no-fuse", action="store_true", help="graph path: skip the fusion pass")


def _sampling_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling (defaults: the model's [sampling] section, then llama.cpp's)")
    g.add_argument("--max-tokens", "-n", type=int, help="stop after this many tokens (default: EOS or context end)")
    g.add_argument("--temperature", "--temp", type=float, help="0 = greedy")
    g.add_argument("--top-k", type=int, help="0 = off")
    g.add_argument("--top-p", type=float, help="1 = off")
    g.add_argument("--min-p", type=float, help="0 = off")
    g.add_argument("--repeat-penalty", type=float, help="repetition penalty (1 = off)")
    g.add_argument("--repeat-last-n", type=int, help="penalty window in tokens (-1 = all, 0 = off)")
    g.add_argument("--presence-penalty", type=float)
    g.add_argument("--frequency-penalty", type=float)
    g.add_argument("--seed", type=int, help="same seed, same text")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable); never printed")
    g.add_argument("--system", help="system message (chat template only)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cyb-llm", description="Run .model packages: text generation, chat, import.")
    ap.add_argument("--version", action="version", version=f"cyb-llm {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="generate from one prompt, streaming to stdout")
    run.add_argument("args", nargs="+", metavar="[MODEL] PROMPT",
                     help="optional model (path or name), then the prompt ('-' reads it from stdin)")
    _model_options(run)
    _sampling_options(run)
    run.add_argument("--no-chat", action="store_true", help="raw completion: do not apply the chat template")
    run.add_argument("--json", action="store_true", help="print the text and the timings as one JSON object")
    run.add_argument("--profile", action="store_true", help="print the per-op dispatch records after the run")
    run.add_argument("--quiet", "-q", action="store_true", help="no timing line on stderr")
    run.set_defaults(func=cmd_run)

    chat = sub.add_parser("chat", help="interactive chat (keeps the conversation's KV cache between turns)")
    chat.add_argument("model", nargs="?", help="model path or name (default: the hub's default model)")
    _model_options(chat)
    _sampling_options(chat)
    chat.add_argument("--quiet", "-q", action="store_true", help="no timing line after each answer")
    chat.set_defaults(func=cmd_chat)

    imp = sub.add_parser("import", help="convert a GGUF file, an HF checkpoint or an ONNX file into a .model")
    imp.add_argument("src", nargs="?", help="a .gguf or .onnx file, an HF / CTranslate2 folder, hf://ORG/REPO[/FILE.gguf] "
                                            "or a known name (its source, fetched once)")
    imp.add_argument("--stage", action="append", metavar="NAME=FILE.onnx",
                     help="one stage of a several-graph model (repeat: --stage unet=unet.onnx --stage "
                          "vae_decoder=vae.onnx; with --pipeline; instead of SRC)")
    imp.add_argument("--tokenizer", metavar="TOKENIZER.json",
                     help="with --stage: an HF tokenizer.json kept in the file (a diffusion model's CLIP tokenizer)")
    imp.add_argument("--config-json", metavar="FILE.json",
                     help="with --stage: more config tables, a JSON object ({\"diffusion\": {...}}: docs/diffusion.md)")
    imp.add_argument("-o", "--output", required=True)
    imp.add_argument("--quantize", help="weight encoding to quantize to (names in docs/format.md)")
    imp.add_argument("--graph", action="store_true", help="also write a graph section")
    imp.add_argument("--pipeline", choices=("graph", "tts", "diffusion"),
                     help="ONNX: what the graph is for, recorded in the config (default: graph)")
    imp.add_argument("--vocoder", metavar="VOCODER.onnx",
                     help="a SpeechT5 folder: the vocoder graph (mel -> audio) stored as the model's vocoder stage")
    imp.set_defaults(func=cmd_import)

    insp = sub.add_parser("inspect", help="describe a model (config, sampling, tensors)")
    insp.add_argument("path", metavar="MODEL", help="model path or name, as for run")
    insp.set_defaults(func=cmd_inspect)

    fetch = sub.add_parser("fetch", help="download and import a known model into the cache")
    fetch.add_argument("name")
    fetch.add_argument("--source", action="store_true",
                       help="print the path of the downloaded source (the .gguf file or HF folder), not of its .model")
    fetch.set_defaults(func=cmd_fetch)

    pull = sub.add_parser("pull", help="download a model: hf://ORG/REPO[/FILE.gguf] or a known name; import it once")
    pull.add_argument("ref")
    pull.set_defaults(func=cmd_pull)

    lst = sub.add_parser("list", help="the models in the cache (name, size, family, encodings, source)")
    lst.set_defaults(func=cmd_list)

    rm = sub.add_parser("rm", help="remove a model from the cache (a name as `cyb-llm list` shows it)")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_rm)

    emb = sub.add_parser("embed", help="sentence embeddings of an encoder model (BERT family)")
    emb.add_argument("model", help="encoder .model path, HF folder or known name (e.g. minilm)")
    emb.add_argument("texts", nargs="+", metavar="TEXT", help="texts to embed ('-' reads one text per line from stdin)")
    emb.add_argument("--pooling", choices=("cls", "mean", "max"), help="default: the model's [pooling] (else mean)")
    emb.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                     help="L2-normalize (default: the model's [pooling])")
    emb.add_argument("--batch-size", type=int, default=32)
    emb.add_argument("--no-truncate", action="store_true", help="refuse texts longer than the model's limit")
    emb.add_argument("--json", action="store_true", help="print {model, dim, embeddings} as one JSON object")
    g = emb.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, wgpu+rs, ...)")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    g.add_argument("--precise", action="store_true", help="f32 activations (reference-exact mode)")
    emb.set_defaults(func=cmd_embed)

    tr = sub.add_parser("transcribe", help="speech to text with a whisper model (whisper-tiny, whisper-base, ...)")
    tr.add_argument("model", help="whisper .model path, CTranslate2/HF folder or known name (e.g. whisper-tiny)")
    tr.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, ogg, mp3, ...)")
    fmt = tr.add_mutually_exclusive_group()
    for f in ("json", "srt", "vtt", "verbose_json"):
        fmt.add_argument("--" + f.replace("_", "-"), dest="format", action="store_const", const=f,
                         help=f"print {f} (default: the text)")
    tr.add_argument("--language", help="spoken language code (default: detected, multilingual models)")
    tr.add_argument("--translate", action="store_true", help="translate to English (multilingual models)")
    tr.add_argument("--beam-size", type=int, default=5, help="beam width (1: greedy)")
    tr.add_argument("--initial-prompt", help="text that conditions the first window")
    tr.add_argument("--no-timestamps", action="store_true", help="decode without timestamp tokens")
    tr.add_argument("--word-timestamps", action="store_true",
                    help="word start / end times (cross-attention alignment): \"words\" in --json / --verbose-json")
    tr.add_argument("--vad-filter", action="store_true",
                    help="transcribe only the speech that the Silero VAD finds (faster-whisper's vad_filter; "
                         "times stay those of the file)")
    tr.add_argument("--vad-parameters", metavar="JSON",
                    help="VAD options as a JSON object, e.g. '{\"min_silence_duration_ms\": 500}' (threshold, "
                         "neg_threshold, min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms, "
                         "speech_pad_ms)")
    tr.add_argument("-o", "--output-dir", help="write FILE.<format> there instead of printing")
    g = tr.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, wgpu+rs, ...)")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    g.add_argument("--precise", action="store_true", help="f32 activations (reference-exact mode)")
    tr.set_defaults(func=cmd_transcribe, format="text")

    sp = sub.add_parser("speak", help="text to speech with a Piper voice (piper-joe, or a voice .onnx imported)")
    sp.add_argument("model", help="tts .model path, a Piper voice .onnx (with its .onnx.json) or known name (piper-joe)")
    sp.add_argument("text", help="the text to say ('-': read it from stdin)")
    sp.add_argument("-o", "--output", required=True,
                    help="audio file (.wav or .flac: by its extension) or '-': raw 16-bit mono PCM on stdout")
    sp.add_argument("--voice", help="voice name or speaker id (multi-speaker voices; a single voice takes any name)")
    sp.add_argument("--speed", type=float, default=1.0, help="speaking rate (length_scale / speed; default 1.0)")
    sp.add_argument("--seed", type=int, help="noise seed (default: fresh noise each run)")
    sp.add_argument("--noise-scale", type=float, help="generator noise (default: the voice's own)")
    sp.add_argument("--noise-w", type=float, help="phoneme width noise (default: the voice's own)")
    sp.add_argument("--sentence-silence", type=float, default=0.0, help="seconds of silence between sentences")
    g = sp.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, nox)")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.set_defaults(func=cmd_speak, precise=False)

    im = sub.add_parser("imagine", help="text to image (or image to image) with a diffusion model")
    im.add_argument("model", help="diffusion .model path (docs/diffusion.md)")
    im.add_argument("prompt", help="what to draw ('-': read it from stdin)")
    im.add_argument("-o", "--output", required=True, help="the image, a .png file")
    im.add_argument("--negative-prompt", default=None, help="what to steer away from (default: the empty prompt)")
    im.add_argument("--steps", type=int, default=20, help="denoising steps (default 20)")
    im.add_argument("--guidance", type=float, default=7.5,
                    help="classifier-free guidance scale (default 7.5; <= 1: no guidance, one UNet half)")
    im.add_argument("--size", default=None, metavar="WxH", help="image size, multiples of 8 (default: the model's)")
    im.add_argument("--seed", type=int, help="the seed of the numpy noise stream (default: a fresh one, printed)")
    im.add_argument("--scheduler", default="euler",
                    help="ddim, euler, euler_a, dpmpp_2m, dpmpp_2m_karras or lcm (default euler)")
    im.add_argument("--image", help="img2img: start from this image (PNG, JPEG: needs Pillow)")
    im.add_argument("--strength", type=float, default=0.8, help="img2img: how much of the schedule runs (0..1]")
    g = im.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, wgpu+rs, nox)")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    im.set_defaults(func=cmd_imagine, precise=False)

    rg = sub.add_parser("run-graph", help="run a graph model (imported from ONNX) on arrays from .npy files")
    rg.add_argument("model", help="graph .model path (cyb-llm import model.onnx -o MODEL)")
    rg.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy", dest="inputs",
                    help="one input of the graph from a .npy file (repeat for each input)")
    rg.add_argument("-o", "--output", help="write the outputs to this .npz file (numpy.load reads them by name)")
    rg.add_argument("--plan", action="store_true",
                    help="print the memory plan of this run before it runs, and what the run held after "
                         "(docs/graph.md \"Shapes and the memory plan\")")
    g = rg.add_argument_group("model")
    g.add_argument("--backend", help="force a backend (cpu, nox)")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    rg.set_defaults(func=cmd_run_graph, precise=False)

    srv = sub.add_parser("serve", help="OpenAI-compatible HTTP server (FastAPI and uvicorn: in the base install)")
    serve_command.add_arguments(srv)
    srv.set_defaults(func=cmd_serve)

    bench = sub.add_parser("bench", help="CPU benchmark against llama.cpp (same GGUF, same threads)",
                           add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of bench/bench_cpu.py (--help)")
    bench.set_defaults(func=cmd_bench)
    return ap


def _sampling(model: Any, a: argparse.Namespace):
    return SamplingParams.from_model(
        model, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
        repetition_penalty=a.repeat_penalty, penalty_last_n=a.repeat_last_n,
        presence_penalty=a.presence_penalty, frequency_penalty=a.frequency_penalty,
        seed=a.seed, stop=a.stop or None)


def _load(a: argparse.Namespace, model_arg: str | None, verb: str) -> Any:
    """Checks the numeric flags first (a bad request fails before a slow load), then loads, then
    checks that the command `verb` takes the model's pipeline (cyb_llm.pipelines)."""
    for name, lo in (("threads", 0), ("max_tokens", 0), ("ctx", 1)):
        v = getattr(a, name, None)
        if v is not None and v < lo:
            raise InvalidConfig(field=name, reason=f"must be >= {lo}, got {v}")
    graph_opts: dict[str, Any] = {}
    if getattr(a, "exec_path", None):
        graph_opts["exec_path"] = a.exec_path
    if getattr(a, "no_fuse", False):
        graph_opts["fuse"] = False
    m = load_model(model_arg, backend=a.backend, precise=a.precise, threads=a.threads, **graph_opts)
    pipelines.check_verb(m, verb, model_arg)
    return m


def _timing_line(stats: Any) -> str:
    s = stats
    parts = []
    if s.load_ms is not None:
        parts.append(f"load {s.load_ms:.0f} ms")
    new = s.prompt_tokens - s.cached_tokens
    parts.append(f"prompt {new} tok in {s.prefill_ms:.0f} ms ({s.prefill_tokens_per_s:.1f} tok/s)"
                 + (f", {s.cached_tokens} cached" if s.cached_tokens else ""))
    parts.append(f"{s.completion_tokens} tok at {s.tokens_per_s:.1f} tok/s ({s.step_ms:.1f} ms/tok, "
                 f"python {100 * s.python_overhead:.1f}% of a forward)")
    return "[" + " | ".join(parts) + "]"


def _profile_lines(model: Any) -> list[str]:
    """One line per dispatch label (a graph node, or a curated op label), e.g.
    "layers.5.attention: cpu 0.12 ms/call  x33  (4.02 ms)", "rope: cpu (fallback)"."""
    lines = []
    path = getattr(model, "execution_path", None)
    if isinstance(path, str):
        head = f"path: {path}"
        rep = getattr(model, "fusion_report", "")
        if path == "graph" and isinstance(rep, str) and rep:
            head += f" ({rep})"
        lines.append(head)
    for r in getattr(model, "dispatch_records", None) or []:
        if isinstance(r, dict):
            label = r.get("label") or r.get("op", "?")
            line = f"{label}: {r.get('backend', '?')}"
            count = r.get("count")
            if r.get("total_ms") and count:
                line += f" {r['total_ms'] / count:.3f} ms/call"
            if r.get("fallback"):
                line += " (fallback)"
            if r.get("op") and r.get("op") != label:
                line += f"  [{r['op']}]"
            if count is not None:
                line += f"  x{count}"
            if r.get("total_ms"):
                line += f"  ({r['total_ms']:.2f} ms)"
        else:
            line = str(r)
        lines.append(line)
    return lines


# --- commands -----------------------------------------------------------------------


def cmd_run(a: argparse.Namespace) -> int:
    if len(a.args) > 2:
        raise _Usage("run takes [MODEL] PROMPT (quote the prompt)")
    model_arg, prompt = (None, a.args[0]) if len(a.args) == 1 else a.args
    if prompt == "-":
        prompt = sys.stdin.read()
    model = _load(a, model_arg, "run")
    if a.profile and hasattr(model, "set_profiling"):
        model.set_profiling(True)
    params = _sampling(model, a)
    gen = model.generator()
    if a.no_chat or getattr(model, "chat", None) is None:
        request: Any = prompt
    else:
        request = ([{"role": "system", "content": a.system}] if a.system else []) + \
                  [{"role": "user", "content": prompt}]
    conv = model.new_conversation(max_context=a.ctx) if a.ctx else None
    stream = gen.generate(request, max_tokens=a.max_tokens, sampling=params, conversation=conv)
    out = sys.stdout
    with stream:
        for chunk in stream:
            if not a.json and chunk.text:
                out.write(chunk.text)
                out.flush()
    st = stream.stats
    if a.json:
        doc = {
            "model": getattr(model, "name", None),
            "text": stream.text,
            "finish_reason": stream.finish_reason,
            "usage": {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens},
            "timings": st.as_dict(),
        }
        if a.profile:
            doc["dispatch_records"] = list(getattr(model, "dispatch_records", None) or [])
        out.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
        return 0
    out.write("\n")
    out.flush()
    if not a.quiet:
        print(_timing_line(st), file=sys.stderr)
    if a.profile:
        for line in _profile_lines(model):
            print(line, file=sys.stderr)
    return 0


def cmd_chat(a: argparse.Namespace) -> int:
    model = _load(a, a.model, "chat")
    if getattr(model, "chat", None) is None:
        raise InvalidConfig(field="chat_template", reason=f"model {getattr(model, 'name', '?')!r} has no chat "
                                                          "template; use `cyb-llm run --no-chat`")
    params = _sampling(model, a)
    gen = model.generator()
    conv = model.new_conversation(max_context=a.ctx)
    system = [{"role": "system", "content": a.system}] if a.system else []
    messages: list[dict] = list(system)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"cyb-llm chat: {getattr(model, 'name', '')}  (/reset clears the conversation, /exit or Ctrl-D ends)",
              file=sys.stderr)
    while True:
        if interactive:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:  # EOF
            if interactive:
                sys.stderr.write("\n")
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit", "/bye"):
            return 0
        if text == "/reset":
            messages = list(system)
            conv.reset_kv_cache()
            print("(conversation cleared)", file=sys.stderr)
            continue
        messages.append({"role": "user", "content": text})
        try:
            stream = gen.generate(messages, max_tokens=a.max_tokens, sampling=params, conversation=conv)
        except Error as e:  # e.g. the conversation no longer fits the context: the REPL goes on
            messages.pop()
            print(f"error: {type(e).__name__}: {e} (/reset starts over)", file=sys.stderr)
            continue
        try:
            with stream:
                for chunk in stream:
                    if chunk.text:
                        sys.stdout.write(chunk.text)
                        sys.stdout.flush()
        except KeyboardInterrupt:  # stop this answer, keep the session
            pass
        sys.stdout.write("\n")
        sys.stdout.flush()
        messages.append({"role": "assistant", "content": stream.text})
        if not a.quiet:
            print(_timing_line(stream.stats), file=sys.stderr)


def cmd_embed(a: argparse.Namespace) -> int:
    texts = [line.rstrip("\n") for line in sys.stdin] if a.texts == ["-"] else a.texts
    m = _load(a, a.model, "embed")
    vecs = m.embed(texts, normalize=a.normalize, pooling=a.pooling, batch_size=a.batch_size, truncate=not a.no_truncate)
    if a.json:
        print(json.dumps({"model": m.name, "dim": int(vecs.shape[1]), "embeddings": vecs.tolist()}))
        return 0
    for t, v in zip(texts, vecs):
        head = ", ".join(f"{x:.4f}" for x in v[:6])
        print(f"{len(v)} dims [{head}, ...]  {t[:60]!r}")
    return 0


def _read_inputs(specs: list[str]) -> dict[str, Any]:
    """{name: array} of `--input NAME=FILE.npy` options; InvalidConfig(field="input") naming the
    option for a malformed one, a name given twice, a missing or unreadable file."""
    import numpy as np

    feeds: dict[str, Any] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise InvalidConfig(field="input", reason=f"{spec!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise InvalidConfig(field="input", reason=f"input {name!r} given twice")
        if not os.path.isfile(path):
            raise InvalidConfig(field="input", reason=f"{name}={path}: no such file")
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy's reasons (not .npy, truncated, object arrays)
            raise InvalidConfig(field="input", reason=f"{name}={path}: not a readable .npy array ({e})") from None
        if not isinstance(arr, np.ndarray):  # an .npz archive
            arr.close()
            raise InvalidConfig(field="input", reason=f"{name}={path}: an .npz archive; give one .npy array per input")
        feeds[name] = arr
    return feeds


def _values_text(v: Any, n: int = 6) -> str:
    flat = v.reshape(-1)
    head = ", ".join(str(x) if v.dtype.kind in "biu" else f"{float(x):.6g}" for x in flat[:n])
    return f"[{head}{', ...' if flat.size > n else ''}]"


def cmd_run_graph(a: argparse.Namespace) -> int:
    import numpy as np

    feeds = _read_inputs(a.inputs)  # the request's errors before the load
    if a.output and not a.output.endswith(".npz"):
        raise InvalidConfig(field="output", reason=f"{a.output!r}: the outputs are written as an .npz file")
    m = _load(a, a.model, "run-graph")
    missing = [i for i in m.inputs if i.name not in feeds]
    if missing:
        raise InvalidConfig(field="input", reason="missing " + ", ".join(
            f"{i.name} ({i.dtype} [{', '.join(map(str, i.shape))}])" for i in missing) +
            f": give each as --input NAME=FILE.npy")
    if a.plan:
        p = m.memory_plan(**m.plan_dims(feeds))
        dims = ", ".join(f"{k}={v}" for k, v in p["dims"].items()) or "no dims"
        bound = "" if p["complete"] else f" (a lower bound: {len(p['unknown'])} values sized by the data at run time)"
        print(f"plan ({dims}): peak {p['peak_bytes']} bytes{bound}; {len(p['values'])} values, "
              f"{p['reused']} on reused bytes; {p['sum_bytes']} bytes each in its own buffer, "
              f"at most {p['live_max_bytes']} alive at once")
    out = m.run(feeds)
    if a.plan:
        r = m.last_run_memory()
        print(f"held: {r['measured_peak']} bytes at most (planned arena {r['planned_peak']}, "
              f"{r['dynamic_peak']} in buffers sized at run time)")
    for name, v in out.items():
        print(f"{name}  {v.dtype}  [{', '.join(map(str, v.shape))}]  {_values_text(v)}")
    if a.output:
        folder = os.path.dirname(os.path.abspath(a.output))
        tmp = os.path.join(folder, f".{os.path.basename(a.output)}.tmp.npz")
        try:
            np.savez(tmp, **out)
            os.replace(tmp, a.output)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        print(f"wrote {a.output}", file=sys.stderr)
    return 0


_SPEAK_FORMATS = {".wav": "WAV", ".flac": "FLAC"}


def cmd_speak(a: argparse.Namespace) -> int:
    import time

    if a.output != "-" and os.path.splitext(a.output)[1].lower() not in _SPEAK_FORMATS:
        raise InvalidConfig(field="output", reason=f"{a.output!r}: write .wav or .flac (by the extension), or "
                                                   "'-' for raw 16-bit PCM on stdout")
    text = sys.stdin.read() if a.text == "-" else a.text
    m = _load(a, a.model, "speak")
    t0 = time.perf_counter()
    show = sys.stderr.isatty() or bool(os.environ.get("CYB_LLM_PROGRESS"))
    done = {"n": 0}

    def progress(i: int, n: int) -> None:
        done["n"] = n
        if n > 1 and show:
            print(f"\rspeak: sentence {i + 1}/{n}", end="", file=sys.stderr, flush=True)

    # the arguments are checked here, before the output file is opened
    chunks = m.speak_stream(text, voice=a.voice, speed=a.speed, seed=a.seed, noise_scale=a.noise_scale,
                            noise_w=a.noise_w, sentence_silence=a.sentence_silence, on_sentence=progress)
    samples = 0
    if a.output == "-":
        from .tts.encode import pcm16

        for c in chunks:
            sys.stdout.buffer.write(pcm16(c))
            sys.stdout.buffer.flush()
            samples += c.size
    else:
        import soundfile

        from .tts.encode import int16

        tmp = os.path.join(os.path.dirname(os.path.abspath(a.output)), f".{os.path.basename(a.output)}.tmp")
        try:
            with soundfile.SoundFile(tmp, "w", samplerate=m.sample_rate, channels=1, subtype="PCM_16",
                                     format=_SPEAK_FORMATS[os.path.splitext(a.output)[1].lower()]) as f:
                for c in chunks:
                    f.write(int16(c))  # piper-tts's 16-bit conversion (soundfile's own rounds otherwise)
                    samples += c.size
            os.replace(tmp, a.output)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    dt = time.perf_counter() - t0
    secs = samples / m.sample_rate
    if done["n"] > 1 and show:
        print(file=sys.stderr)
    where = "stdout (16-bit PCM)" if a.output == "-" else a.output
    print(f"wrote {where}: {secs:.2f} s of audio at {m.sample_rate} Hz, {done['n']} sentences, in {dt:.2f} s "
          f"(real-time factor {dt / secs if secs else 0:.2f})", file=sys.stderr)
    return 0


def cmd_imagine(a: argparse.Namespace) -> int:
    import time

    from .diffusion.model import parse_size
    from .diffusion.png import save_png

    if os.path.splitext(a.output)[1].lower() != ".png":
        raise InvalidConfig(field="output", reason=f"{a.output!r}: the image is written as a .png file")
    prompt = sys.stdin.read().strip() if a.prompt == "-" else a.prompt
    width, height = parse_size(a.size) if a.size else (None, None)
    image = None
    if a.image:
        from PIL import Image

        image = Image.open(a.image)
    m = _load(a, a.model, "imagine")
    show = sys.stderr.isatty() or bool(os.environ.get("CYB_LLM_PROGRESS"))
    t0 = time.perf_counter()

    def progress(i: int, t: Any, latents: Any) -> None:
        if show:
            n = m.last_steps
            done = int(30 * (i + 1) / max(n, 1))
            print(f"\rimagine: [{'#' * done}{'.' * (30 - done)}] step {i + 1}/{n}", end="", file=sys.stderr,
                  flush=True)

    img = m.generate_image(prompt, negative_prompt=a.negative_prompt, steps=a.steps, guidance_scale=a.guidance,
                           height=height, width=width, seed=a.seed, scheduler=a.scheduler, image=image,
                           strength=a.strength, callback=progress)
    if show:
        print(file=sys.stderr)
    tmp = os.path.join(os.path.dirname(os.path.abspath(a.output)), f".{os.path.basename(a.output)}.tmp")
    try:
        save_png(img, tmp)
        os.replace(tmp, a.output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    st = m.last_stats
    print(f"seed {st.seed}", file=sys.stderr)
    print(f"wrote {a.output}: {st.width}x{st.height}, {st.steps} steps ({st.scheduler}, guidance {st.guidance_scale:g}) "
          f"in {time.perf_counter() - t0:.2f} s [text {st.text_encoder_ms:.0f} ms | unet {st.unet_ms:.0f} ms, "
          f"{st.unet_steps_per_s:.2f} steps/s | vae {st.vae_encoder_ms + st.vae_decoder_ms:.0f} ms]", file=sys.stderr)
    return 0


def cmd_transcribe(a: argparse.Namespace) -> int:
    if a.beam_size < 1:
        raise InvalidConfig(field="beam_size", reason=f"must be >= 1, got {a.beam_size}")
    for f in a.files:
        if not os.path.isfile(f):
            raise InvalidConfig(field="files", reason=f"no such file: {f}")
    vad_parameters = None
    if a.vad_parameters is not None:
        if not a.vad_filter:
            raise InvalidConfig(field="vad_parameters", reason="needs --vad-filter")
        try:
            vad_parameters = json.loads(a.vad_parameters)
        except ValueError as e:
            raise InvalidConfig(field="vad_parameters", reason=f"not JSON: {e}") from None
        from .speech.vad import vad_options

        vad_parameters = vad_options(vad_parameters)  # a bad key / value fails before the model loads
    m = _load(a, a.model, "transcribe")
    if a.word_timestamps and a.format not in ("json", "verbose_json"):
        raise InvalidConfig(field="word_timestamps", reason="shows in --json or --verbose-json output only")
    task = "translate" if a.translate else "transcribe"
    granularities = ("segment", "word") if a.word_timestamps else ("segment",)
    for f in a.files:
        result = m.transcribe(f, language=a.language, task=task, beam_size=a.beam_size,
                              initial_prompt=a.initial_prompt, without_timestamps=a.no_timestamps,
                              word_timestamps=a.word_timestamps, vad_filter=a.vad_filter,
                              vad_parameters=vad_parameters)
        out = render(result, a.format, task=task, granularities=granularities)
        if a.output_dir:
            os.makedirs(a.output_dir, exist_ok=True)
            ext = {"verbose_json": "json", "text": "txt"}.get(a.format, a.format)
            dst = os.path.join(a.output_dir, os.path.splitext(os.path.basename(f))[0] + "." + ext)
            with open(dst, "w", encoding="utf-8") as fh:
                fh.write(out if out.endswith("\n") else out + "\n")
            print(dst, file=sys.stderr)
        else:
            if len(a.files) > 1:
                print(f"==> {f} <==")
            print(out.rstrip("\n"))
    return 0


def serve_app(a: argparse.Namespace) -> tuple[Any, list[str]]:
    """The server's ASGI app and its model ids from `cyb-llm serve`'s options, the models loaded as
    the other commands load them (cyb_llm.serve.command.serve_app)."""
    return serve_command.serve_app(a, load=lambda a, ref: _load(a, ref, "serve"))


def cmd_serve(a: argparse.Namespace) -> int:
    if a.ray:
        try:
            from .serve.ray import run_cli  # the ray extra
        except ImportError as e:
            raise _Usage(f"serve --ray needs the ray extra ({e.name or e} is not installed): "
                         "pip install 'cyb_llm[ray]'")
        return run_cli(a)
    return serve_command.run(a, load=lambda a, ref: _load(a, ref, "serve"))


def cmd_import(a: argparse.Namespace) -> int:
    from .convert import import_model

    from .hub import resolve_source

    if a.stage:
        from .convert.onnx_graph import import_onnx_stages

        if a.src is not None:
            raise InvalidConfig(field="stage", reason="give either SRC or --stage NAME=FILE.onnx, not both")
        stages = {}
        for spec in a.stage:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path or name in stages:
                raise InvalidConfig(field="stage", reason=f"{spec!r}: NAME=FILE.onnx, each name once")
            stages[name] = path
        tokenizer_json = None
        if a.tokenizer:
            with open(a.tokenizer, encoding="utf-8") as f:
                tokenizer_json = f.read()
        extra_config = None
        if a.config_json:
            with open(a.config_json, encoding="utf-8") as f:
                try:
                    extra_config = json.load(f)
                except ValueError as e:
                    raise InvalidConfig(field="config_json", reason=f"{a.config_json}: not JSON ({e})") from None
            if not isinstance(extra_config, dict) or not all(isinstance(v, dict) for v in extra_config.values()):
                raise InvalidConfig(field="config_json", reason=f"{a.config_json}: must be a JSON object of tables "
                                                                "({\"diffusion\": {...}})")
        import_onnx_stages(stages, a.output, pipeline=a.pipeline or "graph", quantize=a.quantize, progress=True,
                           tokenizer_json=tokenizer_json, extra_config=extra_config)
        print(a.output)
        return 0
    if a.tokenizer or a.config_json:
        raise InvalidConfig(field="tokenizer" if a.tokenizer else "config_json",
                            reason="--tokenizer and --config-json go with --stage NAME=FILE.onnx")
    if a.src is None:
        raise InvalidConfig(field="src", reason="import needs SRC (or --stage NAME=FILE.onnx ...)")
    extra = {"pipeline": a.pipeline} if a.pipeline else {}  # ONNX only: other sources refuse it
    if a.vocoder:
        extra["vocoder"] = a.vocoder  # SpeechT5 only
    import_model(resolve_source(a.src), a.output, quantize=a.quantize, progress=True, graph=a.graph, **extra)
    print(a.output)
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .format import describe

    print(describe(a.path))
    return 0


def cmd_fetch(a: argparse.Namespace) -> int:
    from . import hub

    if a.source:
        print(hub.fetch_source(a.name))
        return 0
    result = hub.fetch(a.name)
    if result is not None:
        print(os.fspath(getattr(result, "model", result)))
    return 0


def cmd_pull(a: argparse.Namespace) -> int:
    from . import hub

    print(hub.resolve(a.ref) if not os.path.exists(a.ref) else hub.import_source(a.ref))
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from . import hub

    rows = [(m.name, f"{m.size / 2**20:.1f} MiB", m.family, ",".join(m.encodings), m.source) for m in hub.list_models()]
    head = ("NAME", "SIZE", "FAMILY", "ENCODINGS", "SOURCE")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    return 0


def cmd_rm(a: argparse.Namespace) -> int:
    from . import hub

    for p in hub.remove(a.name):
        print(f"removed {p}")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from .benchmark import main as bench_main

    return bench_main(list(a.bench_args))


_Usage = serve_command.Usage


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["bench"]:  # its options belong to cyb_llm.benchmark (argparse cannot forward "--x")
        from .benchmark import main as bench_main

        return bench_main(args[1:])
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass
    try:
        return int(a.func(a) or 0)
    except _Usage as e:
        parser.error(str(e))
    except Error as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        print(f"error: {type(e).__name__}: {e.strerror or e}: {e.filename}", file=sys.stderr)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
