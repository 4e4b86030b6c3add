"""GPU benchmark of the wgpu+rs backend (run on the lent H200; docs/gpu-bench.md has the
exact device invocation).

The real GGUFs cannot travel to the device, and speed does not depend on weight
values, so for each of smollm2 / qwen05 / qwen15 / llama7b this writes a `.model` with the
exact config, tensor names, shapes and encodings of the real file (bench/gpu_models.json;
llama7b: Llama-2-7B shapes, llama.cpp's Q4_K_M mix) and seeded random valid blocks (finite
f16 scales), then in one run, per model:
  1. checks wgpu+rs against the cpu backend on that file (precise logits, rel. error),
  2. times wgpu+rs: prompt (one bulk forward of each of --prompts tokens) and generation
     (--gen greedy steps), with the peak of its device buffers (`_core.wgpu_memory()`),
  3. times PyTorch fp16 eager (a random-initialised transformers model of the same
     config) on the same GPU: the same prompt forward and N greedy steps with its KV cache,
  4. with --peer llamacpp-cuda: llama-bench of llama.cpp's CUDA build on a GGUF of the
     same shapes (bench/gguf_shapes.py header, zero weights), peak GPU memory of both sides
     from nvidia-smi,
  5. reports the share of the bandwidth limit (weight bytes read per token / decode time
     against the measured ~4.5 TB/s of the H200),
  6. with --parallel N: N conversations decoded in one batch (the server's batched step, tokens
     drawn on the GPU and, for comparison, on the host), and with the peer
     llama-batched-bench -npl N on the same GGUF (tokens/s over all sequences, S_TG),
  7. (smollm2) 1000 decode steps with wgpu-native's own allocation report before/after,
     and the report after dropping the model.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

import cyb_llm
import gguf_shapes
import llamacpp_peer as peer
from cyb_llm import _core
from cyb_llm.format import write_model

HERE = os.path.dirname(os.path.abspath(__file__))
# encoding -> (values per block, bytes per block) of the quantized encodings (the native table)
BLOCK = {enc: (block, nbytes) for enc, _name, block, nbytes, quantized in _core.encodings() if quantized}
F16_FIELDS = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "iq4_nl": [0],
              "q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}
BANDWIDTH = 4.5e12  # measured H200 read bandwidth (docs/gpu-bench.md)


def tensor_bytes(enc, shape):
    n = int(np.prod(shape))
    if enc in BLOCK:
        b, bb = BLOCK[enc]
        return n // b * bb
    return n * {"f32": 4, "f16": 2, "bf16": 2}[enc]


def random_tensor(name, enc, shape, rng):
    n = int(np.prod(shape))
    if enc == "f32":
        if name.endswith("norm.weight"):
            return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        return (0.02 * rng.standard_normal(n)).astype(np.float32)
    if enc == "f16":
        return (0.02 * rng.standard_normal(n)).astype(np.float16)
    b, bb = BLOCK[enc]
    nb = n // b
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    scale = 0.004 if enc in ("q8_0",) else 0.01
    if enc in ("q4_k", "q5_k", "q2_k", "q3_k", "q6_k"):
        scale = 0.0005
    for off in F16_FIELDS[enc]:
        d = (rng.uniform(0.5, 1.0, size=nb) * scale).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def make_model(name, spec, out_dir, seed=0):
    path = os.path.join(out_dir, f"{name}-shaped.model")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(seed)
    tensors = [(n, enc, shape, random_tensor(n, enc, shape, rng)) for n, enc, shape in spec["tensors"]]
    write_model(path, name=f"{name}-shaped (random)", config=spec["config"], tensors=tensors)
    return path


def rel_err(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


def bytes_per_token(spec):
    """Weight bytes a decode step reads: every matrix but the embedding table (one row),
    plus the lm_head (the embedding again when tied)."""
    total = 0
    tied = spec["config"]["architecture"].get("tie_word_embeddings", False)
    names = {n for n, _, _ in spec["tensors"]}
    for n, enc, shape in spec["tensors"]:
        if n == "model.embed_tokens.weight":
            if tied and "lm_head.weight" not in names:
                total += tensor_bytes(enc, shape)
            continue
        total += tensor_bytes(enc, shape)
    return total


def bench_ours(path, prompts, n_gen, backend, precise=False, warmup=1.0):
    """Prompt tok/s for each prompt (one bulk forward of all its tokens into an empty cache, the
    median of three, after a first forward of the same length (the pipelines of each kernel
    variant a shape picks, weight upload) and warm-up forwards for at least `warmup` seconds more
    (GPU clocks); each timed forward is printed) and generation tok/s (n_gen greedy steps after a 1-token prompt, the positions
    llama-bench's tg covers; each step one submit and one logits read-back)."""
    m = cyb_llm.load(path, backend=backend, precise=precise)
    c = m.new_conversation(max(len(p) for p in prompts) + n_gen + 8)
    pp = []
    for prompt in prompts:
        # warm-up: one forward of this length (its pipelines are built: a second or more on the
        # host, while the GPU idles and its clocks drop), then forwards for at least `warmup`
        # seconds (the GPU's clocks back up). Timing the second forward straight after a first
        # that built pipelines measured qwen05's 128-token prompt at a quarter of its rate, three
        # timed forwards alike (docs/gpu-bench.md, ninth session).
        c.reset_kv_cache()
        c.forward(prompt)
        t_w = time.perf_counter()
        n_w = 0
        while True:
            c.reset_kv_cache()
            c.forward(prompt)
            n_w += 1
            if time.perf_counter() - t_w >= warmup:
                break
        rates = []
        for _ in range(3):  # the median of three (a first timed forward can run at a lower clock)
            c.reset_kv_cache()
            t0 = time.perf_counter()
            c.forward(prompt)
            rates.append(len(prompt) / (time.perf_counter() - t0))
        print(f"  pp{len(prompt)}: {n_w} warm-up forwards in {time.perf_counter() - t_w:.1f} s, timed "
              + " / ".join(f"{r:.0f}" for r in rates) + " tok/s", flush=True)
        pp.append(float(np.median(rates)))
    c.reset_kv_cache()
    tok = int(np.argmax(c.forward(prompts[0][:1])))
    tok = int(np.argmax(c.forward([tok])))  # warm-up of the decode pipelines
    host_times = getattr(_core, "wgpu_take_host_times", lambda: {})
    host_times()
    t0 = time.perf_counter()
    for _ in range(n_gen):
        tok = int(np.argmax(c.forward([tok])))
    t1 = time.perf_counter()
    tg = n_gen / (t1 - t0)
    h = host_times()
    if h.get("forwards"):
        n = h["forwards"]
        step_ms = 1e3 * (t1 - t0) / n_gen
        print(f"  decode step {step_ms:.2f} ms: recording the ops {h['record_ms'] / n:.2f} ms, submitting "
              f"{h['submit_ms'] / n:.2f} ms, waiting for the GPU {h['wait_ms'] / n:.2f} ms, the rest (Python, "
              f"logits copy) {step_ms - (h['record_ms'] + h['submit_ms'] + h['wait_ms']) / n:.2f} ms", flush=True)
    del c
    return pp, tg, m


def bench_device_sampling(m, prompt, n_gen, rounds=4):
    """Decode tok/s with the token drawn on the host (logits read back, the CPU sampler), on the
    GPU (`_core.forward_sample`: only the token comes back, the next embedding reads it on the
    device) and on the GPU overlapped (`forward_sample_submit` of step k+1 before
    `forward_sample_take` of step k: the generation loop's path, docs/generation.md), greedy and
    with llama.cpp's default policy; the six interleaved in `rounds` rounds. Returns
    {variant: tok/s} and whether each device run drew the host run's tokens."""
    policies = {"greedy": dict(temperature=0.0),
                "sampled": dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)}
    runs = {}
    for pol, cfg in policies.items():
        for where in ("host", "device", "overlap"):
            c = m.new_conversation(len(prompt) + n_gen + 8)
            s = _core.Sampler(**cfg)
            s.accept_many(prompt)
            if where == "host":
                tok = s.sample(c.forward(prompt))
            else:
                tok = _core.forward_sample(m._native, c._native, prompt, s)
            if where == "overlap":
                _core.forward_sample_submit(m._native, c._native, None, s)  # the step forwarding tok
            runs[(pol, where)] = dict(c=c, s=s, tok=tok, toks=[tok], t=0.0)
    per = n_gen // rounds
    for _ in range(rounds):
        for (pol, where), r in runs.items():
            c, s = r["c"], r["s"]
            t0 = time.perf_counter()
            if where == "host":
                tok = r["tok"]
                for _ in range(per):
                    tok = s.sample(c.forward([tok]))
                    r["toks"].append(tok)
            elif where == "device":
                for _ in range(per):
                    tok = _core.forward_sample(m._native, c._native, None, s)
                    r["toks"].append(tok)
            else:
                for _ in range(per):
                    _core.forward_sample_submit(m._native, c._native, None, s)
                    tok = _core.forward_sample_take(m._native, c._native, s)
                    r["toks"].append(tok)
            r["tok"] = tok
            r["t"] += time.perf_counter() - t0
    for (pol, where), r in runs.items():
        if where == "overlap":
            _core.forward_sample_take(m._native, r["c"]._native, r["s"])  # the last step's draw, unused
    rates = {f"{pol}/{where}": per * rounds / r["t"] for (pol, where), r in runs.items()}
    same = {pol: runs[(pol, "host")]["toks"] == runs[(pol, "device")]["toks"] == runs[(pol, "overlap")]["toks"]
            for pol in policies}
    return rates, same


def bench_batched(m, vocab, prompt_len, n_gen, parallel, rounds=2):
    """The server's batched decode step (docs/serve.md): `parallel` conversations, each with its own
    random prompt of `prompt_len` tokens (one forward each), then `n_gen` steps that advance all of
    them at once, the next tokens drawn greedily on the device (`_core.forward_batch_sample`, the
    engine's path when every slot samples) and, for comparison, on the host from the logits of
    `forward_batch` (the engine's path otherwise). The two runs alternate in `rounds` rounds, each
    after one untimed step (pipelines). Returns ({"device": tok/s, "host": tok/s} over all
    sequences, as llama-batched-bench's S_TG counts them, whether both drew the same tokens)."""
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, vocab, size=prompt_len).tolist() for _ in range(parallel)]
    runs = {}
    for where in ("device", "host"):
        convs = [m.new_conversation(prompt_len + n_gen + 8) for _ in range(parallel)]
        samplers = [_core.Sampler(temperature=0.0) for _ in range(parallel)]
        toks = [int(np.argmax(c.forward(p))) for c, p in zip(convs, prompts)]
        runs[where] = dict(convs=convs, samplers=samplers, toks=toks, out=[toks], t=0.0, n=0)

    def step(r, where):
        if where == "device":
            r["toks"] = _core.forward_batch_sample(m._native, [c._native for c in r["convs"]], r["toks"],
                                                   r["samplers"], [None] * parallel)
        else:
            r["toks"] = [int(t) for t in np.argmax(m.forward_batch(r["convs"], r["toks"]), axis=1)]
        r["out"].append(list(r["toks"]))

    for where, r in runs.items():
        step(r, where)  # untimed: the batched step's pipelines
    per = (n_gen - 1) // rounds
    for _ in range(rounds):
        for where, r in runs.items():
            t0 = time.perf_counter()
            for _ in range(per):
                step(r, where)
            r["t"] += time.perf_counter() - t0
            r["n"] += per * parallel
    rates = {where: r["n"] / r["t"] for where, r in runs.items()}
    return rates, runs["device"]["out"] == runs["host"]["out"]


def bench_torch(spec, prompt, n_gen):
    import torch
    import transformers

    a = spec["config"]["architecture"]
    common = dict(vocab_size=a["vocab_size"], hidden_size=a["hidden_size"],
                  intermediate_size=a["intermediate_size"], num_hidden_layers=a["num_hidden_layers"],
                  num_attention_heads=a["num_attention_heads"], num_key_value_heads=a["num_key_value_heads"],
                  max_position_embeddings=a.get("max_position_embeddings", 4096),
                  rms_norm_eps=a["rms_norm_eps"], rope_theta=a.get("rope_theta", 10000.0),
                  tie_word_embeddings=a.get("tie_word_embeddings", False))
    if spec["config"]["model_type"] == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(head_dim=a.get("head_dim"), **common)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls(cfg).to(torch.float16).eval()
    ids = torch.tensor([prompt], device="cuda")
    with torch.no_grad():
        model(ids[:, :8])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        past = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        for _ in range(n_gen):
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
    del model
    torch.cuda.empty_cache()
    return len(prompt) / (t1 - t0), n_gen / (t3 - t2)


def fidelity(path, vocab, n, ours="wgpu+rs"):
    """Whole-forward error of an n-token prompt (every position's logits, max |a-b| / max |ref|):
    wgpu+rs fast against wgpu+rs precise and against the cpu precise, the cpu's own fast mode
    against its precise (16-bit activations: the comparison point), wgpu+rs precise against the
    cpu precise. With n >= 32 the prompt takes the tiled GEMM and the prompt attention."""
    ids = np.random.default_rng(2).integers(0, vocab, size=n).tolist()

    def logits(backend, precise):
        return cyb_llm.load(path, backend=backend, precise=precise).new_conversation(n + 8).forward(
            ids, all_logits=True)

    gf, gp, cp, cf = logits(ours, False), logits(ours, True), logits("cpu", True), logits("cpu", False)
    return {"wgpu fast vs wgpu precise": rel_err(gf, gp), "wgpu fast vs cpu precise": rel_err(gf, cp),
            "cpu fast vs cpu precise": rel_err(cf, cp), "wgpu precise vs cpu precise": rel_err(gp, cp)}


def check_against_cpu(path, vocab, ours="wgpu+rs"):
    """wgpu+rs vs cpu on this file, precise mode: 8-token prefill and one decode step (max rel. error),
    and the ops that fell back to the cpu."""
    ids = np.random.default_rng(1).integers(0, vocab, size=8).tolist()
    ref = cyb_llm.load(path, backend="cpu", precise=True).new_conversation(32).forward(ids, all_logits=True)
    gm = cyb_llm.load(path, backend=ours, precise=True)
    gc_ = gm.new_conversation(32)
    got = gc_.forward(ids, all_logits=True)
    step = gc_.forward([int(got[-1].argmax())])
    cpu_c = cyb_llm.load(path, backend="cpu", precise=True).new_conversation(32)
    cpu_c.forward(ids)
    cpu_step = cpu_c.forward([int(got[-1].argmax())])
    err = max(rel_err(got, ref), rel_err(step, cpu_step))
    fallbacks = sorted({r["label"] + ":" + r["backend"] for r in gm.dispatch_records if r.get("fallback")})
    return err, fallbacks


def settings():
    """The CYB_ variables of this run (CYB_WGPU_SM etc.)."""
    return {k: v for k, v in os.environ.items() if k.startswith("CYB_")}


def markdown(cols, rows):
    """A markdown table of the columns (header, format) that some row has."""
    cols = [(h, f) for h, f in cols if any(r.get(h) is not None for r in rows)]
    lines = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(h) is None else f.format(r[h]) for h, f in cols) + " |")
    return "\n".join(lines)


def ratio(a, b):
    return a / b if a is not None and b else None


def write_report(args, info, rows, sampling_lines, profiles):
    """The table of every model so far, written to the report file in --out (after each model, so that a
    run stopped at the time limit keeps what it measured); returns the table."""
    prompt_lens = [int(x) for x in args.prompts.split(",")]
    cols = [("model", "{}"), ("wgpu+rs vs cpu (precise)", "{:.1e}")]
    cols += [(f"wgpu+rs pp{n}", "{:.0f}") for n in prompt_lens] + [(f"wgpu+rs tg{args.gen}", "{:.0f}")]
    cols += [(f"llama.cpp pp{n}", "{:.0f}") for n in prompt_lens] + [(f"llama.cpp tg{args.gen}", "{:.0f}")]
    cols += [(f"pp{n} ratio", "{:.2f}x") for n in prompt_lens] + [(f"tg{args.gen} ratio", "{:.2f}x")]
    cols += [(f"torch fp16 pp{prompt_lens[0]}", "{:.0f}"), (f"torch fp16 tg{args.gen}", "{:.0f}"),
             ("tg ratio vs torch", "{:.2f}x"), ("weights MB/token", "{:.0f}"),
             ("wgpu+rs share of 4.5 TB/s", "{:.1%}"), ("llama.cpp share of 4.5 TB/s", "{:.1%}"),
             ("wgpu+rs peak MiB (buffers)", "{:.0f}"), ("wgpu+rs peak MiB (nvidia-smi)", "{:.0f}"),
             ("llama.cpp peak MiB (nvidia-smi)", "{:.0f}")]
    if args.parallel:
        n = args.parallel
        cols += [(f"wgpu+rs {n}-way tg", "{:.0f}"), (f"wgpu+rs {n}-way tg (host draw)", "{:.0f}"),
                 (f"llama.cpp {n}-way tg", "{:.0f}"), (f"{n}-way tg ratio", "{:.2f}x"),
                 (f"llama.cpp {n}-way peak MiB (nvidia-smi)", "{:.0f}")]
    table = markdown(cols, rows)
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
        if info:
            f.write(f"adapter: {info['adapter']} ({info['backend_type']}, {info['adapter_type']}); the wgpu+rs "
                    f"columns are backend {args.backend}, settings {sorted(settings().items())}\n\n")
        f.write(f"{table}\n")
        f.write("\n" + "\n".join(sampling_lines) + "\n")
        for p in profiles:
            f.write(f"\n{p}\n")
    return table


def main():
    ap = argparse.ArgumentParser(description="wgpu+rs speed on same-shaped models, next to its peers "
                                 "(docs/gpu-bench.md gives the device command)")
    ap.add_argument("--models", default="smollm2,qwen05,qwen15",
                    help="names from bench/gpu_models.json: smollm2, qwen05, qwen15, llama7b")
    ap.add_argument("--prompts", default="128,512", help="prompt lengths (tokens), each timed as one bulk forward")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--backend", default="wgpu+rs", choices=["wgpu+rs", "webgpu:dawn"],
                    help="ours: wgpu+rs (wgpu-native) or webgpu:dawn (the same backend on Dawn; its numbers "
                    "still fill the wgpu+rs columns, the report's first line names it)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up forwards before each prompt length")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--work", default="/tmp/gpu_bench")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch fp16 eager")
    ap.add_argument("--skip-ours", action="store_true", help="only the peers (no wgpu+rs, no cyb_llm model)")
    ap.add_argument("--no-check", action="store_true", help="skip the wgpu+rs vs cpu check")
    ap.add_argument("--fidelity", type=int, default=0, metavar="N",
                    help="also the whole-forward error of an N-token prompt: fast vs precise, wgpu+rs and cpu")
    ap.add_argument("--no-sampling", action="store_true", help="skip the host vs GPU token-draw comparison")
    ap.add_argument("--leak-steps", type=int, default=1000)
    ap.add_argument("--profile", action="store_true",
                    help="also print GPU time per shader (timestamp queries) for one prompt forward and 16 "
                         "decode steps of each model (bench/gpu_profile.py)")
    ap.add_argument("--peer", choices=["none", "llamacpp-cuda"], default="none",
                    help="llamacpp-cuda: llama-bench of llama.cpp's CUDA build on same-shaped GGUFs")
    ap.add_argument("--parallel", type=int, default=0, metavar="N",
                    help="also N conversations decoded in one batch (the server's batched step) against "
                         "llama-batched-bench -npl N (prompt: the first --prompts length; steps: --gen)")
    ap.add_argument("--peer-repeats", type=int, default=5, help="llama-bench -r (it reports the median here)")
    ap.add_argument("--llamacpp", default=os.path.join(os.path.dirname(HERE), ".llamacpp"),
                    help="folder with src/ (bench/llamacpp_cuda/slim.sh) and gguf/ (bench/gguf_shapes.py)")
    ap.add_argument("--llamacpp-build", default="/tmp/llamacpp-cuda", help="llama.cpp build folder")
    args = ap.parse_args()
    t_start = time.perf_counter()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    prompt_lens = [int(x) for x in args.prompts.split(",")]
    specs = json.load(open(os.path.join(HERE, "gpu_models.json")))
    info = None
    if not args.skip_ours:
        if args.backend == "webgpu:dawn":  # before any probe: one WebGPU implementation a process
            from cyb_llm import webgpu_dawn

            webgpu_dawn.attach()
        info = _core.wgpu_info(True)
        print("settings:", settings(), flush=True)
        print("adapter:", json.dumps(info), flush=True)
    llama_bench = None
    if args.peer == "llamacpp-cuda":
        llama_bench = peer.build(os.path.join(args.llamacpp, "src"), args.llamacpp_build,
                                 log=lambda m: print(m, flush=True))
    rows = []
    profiles: list[str] = []
    sampling_lines: list[str] = []
    for name in args.models.split(","):
        spec = specs[name]
        vocab = spec["config"]["architecture"]["vocab_size"]
        row = {"model": name}
        rows.append(row)
        rng = np.random.default_rng(1)
        prompts = [rng.integers(0, vocab, size=n).tolist() for n in prompt_lens]
        bpt = bytes_per_token(spec)
        row["weights MB/token"] = bpt / 1e6
        tg = None
        if not args.skip_ours:
            t = time.perf_counter()
            path = make_model(name, spec, args.work)
            print(f"{name}: wrote {os.path.getsize(path) / 1e6:.0f} MB in {time.perf_counter() - t:.1f}s", flush=True)
            # 1. correctness on this file: wgpu+rs vs cpu, precise mode
            if not args.no_check:
                err, fallbacks = check_against_cpu(path, vocab, args.backend)
                row["wgpu+rs vs cpu (precise)"] = err
                print(f"{name}: wgpu+rs vs cpu precise logits rel err {err:.2e}; fallbacks: {fallbacks or 'none'}",
                      flush=True)
            if args.fidelity:
                fid = fidelity(path, vocab, args.fidelity, args.backend)
                print(f"{name}: {args.fidelity}-token prompt, all logits: " +
                      ", ".join(f"{k} {v:.2e}" for k, v in fid.items()), flush=True)
            gc.collect()
            # 2. speed (default fast mode: f32 activations, f16 KV cache) and device memory
            _core.wgpu_memory(reset_peak=True)
            base = _core.wgpu_memory()["live_bytes"]
            with peer.GpuMemSampler() as mem:
                pp, tg, m = bench_ours(path, prompts, args.gen, args.backend, warmup=args.warmup)
            row["wgpu+rs peak MiB (nvidia-smi)"] = mem.peak_mib
            row["wgpu+rs peak MiB (buffers)"] = (_core.wgpu_memory()["peak_bytes"] - base) / 2**20
            for n, v in zip(prompt_lens, pp):
                row[f"wgpu+rs pp{n}"] = v
            row[f"wgpu+rs tg{args.gen}"] = tg
            row["wgpu+rs share of 4.5 TB/s"] = bpt * tg / BANDWIDTH
            print(f"{name}: wgpu+rs " + ", ".join(f"pp{n} {v:.0f}" for n, v in zip(prompt_lens, pp)) +
                  f" tok/s, tg{args.gen} {tg:.0f} tok/s; device buffers peak "
                  f"{row['wgpu+rs peak MiB (buffers)']:.0f} MiB", flush=True)
            if not args.no_sampling:
                rates, same = bench_device_sampling(m, prompts[0], args.gen)
                sampling_lines.append(
                    f"{name}: decode tok/s, token drawn on the host / on the GPU / on the GPU overlapped: greedy "
                    f"{rates['greedy/host']:.0f} / {rates['greedy/device']:.0f} / {rates['greedy/overlap']:.0f} "
                    f"({rates['greedy/overlap'] / rates['greedy/host']:.2f}x), top-k 40 top-p 0.95 min-p 0.05 T 0.8 "
                    f"{rates['sampled/host']:.0f} / {rates['sampled/device']:.0f} / {rates['sampled/overlap']:.0f} "
                    f"({rates['sampled/overlap'] / rates['sampled/host']:.2f}x); same tokens: {same}")
                print(sampling_lines[-1], flush=True)
            if args.parallel:
                rates, same = bench_batched(m, vocab, prompt_lens[0], args.gen, args.parallel)
                row[f"wgpu+rs {args.parallel}-way tg"] = rates["device"]
                row[f"wgpu+rs {args.parallel}-way tg (host draw)"] = rates["host"]
                print(f"{name}: {args.parallel} conversations of {prompt_lens[0]} prompt tokens decoded in one "
                      f"batch: {rates['device']:.0f} tok/s drawn on the GPU, {rates['host']:.0f} tok/s drawn on "
                      f"the host; same tokens: {same}", flush=True)
            if args.profile:
                from gpu_profile import profile

                prompt = prompts[-1]
                pc = m.new_conversation(len(prompt) + 24)
                profiles.append(profile(lambda: pc.forward(prompt), f"{name} prompt ({len(prompt)} tokens)"))

                def decode(c=pc):
                    tok = 1
                    for _ in range(16):
                        tok = int(np.argmax(c.forward([tok])))

                profiles.append(profile(decode, f"{name} 16 decode steps"))
                del pc
                if args.parallel:  # the server's batched step (forward_batch_sample, draws on the GPU)
                    bc = [m.new_conversation(len(prompt) + 24) for _ in range(args.parallel)]
                    bs = [_core.Sampler(temperature=0.0) for _ in range(args.parallel)]
                    btoks = [int(np.argmax(c.forward(prompt[:8]))) for c in bc]

                    def batched(bc=bc, bs=bs, btoks=btoks):
                        toks = btoks
                        for _ in range(16):
                            toks = _core.forward_batch_sample(m._native, [c._native for c in bc], toks, bs,
                                                              [None] * len(bc))

                    profiles.append(profile(batched, f"{name} 16 batched steps of {args.parallel} conversations"))
                    del bc
            if name == "smollm2" and args.leak_steps:
                c = m.new_conversation(args.leak_steps + 8)
                c.forward([1])
                before = _core.wgpu_report()
                tok = 1
                for _ in range(args.leak_steps):
                    tok = int(np.argmax(c.forward([tok])))
                after = _core.wgpu_report()
                del c, m
                gc.collect()
                dropped = _core.wgpu_report()
                print(f"{name}: wgpu-native report, live buffers / bind groups: after warm-up "
                      f"{before['buffers.allocated']}/{before['bind_groups.allocated']}, after {args.leak_steps} "
                      f"decode steps {after['buffers.allocated']}/{after['bind_groups.allocated']}, after dropping "
                      f"the model {dropped['buffers.allocated']}/{dropped['bind_groups.allocated']}", flush=True)
            else:
                del m
                gc.collect()
            os.remove(path)
        if not args.no_torch:
            tpp, ttg = bench_torch(spec, prompts[0], args.gen)
            row[f"torch fp16 pp{prompt_lens[0]}"] = tpp
            row[f"torch fp16 tg{args.gen}"] = ttg
            row["tg ratio vs torch"] = ratio(tg, ttg)
            print(f"{name}: torch fp16 eager prompt {tpp:.0f} tok/s, generate {ttg:.0f} tok/s", flush=True)
        if llama_bench:
            gguf = gguf_shapes.extend(os.path.join(args.llamacpp, "gguf"), name,
                                      os.path.join(args.work, f"{name}-shaped.gguf"))
            res, peak, cmd = peer.run_llama_bench(llama_bench, gguf, prompt_lens, args.gen, args.peer_repeats)
            print(f"{name}: {cmd}", flush=True)
            for key, r in res.items():
                print(f"{name}: llama.cpp {key} median {r['median_ts']:.0f} tok/s (mean {r['avg_ts']:.0f} +- "
                      f"{r['stddev_ts']:.0f}, {r['repeats']} repeats: "
                      f"{', '.join(f'{x:.0f}' for x in r['samples_ts'])}; {r['backends']}, fa {r['flash_attn']}, "
                      f"K {r['type_k']})", flush=True)
            for n in prompt_lens:
                row[f"llama.cpp pp{n}"] = res.get(f"pp{n}", {}).get("median_ts")
                row[f"pp{n} ratio"] = ratio(row.get(f"wgpu+rs pp{n}"), row[f"llama.cpp pp{n}"])
            ltg = res.get(f"tg{args.gen}", {}).get("median_ts")
            row[f"llama.cpp tg{args.gen}"] = ltg
            row[f"tg{args.gen} ratio"] = ratio(tg, ltg)
            row["llama.cpp share of 4.5 TB/s"] = bpt * ltg / BANDWIDTH if ltg else None
            row["llama.cpp peak MiB (nvidia-smi)"] = peak
            if args.parallel:
                b, bpeak, bcmd = peer.run_batched_bench(llama_bench, gguf, prompt_lens[0], args.gen, args.parallel)
                print(f"{name}: {bcmd}\n{name}: llama.cpp {json.dumps(b)}", flush=True)
                row[f"llama.cpp {args.parallel}-way tg"] = float(b["speed_tg"])
                row[f"{args.parallel}-way tg ratio"] = ratio(row.get(f"wgpu+rs {args.parallel}-way tg"),
                                                             row[f"llama.cpp {args.parallel}-way tg"])
                row[f"llama.cpp {args.parallel}-way peak MiB (nvidia-smi)"] = bpeak
            os.remove(gguf)
        write_report(args, info, rows, sampling_lines, profiles)
        print(f"{name}: done at {time.perf_counter() - t_start:.0f}s", flush=True)
    print(write_report(args, info, rows, sampling_lines, profiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
