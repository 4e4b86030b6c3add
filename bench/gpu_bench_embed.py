"""Encoder speed on a GPU: cyb_llm wgpu+rs against PyTorch fp16 on CUDA, same model, same batches,
one run (docs/encoders.md, "GPU"). For the lent H200, which has torch and transformers but no
network: the real all-MiniLM-L6-v2 cannot travel there, and speed does not depend on the weight
values, so the model is a BertModel of MiniLM's exact config with seeded random weights (saved by
transformers, imported by cyb_llm's HF importer), and the inputs are seeded token-id batches with
sentence-like lengths. Both sides compute what sentence-transformers does for MiniLM: BertModel,
mean pooling over the attention mask, L2 normalization.

    python bench/gpu_bench_embed.py [--n 4096] [--batch-size 128] [--out DIR]
    python bench/gpu_bench_embed.py --seq 128 --batches 1,32 [--profile] [--out DIR]
    python bench/gpu_bench_embed.py --shapes minilm,bert-base --seq 128,512 --batches 1,32,256 \
        --check-batches 1,32 --backend webgpu:dawn [--out DIR]

Prints sentences/s of each, the ratio, and the agreement of the wgpu+rs embeddings with the
torch f32 ones (max |difference| of normalized embeddings; the torch fp16 run is only timed).

With --seq T (or a list): fixed shapes instead, every batch size of --batches at exactly T tokens (no padding),
the median ms of one embed call of each side over --seconds of calls after a warm-up of the same
shape (ours includes the upload of the ids and the read-back of the embeddings; torch's the upload
of the ids and a synchronize), the ratio torch ms / ours ms, and the precise-mode cross-path check:
wgpu+rs precise against the cpu backend precise on the same file and batch, max |a - b| / max |cpu|
of the final hidden states and max |a - b| of the normalized embeddings (docs/runtime.md
`cross-path`, 1e-4; --check-batches: at these batch sizes only, each length). Also per shape: the
fast-mode embeddings' max |difference| from torch f32 (on CUDA where there is one, TF32 off) and
torch fp16's own, and the peak bytes each side's allocator held during its timed calls (ours:
`_core.wgpu_memory()` peak of the backend's buffers, weights included; torch:
`torch.cuda.max_memory_allocated`). --shapes: MiniLM's config and BERT-base's (hidden 768, 12
layers, 12 heads, feed-forward 3072), random weights. A shape that fails prints its error and the
run goes on.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
              vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
              layer_norm_eps=1e-12)
BERT_BASE = dict(MINILM, hidden_size=768, num_hidden_layers=12, intermediate_size=3072)
SHAPES = {"minilm": MINILM, "bert-base": BERT_BASE}


def make_model(cfg: dict):
    """A BertModel of this config with seeded random weights, and its imported .model path."""
    import torch
    from transformers import BertConfig, BertModel

    from cyb_llm.convert import import_model

    torch.manual_seed(0)
    ref = BertModel(BertConfig(**cfg), add_pooling_layer=False).eval()
    tmp = tempfile.mkdtemp()
    ref.save_pretrained(tmp)
    path = os.path.join(tmp, "encoder-shape.model")
    import_model(tmp, path, progress=False)
    return ref, path


def batches(n: int, batch_size: int, seed: int = 0):
    """Seeded token-id batches, lengths 8..128 sorted into buckets as the library batches them."""
    rng = np.random.default_rng(seed)
    lens = np.sort(rng.integers(8, 129, size=n))
    out = []
    for b in range(0, n, batch_size):
        ls = lens[b:b + batch_size]
        T = int(ls.max())
        ids = np.zeros((len(ls), T), np.int32)
        mask = np.zeros((len(ls), T), np.int32)
        for i, L in enumerate(ls):
            ids[i, :L] = rng.integers(1000, MINILM["vocab_size"], size=L)
            ids[i, 0], ids[i, L - 1] = 101, 102  # [CLS] ... [SEP]
            mask[i, :L] = 1
        out.append((ids, mask))
    return out


def torch_embed(model, ids, mask, device, dtype):
    import torch

    with torch.no_grad():
        i = torch.from_numpy(ids.astype(np.int64)).to(device)
        m = torch.from_numpy(mask.astype(np.int64)).to(device)
        h = model(input_ids=i, attention_mask=m).last_hidden_state
        mf = m.unsqueeze(-1).to(h.dtype)
        e = (h * mf).sum(1) / mf.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(e.float(), dim=-1)


def median_ms(fn, seconds: float) -> tuple[float, int]:
    """Median ms of fn() over `seconds` of calls (at least 5), after warm-up calls for a quarter of that."""
    t_end = time.perf_counter() + max(0.25 * seconds, 0.2)
    while True:
        fn()
        if time.perf_counter() > t_end:
            break
    ts = []
    t_end = time.perf_counter() + seconds
    while len(ts) < 5 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts)), len(ts)


def fixed_shapes(a) -> int:
    import torch
    from transformers import BertConfig, BertModel

    import cyb_llm
    from cyb_llm import _core

    seqs = [int(t) for t in str(a.seq).split(",") if t]
    sizes = [int(b) for b in a.batches.split(",") if b]
    checked = [int(b) for b in a.check_batches.split(",") if b] if a.check_batches else sizes
    if a.backend == "webgpu:dawn":  # before any probe: one WebGPU implementation a process
        from cyb_llm import webgpu_dawn

        webgpu_dawn.attach()
    cuda = torch.cuda.is_available()
    torch.backends.cuda.matmul.allow_tf32 = False  # the f32 reference in f32
    res = {"seqs": seqs, "batches": sizes, "backend": a.backend, "env": {k: v for k, v in os.environ.items()
                                                                          if k.startswith("CYB_")}, "rows": []}
    if cuda:
        res["torch_device"] = torch.cuda.get_device_name(0)
    for shape in a.shapes.split(","):
        cfg = SHAPES[shape]
        ref, path = make_model(cfg)
        rng = np.random.default_rng(1)
        inputs = {}
        for T in seqs:
            for B in sizes:
                ids = rng.integers(1000, cfg["vocab_size"], size=(B, T)).astype(np.int32)
                ids[:, 0], ids[:, -1] = 101, 102
                inputs[B, T] = (ids, np.ones((B, T), np.int32))

        # precise cross-path check: ours precise against cpu precise, same file, same batches
        check = {k: (float("nan"), float("nan")) for k in inputs}
        fell_back = []
        if not a.no_check:
            cpu = cyb_llm.load(path, backend="cpu", precise=True)._native
            gp = cyb_llm.load(path, backend=a.backend, precise=True)
            for (B, T), (ids, mask) in inputs.items():
                if B not in checked:
                    continue
                hc, hg = cpu.encode(ids, mask, None), gp._native.encode(ids, mask, None)
                ec, eg = cpu.embed(ids, mask, None, "mean", True), gp._native.embed(ids, mask, None, "mean", True)
                check[B, T] = (float(np.max(np.abs(hg - hc)) / np.max(np.abs(hc))), float(np.max(np.abs(eg - ec))))
            fell_back = sorted({r["op"] for r in gp.dispatch_records if r["backend"] != a.backend})
            del cpu, gp

        m = cyb_llm.load(path, backend=a.backend)
        nat = m._native
        f32 = gpu = None
        if cuda and not a.no_torch:
            gpu = BertModel(BertConfig(**cfg), add_pooling_layer=False).eval()
            gpu.load_state_dict(ref.state_dict())
            gpu = gpu.half().cuda()
            f32 = BertModel(BertConfig(**cfg), add_pooling_layer=False).eval()
            f32.load_state_dict(ref.state_dict())
            f32 = f32.cuda()
        for (B, T), (ids, mask) in inputs.items():
            row = {"shape": shape, "batch": B, "seq": T, "precise_hidden_rel_diff_vs_cpu": check[B, T][0],
                   "precise_embed_abs_diff_vs_cpu": check[B, T][1], "precise_ops_not_on_backend": fell_back}
            try:
                mine = nat.embed(ids, mask, None, "mean", True)
                if f32 is not None:
                    want = torch_embed(f32, ids, mask, "cuda", torch.float32).cpu().numpy()
                    half = torch_embed(gpu, ids, mask, "cuda", torch.float16).cpu().numpy()
                    row["torch_fp16_embed_abs_diff_vs_torch_f32"] = float(np.max(np.abs(half - want)))
                elif B * T <= 8192:
                    want = torch_embed(ref, ids, mask, "cpu", torch.float32).numpy()
                else:
                    want = None
                if want is not None:
                    row["fast_embed_abs_diff_vs_torch_f32"] = float(np.max(np.abs(mine - want)))

                host_times = getattr(_core, "wgpu_take_host_times", lambda: {})
                host_times()
                _core.wgpu_memory(reset_peak=True)
                row["ours_ms"], row["ours_calls"] = median_ms(lambda: nat.embed(ids, mask, None, "mean", True),
                                                              a.seconds)
                row["ours_peak_mib"] = _core.wgpu_memory()["peak_bytes"] / 2**20
                ht = host_times()
                if ht.get("forwards"):  # per forward: recording the dispatches, submitting, waiting for the read-back
                    row["ours_host_ms_per_forward"] = {k[:-3]: round(v / ht["forwards"], 4) for k, v in ht.items()
                                                       if k.endswith("_ms")}
                if gpu is not None:
                    def theirs():
                        torch_embed(gpu, ids, mask, "cuda", torch.float16)
                        torch.cuda.synchronize()

                    torch.cuda.reset_peak_memory_stats()
                    row["torch_fp16_ms"], row["torch_calls"] = median_ms(theirs, a.seconds)
                    row["torch_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
                    row["ratio_ours_over_torch"] = row["torch_fp16_ms"] / row["ours_ms"]
                if a.profile:
                    m.set_profiling(True)
                    nat.clear_dispatch_records()
                    nat.embed(ids, mask, None, "mean", True)
                    recs = sorted(m.dispatch_records, key=lambda r: -r["total_ms"])
                    row["host_ms_by_op"] = {f"{r['label']} ({r['op']}, {r['backend']})": round(r["total_ms"], 3)
                                            for r in recs[:10]}
                    m.set_profiling(False)
                    if a.backend in ("wgpu+rs", "webgpu:dawn"):
                        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                        from gpu_profile import profile

                        row["gpu_profile"] = profile(lambda: [nat.embed(ids, mask, None, "mean", True)
                                                              for _ in range(4)], f"4 calls of batch {B} x {T}")
            except Exception as e:  # noqa: BLE001 - a shape that fails is reported, the others still run
                row["error"] = f"{type(e).__name__}: {e}"[:2000]
            res["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "gpu_profile"}), flush=True)
            if a.out:
                os.makedirs(a.out, exist_ok=True)
                with open(os.path.join(a.out, "embed_gpu_fixed.json"), "w") as f:
                    json.dump(res, f, indent=1)
        del m, nat, gpu, f32
        if cuda:
            torch.cuda.empty_cache()
    print(f"\n{a.backend} {res['env']}  [{res.get('torch_device', 'no CUDA')}]\n"
          "| shape | batch | seq | ours ms | torch fp16 ms | ratio (torch ms / ours) | ours / torch peak MiB | "
          "fast vs torch f32 (ours / torch fp16) | precise vs cpu (hidden rel / embedding) |\n"
          "|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in res["rows"]:
        if "error" in r:
            print(f"| {r['shape']} | {r['batch']} | {r['seq']} | {r['error'][:200]} |")
            continue
        print(f"| {r['shape']} | {r['batch']} | {r['seq']} | {r['ours_ms']:.3f} | {r.get('torch_fp16_ms', nan):.3f} | "
              f"{r.get('ratio_ours_over_torch', nan):.2f}x | {r['ours_peak_mib']:.0f} / {r.get('torch_peak_mib', nan):.0f} | "
              f"{r.get('fast_embed_abs_diff_vs_torch_f32', nan):.1e} / {r.get('torch_fp16_embed_abs_diff_vs_torch_f32', nan):.1e} | "
              f"{r['precise_hidden_rel_diff_vs_cpu']:.1e} / {r['precise_embed_abs_diff_vs_cpu']:.1e} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="wgpu+rs")
    ap.add_argument("--out", default=None, help="folder for the JSON result")
    ap.add_argument("--profile", action="store_true", help="also print cyb_llm's per-op times of one pass")
    ap.add_argument("--seq", default="", help="fixed-shape mode: every batch at exactly this length (or lengths: 128,512)")
    ap.add_argument("--shapes", default="minilm", help="fixed-shape mode: model shapes, of " + ",".join(SHAPES))
    ap.add_argument("--check-batches", default="", help="fixed-shape mode: the precise check at these batch sizes only")
    ap.add_argument("--batches", default="1,32", help="batch sizes of the fixed-shape mode")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per side and shape (fixed-shape mode)")
    ap.add_argument("--no-check", action="store_true", help="fixed-shape mode: skip the precise cross-path check")
    ap.add_argument("--no-torch", action="store_true", help="fixed-shape mode: skip the torch side")
    a = ap.parse_args()

    if a.seq:
        return fixed_shapes(a)
    import torch
    from transformers import BertConfig, BertModel

    import cyb_llm

    ref, path = make_model(MINILM)
    data = batches(a.n, a.batch_size)

    m = cyb_llm.load(path, backend=a.backend)
    nat = m._native

    def ours(ids, mask):
        return nat.embed(ids, mask, None, "mean", True)

    # agreement on the first two batches against torch f32 on the CPU
    err = 0.0
    for ids, mask in data[:2]:
        want = torch_embed(ref, ids, mask, "cpu", torch.float32).numpy()
        err = max(err, float(np.max(np.abs(ours(ids, mask) - want))))
    fell_back = sorted({r["op"] for r in m.dispatch_records if r["backend"] != a.backend})

    def timed(fn):
        fn(*data[0])  # warm-up
        best = float("inf")
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for ids, mask in data:
                fn(ids, mask)
            best = min(best, time.perf_counter() - t0)
        return a.n / best

    res = {"n": a.n, "batch_size": a.batch_size, "backend": a.backend, "max_abs_diff_vs_torch_f32": err,
           "ops_not_on_backend": fell_back}
    res["cyb_llm_sentences_per_s"] = timed(ours)
    if a.profile:
        m.set_profiling(True)
        nat.clear_dispatch_records()
        for ids, mask in data:
            ours(ids, mask)
        recs = sorted(m.dispatch_records, key=lambda r: -r["total_ms"])
        res["profile_ms_by_op"] = {f"{r['label']} ({r['op']}, {r['backend']})": round(r["total_ms"], 1)
                                   for r in recs[:12]}
        m.set_profiling(False)
        if a.backend == "wgpu+rs":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from gpu_profile import profile

            res["gpu_profile"] = profile(lambda: [ours(ids, mask) for ids, mask in data[:8]],
                                         f"{min(8, len(data))} batches of {a.batch_size}")
    if torch.cuda.is_available():
        gpu = BertModel(BertConfig(**MINILM), add_pooling_layer=False).eval()
        gpu.load_state_dict(ref.state_dict())
        gpu = gpu.half().cuda()

        def theirs(ids, mask):
            torch_embed(gpu, ids, mask, "cuda", torch.float16)
            torch.cuda.synchronize()

        res["torch_fp16_cuda_sentences_per_s"] = timed(theirs)
        res["torch_device"] = torch.cuda.get_device_name(0)
        res["ratio_cyb_over_torch"] = res["cyb_llm_sentences_per_s"] / res["torch_fp16_cuda_sentences_per_s"]
    print(json.dumps(res, indent=1))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "embed_gpu.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
