"""ONNX graphs on the CPU: cyb_llm (imported with the ONNX importer, graph section version 2) against
onnxruntime's CPU provider on the same .onnx, same threads, in one run (docs/cpu-bench.md, "ONNX
graphs").

Usage: PYTHONPATH=python python bench/bench_onnx.py [--threads 2] [--reps 5] [--levels avx2,avx512,amx]
       [--models silero,terrain,piper,minilm,minilm-unfused] [--json FILE] [--device wgpu+rs]

--device wgpu+rs: cyb_llm on that backend instead of the cpu (one child, the default cpu level),
against onnxruntime's CPU provider on the same machine (the NVIDIA GPU: docs/gpu-bench.md, "ONNX
graphs on the GPU"); the adapter is named, and each model's dispatch records are counted: node runs
on the device, host shape computations (by design: constants and shapes only), and fallbacks (the
nodes the device declined, which the cpu ran on host copies of their inputs), with the fallen-back
ops named; and the device nodes with a documented host step (docs/graph.md, "wgpu+rs"): nonzero and
range (their input values read back: they size the output), random_normal_like (the noise made on
the host by the cpu's generator, then copied in: the same numbers as every backend).

Models (each fetched through the hub once, or from CYB_LLM_WHEELS): Silero VAD v6 (`silero-vad`,
one 576-sample chunk with its LSTM state, as transcribe's VAD calls it), the terrain consistency UNet
(`terrain`, batch 1, 128 x 128, sigma 0.8, difficulty 0.5) and the Piper voice en_US-joe-medium
(`piper-joe`, 40 phonemes, noise scales 0 so that both runtimes make the same audio; skipped with a
message when the hub cannot give it), and all-MiniLM-L6-v2 exported to ONNX by torch here (`minilm`, 4 x
128 tokens; `minilm-unfused`: the same graph loaded with fuse=False, to show what the fusion pass's
attention_heads gives). Each CPU level runs in its own child process (CYB_CPU_LEVEL is
read once per process); in the child, after one warm-up call of each runtime, `--reps` rounds call
cyb_llm then onnxruntime (a change of the machine's load hits both alike), 0.1 s apart (so that
the other runtime's worker threads have stopped spinning); each runtime's best time counts. onnxruntime: intra_op_num_threads = --threads, inter_op_num_threads 1, sequential execution.

Printed per level and model: ms per call for both, the speedup onnxruntime / cyb_llm (> 1: cyb_llm is
faster), and the max abs difference of the outputs over max |onnxruntime|.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def _silero():
    from cyb_llm import hub

    src = hub.fetch_source("silero-vad", progress=False)
    rng = np.random.default_rng(0)
    t = np.arange(576) / 16000.0
    x = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.02 * rng.standard_normal(576)).astype(np.float32)[None]
    h = np.zeros((1, 1, 128), np.float32)
    ort_feed = {"input": x, "h": h, "c": h.copy()}
    return "silero-vad", src, {"input": x}, ort_feed, "speech_probs", 0


def _terrain():
    from cyb_llm import hub

    src = hub.fetch_source("terrain", progress=False)
    rng = np.random.default_rng(0)
    feed = {"noisy": rng.standard_normal((1, 1, 128, 128)).astype(np.float32),
            "sigma": np.array([0.8], np.float32), "difficulty": np.array([0.5], np.float32)}
    return "terrain", src, feed, feed, "denoised", 0


def _piper():
    from cyb_llm import hub

    src = hub.fetch_source("piper-joe", progress=False)
    # Piper's id layout ^ _ p1 _ p2 ... _ $ (ids 1, 0, 2) over phoneme ids 14..59 of the espeak map
    ids = [1, 0]
    for i in range(40):
        ids += [14 + (i * 7) % 46, 0]
    ids.append(2)
    feed = {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
            "scales": np.array([0.0, 1.0, 0.0], np.float32)}
    return "piper-joe", src, feed, feed, "output", 0


def _minilm():
    """all-MiniLM-L6-v2 exported to ONNX here (torch.onnx.export of the transformers model built from
    the hub's safetensors, opset 17, TorchScript exporter, as tests/test_onnx_minilm.py does: its
    attention as torch's scaled dot-product attention), imported once into a temporary folder; a
    batch of 4 x 128 tokens with one sequence padded to half."""
    import tempfile

    import torch
    import transformers

    from cyb_llm.cli import main as cli
    from cyb_llm.hub import fetch_source

    d = Path(tempfile.gettempdir()) / "cyb_bench_minilm"
    d.mkdir(exist_ok=True)
    onx, out = str(d / "minilm.onnx"), str(d / "minilm.model")
    if not os.path.exists(out):
        try:
            bert = transformers.AutoModel.from_pretrained(fetch_source("minilm", progress=False)).eval()
        except Exception as e:  # noqa: BLE001 - a machine without the hub (the GPU machine): same graph and work
            print(f"minilm: the hub cannot give it ({type(e).__name__}); seeded random weights of its config")
            torch.manual_seed(0)
            bert = transformers.BertModel(transformers.BertConfig(
                vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                intermediate_size=1536, max_position_embeddings=512, layer_norm_eps=1e-12,
                attn_implementation="sdpa"), add_pooling_layer=False).eval()

        class LastHidden(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

        ids = torch.tensor([[101, 2023, 2003, 102, 0]])
        dyn = {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids",
                                                   "last_hidden_state")}
        with torch.no_grad():
            torch.onnx.export(LastHidden(bert), (ids, (ids != 0).long(), torch.zeros_like(ids)), onx,
                              input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["last_hidden_state"], dynamic_axes=dyn, opset_version=17, dynamo=False)
        with open(os.devnull, "w") as null:
            stdout, sys.stdout = sys.stdout, null
            try:
                cli(["import", onx, "-o", out])
            finally:
                sys.stdout = stdout
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (4, 128)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 64:] = 0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return out, onx, feed, feed, "last_hidden_state", 0


MODELS = {"silero": _silero, "terrain": _terrain, "piper": _piper, "minilm": _minilm,
          "minilm-unfused": _minilm}  # the same graph loaded with fuse=False (what the fusion pass gives)


# device nodes with a host step (docs/graph.md, "wgpu+rs"): op -> what the host does
HOST_STEPS = {"nonzero": "input read back for the count", "range": "inputs read back for the count",
              "random_normal_like": "noise made on the host, copied in"}


def _dispatch_counts(records, device: str) -> dict:
    """Node runs of all calls so far: on the device, host shape computations, fallbacks (by op), and
    the device nodes with a host step (by op)."""
    dev = sum(r["count"] for r in records if r["backend"] == device and not r["fallback"])
    steps: dict = {}
    for r in records:
        if r["backend"] == device and not r["fallback"] and r["op"] in HOST_STEPS and r["count"]:
            steps[r["op"]] = steps.get(r["op"], 0) + r["count"]
    shape = sum(r["count"] for r in records if r.get("host_shape"))
    fb: dict = {}
    for r in records:
        if (r["fallback"] or r["backend"] != device) and not r.get("host_shape") and r["count"]:
            fb[r["op"]] = fb.get(r["op"], 0) + r["count"]
    return {"device_runs": dev, "host_shape_runs": shape, "fallback_runs": sum(fb.values()), "fallback_ops": fb,
            "host_step_ops": steps}


def _child(a) -> None:
    import onnxruntime as ort

    import cyb_llm

    results = []
    for key in a.models.split(","):
        try:
            name, src, feed, ort_feed, out_name, out_idx = MODELS[key]()
            m = cyb_llm.load(name, backend=a.device or "cpu", threads=a.threads, fuse=not key.endswith("-unfused"))
        except Exception as e:  # noqa: BLE001 (the hub or the import could not give this model here)
            results.append({"model": key, "skipped": f"{type(e).__name__}: {e}"})
            continue
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        s = m.session() if key == "silero" else m  # Silero: the LSTM state carried; Piper loads as a TtsModel
        ref = sess.run(None, ort_feed)[out_idx]
        got = s.run(feed)[out_name]
        err = float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)) \
            if got.shape == ref.shape else float("nan")
        best_ours = best_ort = float("inf")
        for _ in range(a.reps):
            time.sleep(0.1)  # the other runtime's worker threads stop spinning before the clock starts
            t = time.perf_counter()
            s.run(feed)
            best_ours = min(best_ours, time.perf_counter() - t)
            time.sleep(0.1)
            t = time.perf_counter()
            sess.run(None, ort_feed)
            best_ort = min(best_ort, time.perf_counter() - t)
        row = {"model": key, "ours_ms": best_ours * 1e3, "ort_ms": best_ort * 1e3, "speedup": best_ort / best_ours,
               "err": err}
        if a.device:
            row.update(_dispatch_counts(m.dispatch_records, a.device))
        results.append(row)
    print(json.dumps(results))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--levels", default="avx2,avx512,amx", help="CYB_CPU_LEVEL of each child, comma separated")
    ap.add_argument("--models", default="silero,terrain,piper")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--device", help="run cyb_llm on this backend (wgpu+rs) against onnxruntime CPU")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return _child(a)
    import onnxruntime as ort

    from cyb_llm import _core

    have = _core.cpu_levels()
    model_name = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                      "?") if os.path.exists("/proc/cpuinfo") else "?"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{model_name}, {os.cpu_count()} CPUs visible, {a.threads} threads, onnxruntime {ort.__version__}, "
          f"best of {a.reps}, load average {load:.1f} at start")
    table = {}
    if a.device:  # one child at the default cpu level; the adapter named
        a.levels = "auto"
        info = _core.wgpu_info(True)
        print(f"device {a.device}: {info['adapter']} ({info['adapter_type']}, {info['backend_type']}, "
              f"{info['description']})")
    for level in a.levels.split(","):
        if level != "auto" and level not in have:
            print(f"{level}: not on this CPU (levels here: {', '.join(have)})")
            continue
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
        if level != "auto":
            env["CYB_CPU_LEVEL"] = level
        cmd = [sys.executable, __file__, "--child", "--threads", str(a.threads), "--reps", str(a.reps),
               "--models", a.models] + (["--device", a.device] if a.device else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{level}: child failed: {r.stderr.strip()[-800:]}")
            continue
        table[level] = json.loads(r.stdout.strip().splitlines()[-1])
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\nCYB_CPU_LEVEL={level} (load average {load:.1f} after it)")
        print(f"  {'model':10s} {'cyb_llm ms':>11s} {'onnxruntime ms':>15s} {'speedup':>8s} {'max err':>9s}")
        for row in table[level]:
            if "skipped" in row:
                print(f"  {row['model']:10s} skipped: {row['skipped'][:160]}")
                continue
            print(f"  {row['model']:10s} {row['ours_ms']:11.2f} {row['ort_ms']:15.2f} {row['speedup']:7.2f}x "
                  f"{row['err']:9.1e}")
            if a.device:
                fb = ", ".join(f"{k} {v}" for k, v in sorted(row["fallback_ops"].items()))
                print(f"  {'':10s} node runs ({a.reps + 1} calls): {row['device_runs']} on {a.device}, "
                      f"{row['host_shape_runs']} host shape computations, {row['fallback_runs']} fallbacks"
                      + (f" ({fb})" if fb else ""))
                hs = "; ".join(f"{k} {v} ({HOST_STEPS[k]})" for k, v in sorted(row["host_step_ops"].items()))
                if hs:
                    print(f"  {'':10s} device nodes with a host step: {hs}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": model_name, "threads": a.threads, "reps": a.reps, "onnxruntime": ort.__version__,
                       "device": a.device, "levels": table}, f, indent=1)


if __name__ == "__main__":
    main()
