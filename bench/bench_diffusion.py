"""Diffusion speed on the CPU (docs/diffusion.md "Speed"): UNet steps per second of cyb_llm against
the peer of each model, in one run, on the same number of threads.

Usage: PYTHONPATH=python python bench/bench_diffusion.py [--threads 2] [--reps 3] [--levels avx2,avx512,amx]
       [--models terrain,tiny-sd] [--json FILE]

  terrain   the terrain consistency UNet of adaptive-terrain-diffusion 0.4.2 (`cyb_llm.load("terrain")`,
            batch 1, 128 x 128) vs onnxruntime's CPU provider on the same .onnx.
  tiny-sd   the tiny random Stable Diffusion of tests/sd_tiny.py (imported through ONNX): one UNet call
            of batch 2 (classifier-free guidance) vs diffusers' UNet2DConditionModel on torch (CPU,
            f32), and a whole 20-step Euler generation (text encoder, 20 UNet calls, VAE decode) vs
            diffusers' StableDiffusionPipeline with the same latents. torch runs at --threads and at
            1 thread (torch.set_num_threads) and its faster count is the peer's: on a machine shared
            with other work torch's 2-thread OpenMP runs of this tiny model measured 20x slower than
            its 1-thread ones (its workers spin and wait for each other), which is no fair peer.

--sd15-memory [--sd15-dtype float32|float16] [--sd15-dir DIR]: instead of the speed rows, the peak RSS of a
512x512 generation of an SD-1.5-shaped pipeline on the CPU (docs/diffusion.md "Memory"). The bench builds
the diffusers folder itself with random weights (UNet2DConditionModel, AutoencoderKL and CLIPTextModel
with SD 1.5's configs; a tiny CLIP tokenizer, model_max_length 77: only the ids matter), saves it with
save_pretrained, imports it (`cyb-llm import FOLDER -o sd.model`), then a child process (its RSS is only
the runtime's) reads its VmRSS right after `import cyb_llm` (the interpreter and libraries: the
allowance), loads the file, runs generate_image(512x512, steps=2, guidance 7.5) and reports its peak RSS
(VmHWM), the file's size (and its tensor bytes by encoding, the conv weights apart: an f16 folder's
are f16), and each stage's planned and measured peak of that run (last_run_memory).
Checked: peak RSS <= allowance + file bytes + the largest stage's measured peak; also printed, the
same bound with the packed weight copies in place of the originals they replaced (an f16 folder's
convs are packed as f32 on the cpu: twice their file bytes, Winograd copies 32/9).

--sd15-gpu [--device wgpu+rs] [--reps 3]: on a machine with an NVIDIA GPU (docs/gpu-bench.md, "SD-1.5 UNet
on the GPU"), the SD-1.5-shaped UNet of that folder saved in f16, imported, one guided step's UNet call
(batch 2) on our GPU backend against diffusers' UNet2DConditionModel in torch fp16 on CUDA: median
seconds of --reps calls after a warm-up each, steps/s and the ratio, both outputs against torch f32 on
the same weights (TF32 off), and each side's peak device memory.

Each CPU level runs in its own child process (CYB_CPU_LEVEL is read once per process). In the child,
after a warm-up call of each runtime, `--reps` rounds call cyb_llm then the peer, 0.1 s apart; each
runtime's best time counts. Printed per level: steps/s (or generations/s) of both and the ratio
cyb_llm / peer (> 1: cyb_llm is faster), and the max abs difference of the outputs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))


def _best(pairs, reps: int) -> tuple[float, float, object, object]:
    """(best seconds of ours, of the peer, their last outputs): `pairs` = (ours(), peer())."""
    ours, peer = pairs
    a, b = ours(), peer()  # warm-up
    ta = tb = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a = ours()
        ta = min(ta, time.perf_counter() - t0)
        time.sleep(0.1)
        t0 = time.perf_counter()
        b = peer()
        tb = min(tb, time.perf_counter() - t0)
        time.sleep(0.1)
    return ta, tb, a, b


def _terrain(threads: int, reps: int) -> list[dict]:
    import onnxruntime as ort

    import cyb_llm
    from cyb_llm import hub

    src = hub.fetch_source("terrain", progress=False)
    m = cyb_llm.load("terrain", threads=threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {"noisy": (rng.standard_normal((1, 1, 128, 128)) * 80).astype(np.float32),
            "sigma": np.array([80.0], np.float32), "difficulty": np.array([0.5], np.float32)}
    ta, tb, a, b = _best((lambda: m.run(feed)["denoised"], lambda: sess.run(["denoised"], feed)[0]), reps)
    err = float(np.abs(a - b).max() / max(1e-12, np.abs(b).max()))
    return [{"model": "terrain unet", "unit": "steps/s", "ours": 1 / ta, "peer": 1 / tb, "peer_name": "onnxruntime",
             "ratio": tb / ta, "err": err}]


def _tiny_sd(threads: int, reps: int, path: str, folder: str) -> list[dict]:
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline

    import cyb_llm
    import sd_tiny

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sd = sd_tiny.build(folder)  # the same seeded modules the .model was exported from
    m = cyb_llm.load(path, threads=threads)
    rng = np.random.default_rng(0)
    s = sd_tiny.SAMPLE_SIZE
    x = rng.standard_normal((2, 4, s, s), dtype=np.float32)
    t = np.array([500.0, 500.0], np.float32)
    emb, _ = m.encode_prompt(["", "a photo of a cat"])
    feed = {"sample": x, "timestep": t, "encoder_hidden_states": emb}
    tx, tt, te = torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(emb)

    def torch_unet():
        with torch.no_grad():
            return sd.unet(tx, tt, te).sample.numpy()

    def vs_torch(ours, peer):
        """(ours s, torch s, torch threads, our output, torch output): torch at its faster thread count."""
        best = None
        for n in sorted({threads, 1}, reverse=True):
            torch.set_num_threads(n)
            ta, tb, a, b = _best((ours, peer), reps)
            if best is None or tb < best[1]:
                best = (min(ta, best[0]) if best else ta, tb, n, a, b)
            elif ta < best[0]:
                best = (ta,) + best[1:]
        return best

    ta, tb, n, a, b = vs_torch(lambda: m.run(feed)["out_sample"], torch_unet)
    rows = [{"model": "tiny-sd unet (batch 2)", "unit": "steps/s", "ours": 1 / ta, "peer": 1 / tb,
             "peer_name": f"diffusers (torch, {n} thread{'s' if n > 1 else ''})", "ratio": tb / ta,
             "err": float(np.abs(a - b).max())}]
    pipe = StableDiffusionPipeline(vae=sd.vae, text_encoder=sd.text_encoder, tokenizer=sd.tokenizer, unet=sd.unet,
                                   scheduler=EulerDiscreteScheduler.from_config(sd_tiny.SCHEDULER_CONFIG),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    lat = rng.standard_normal((1, 4, s, s), dtype=np.float32)

    def ours():
        return m.generate_image("a photo of a cat", steps=20, latents=lat, output_type="float")

    def peer():
        with torch.no_grad():
            return pipe("a photo of a cat", num_inference_steps=20, latents=torch.from_numpy(lat.copy()),
                        output_type="np").images[0]

    ta, tb, n, a, b = vs_torch(ours, peer)
    rows.append({"model": "tiny-sd 20-step image", "unit": "images/s", "ours": 1 / ta, "peer": 1 / tb,
                 "peer_name": f"diffusers (torch, {n} thread{'s' if n > 1 else ''})", "ratio": tb / ta,
                 "err": float(np.abs(a - b).max())})
    return rows


def _vm(key: str) -> int:
    """/proc/self/status's `key` (VmRSS, VmHWM) in bytes."""
    for ln in open("/proc/self/status"):
        if ln.startswith(key + ":"):
            return int(ln.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _rollup() -> dict:
    """/proc/self/smaps_rollup's Rss and Anonymous in bytes, and their difference: the file-backed
    resident bytes (the mapped .model); {} where the file is absent."""
    try:
        v = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in open("/proc/self/smaps_rollup") if ln.endswith("kB\n")}
    except OSError:
        return {}
    return {"rss": v["Rss"], "anon": v["Anonymous"], "file": v["Rss"] - v["Anonymous"]}


def _sd15_folder(folder: str, dtype: str) -> str:
    """An SD-1.5-shaped diffusers folder with random weights (torch's default init, seed 0) saved in
    `dtype`; the tokenizer is tests/sd_tiny.py's tiny CLIP BPE with model_max_length 77."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    import sd_tiny

    tok = sd_tiny._tokenizer()
    tok.model_max_length = 77
    torch.manual_seed(0)
    unet = UNet2DConditionModel(  # SD 1.5's unet/config.json
        sample_size=64, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(320, 640, 1280, 1280),
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, cross_attention_dim=768, attention_head_dim=8,
        norm_num_groups=32)
    vae = AutoencoderKL(  # SD 1.5's vae/config.json
        in_channels=3, out_channels=3, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4,
        norm_num_groups=32, sample_size=512)
    te = CLIPTextModel(CLIPTextConfig(  # CLIP ViT-L/14's text model
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12, vocab_size=49408,
        max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5, attn_implementation="eager"))
    pipe = StableDiffusionPipeline(vae=vae.eval(), text_encoder=te.eval(), tokenizer=tok, unet=unet.eval(),
                                   scheduler=PNDMScheduler.from_config(sd_tiny.SCHEDULER_CONFIG),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.to(torch.float16 if dtype == "float16" else torch.float32)
    pipe.save_pretrained(folder)
    return folder


def _sd15_model(tmp: str, dtype: str) -> tuple[str, str]:
    """(folder, .model): _sd15_folder saved in `dtype` under tmp, imported as `cyb-llm import` does."""
    from cyb_llm.convert import import_model

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = _sd15_folder(os.path.join(tmp, "sd15"), dtype)
    out = os.path.join(tmp, "sd15.model")
    import_model(src, out, progress=False)
    print(f"built and imported in {time.perf_counter() - t0:.0f} s ({os.path.getsize(out) / 2**30:.2f} GiB)")
    return src, out


def _sd15_child(path: str, threads: int) -> None:
    """In the child: VmRSS after import, load, a 512x512 2-step guided generation, the peaks (JSON)."""
    import cyb_llm

    base = _vm("VmRSS")
    t0 = time.perf_counter()
    m = cyb_llm.load(path, threads=threads)
    load_s, after_load, roll_load = time.perf_counter() - t0, _vm("VmRSS"), _rollup()
    t0 = time.perf_counter()
    m.generate_image("a photo of a cat", height=512, width=512, steps=2, guidance_scale=7.5, seed=0,
                     scheduler="euler")
    gen_s, after_gen, roll_gen = time.perf_counter() - t0, _vm("VmRSS"), _rollup()
    stages = {}
    for name, st in m.stages.items():
        try:
            stages[name] = st.last_run_memory()
        except Exception as e:  # noqa: BLE001 - a stage the run did not use (vae_encoder)
            stages[name] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"after_import": base, "after_load": after_load, "after_generate": after_gen, "peak": _vm("VmHWM"), "load_s": load_s,
                      "rollup_after_load": roll_load, "rollup_after_generate": roll_gen,
                      "generate_s": gen_s, "stats": m.last_stats.as_dict(), "stages": stages}))


def _weight_bytes(path: str) -> dict:
    """The .model's tensor bytes by encoding, its conv weights apart (the 4-D tensors of this
    pipeline are its conv weights)."""
    from cyb_llm.format import ModelFile

    out: dict = {}
    for t in ModelFile(path).tensors.values():
        k = t.encoding + (" conv weight" if len(t.shape) == 4 else "")
        out[k] = out.get(k, 0) + t.size
    return out


def _sd15_memory(a: argparse.Namespace) -> None:
    print(f"SD-1.5-shaped 512x512, 2 steps, guidance 7.5, {a.threads} threads, weights saved as {a.sd15_dtype}; "
          f"load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(dir=a.sd15_dir) as tmp:
        src, out = _sd15_model(tmp, a.sd15_dtype)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        r = subprocess.run([sys.executable, __file__, "--sd15-child", out, "--threads", str(a.threads)], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"child failed: {r.stderr.strip()[-2000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["file_bytes"] = os.path.getsize(out)
        res["weight_bytes"] = _weight_bytes(out)
    gib = 1 << 30
    runs = {k: v for k, v in res["stages"].items() if "planned_peak" in v}
    planned_sum = sum(v["planned_peak"] for v in runs.values())
    measured_max = max(v["measured_peak"] for v in runs.values())
    bound = res["after_import"] + res["file_bytes"] + measured_max
    packed = sum(v["weight_cache_bytes"] for v in runs.values())
    released = sum(v["released_weight_bytes"] for v in runs.values())
    # the weights as the kernels read them: the file with the packed originals replaced by their
    # copies (f32: about as many bytes; an f16 conv's f32 copy twice its bytes, a Winograd one 32/9)
    packed_bound = bound - released + packed
    print(f"  {'stage':14s} {'planned peak':>14s} {'measured peak':>14s} {'packed weights':>15s} {'pages released':>15s}")
    for k, v in res["stages"].items():
        if "planned_peak" in v:
            print(f"  {k:14s} {v['planned_peak'] / gib:12.3f} GiB {v['measured_peak'] / gib:12.3f} GiB "
                  f"{v['weight_cache_bytes'] / gib:11.3f} GiB {v['released_weight_bytes'] / gib:11.3f} GiB")
        else:
            print(f"  {k:14s} not run ({v['error'][:80]})")
    rows = [("RSS after import cyb_llm (allowance)", res["after_import"]), ("RSS after load", res["after_load"]),
            ("RSS after generate", res["after_generate"]),
            ("file bytes (weights)", res["file_bytes"]),
            *((f"  of which {k} tensors", b) for k, b in sorted(res["weight_bytes"].items())),
            ("packed weight copies (weight caches)", packed), ("original pages released once packed", released),
            ("text encoder weight pages released", res["stats"].get("text_encoder_released_bytes", 0)),
            ("sum of stage planned peaks", planned_sum),
            ("max stage measured peak", measured_max), ("bound: allowance+file+max stage", bound),
            ("bound, packed copies for originals", packed_bound), ("peak RSS (VmHWM)", res["peak"])]
    for k, v in rows:
        print(f"  {k:36s} {v / gib:8.3f} GiB")
    for when in ("after_load", "after_generate"):
        r = res.get(f"rollup_{when}") or {}
        if r:
            print(f"  smaps_rollup {when.replace('_', ' ')}: anonymous {r['anon'] / gib:.3f} GiB, "
                  f"file-backed {r['file'] / gib:.3f} GiB")
    print(f"  peak RSS <= bound: {res['peak'] <= bound}; <= the bound with the packed copies: "
          f"{res['peak'] <= packed_bound}; load {res['load_s']:.1f} s, generate "
          f"{res['generate_s']:.1f} s (UNet {res['stats']['unet_ms'] / 1000:.1f} s, VAE decoder "
          f"{res['stats']['vae_decoder_ms'] / 1000:.1f} s)")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)


def _sd15_gpu(a: argparse.Namespace) -> None:
    """An SD-1.5-shaped UNet (random weights saved as f16) on a GPU backend of ours against the same
    diffusers UNet in torch fp16 on CUDA, one guided step's batch (2 x 4 x 64 x 64 latents, 2 x 77 x
    768 text states): steps/s of each, the ratio, our output against torch f32 on the same weights
    (max |a - b| / max |f32|, and torch fp16's own), the peak device memory of each side."""
    import torch

    from cyb_llm import _core
    from cyb_llm.named_arrays import load_stage

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    print(f"SD-1.5-shaped UNet, f16 weights, batch 2 x 4 x 64 x 64, 77 tokens; {a.device} against torch fp16 "
          f"on {dev}")
    with tempfile.TemporaryDirectory(dir=a.sd15_dir) as tmp:
        src, out = _sd15_model(tmp, "float16")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 4, 64, 64), dtype=np.float32)
        t = np.array([500.0, 500.0], np.float32)
        emb = (0.5 * rng.standard_normal((2, 77, 768))).astype(np.float32)
        feed = {"sample": x, "timestep": t, "encoder_hidden_states": emb}
        rows = []
        _core.wgpu_memory(reset_peak=True)
        t0 = time.perf_counter()
        unet = load_stage(out, "unet", backend=a.device)
        print(f"our unet loaded on {a.device} in {time.perf_counter() - t0:.1f} s")
        ours = unet.run(feed)["out_sample"]  # warm-up (pipelines, first uploads)
        ta = _gpu_best(lambda: unet.run(feed)["out_sample"], a.reps)
        ours_peak = _core.wgpu_memory()["peak_bytes"]
        del unet
        from diffusers import UNet2DConditionModel

        on = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only to try the bench where no GPU is
        tu = UNet2DConditionModel.from_pretrained(os.path.join(src, "unet"), torch_dtype=torch.float16).to(on).eval()
        tx, tt, te = (torch.from_numpy(v).to(on) for v in (x, t, emb))

        def torch_step():
            with torch.no_grad():
                r = tu(tx.half(), tt.half(), te.half()).sample
            if on == "cuda":
                torch.cuda.synchronize()
            return r

        half = torch_step().float().cpu().numpy()
        if on == "cuda":
            torch.cuda.reset_peak_memory_stats()
        tb = _gpu_best(torch_step, a.reps)
        torch_peak = torch.cuda.max_memory_allocated() if on == "cuda" else 0
        tu = tu.float()
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.no_grad():
            ref = tu(tx, tt, te).sample.cpu().numpy()
        scale = float(np.abs(ref).max())
        rows.append({"model": "sd15-shaped unet (batch 2, f16 weights)", "unit": "steps/s", "ours": 1 / ta,
                     "peer": 1 / tb, "peer_name": "torch fp16 (CUDA, eager)", "ratio": tb / ta,
                     "err_ours_vs_f32": float(np.abs(ours - ref).max()) / scale,
                     "err_torch_fp16_vs_f32": float(np.abs(half - ref).max()) / scale,
                     "ours_peak_mib": ours_peak / 2**20, "torch_peak_mib": torch_peak / 2**20, "device": dev})
    r = rows[0]
    print(f"  ours {r['ours']:.2f} steps/s ({ta * 1000:.1f} ms), torch fp16 {r['peer']:.2f} steps/s "
          f"({tb * 1000:.1f} ms): {r['ratio']:.3f}x")
    print(f"  vs torch f32 (max |a-b| / max |f32|): ours {r['err_ours_vs_f32']:.2e}, torch fp16 "
          f"{r['err_torch_fp16_vs_f32']:.2e}")
    print(f"  peak device memory: ours {r['ours_peak_mib']:.0f} MiB (buffers), torch {r['torch_peak_mib']:.0f} MiB "
          f"(allocator)")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


def _gpu_best(fn, reps: int) -> float:
    """The median seconds of `reps` calls of fn() (each returns once its result is on the host or
    synchronized)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _child(a: argparse.Namespace) -> None:
    rows = []
    for name in a.models.split(","):
        try:
            if name == "terrain":
                rows += _terrain(a.threads, a.reps)
            elif name == "tiny-sd":
                rows += _tiny_sd(a.threads, a.reps, a.sd_path, a.sd_folder)
        except Exception as e:  # noqa: BLE001 - reported in the table, the other models still run
            rows.append({"model": name, "skipped": f"{type(e).__name__}: {e}"})
    print(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--levels", default="avx2,avx512,amx", help="CYB_CPU_LEVEL of each child, comma separated")
    ap.add_argument("--models", default="terrain,tiny-sd")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sd-path", help=argparse.SUPPRESS)
    ap.add_argument("--sd-folder", help=argparse.SUPPRESS)
    ap.add_argument("--sd15-memory", action="store_true", help="peak RSS of an SD-1.5-shaped 512x512 generation")
    ap.add_argument("--sd15-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--sd15-dir", help="where the temporary folder and .model go (default: the system's temp)")
    ap.add_argument("--sd15-child", help=argparse.SUPPRESS)
    ap.add_argument("--sd15-gpu", action="store_true",
                    help="an SD-1.5-shaped f16 UNet step on --device against torch fp16 on CUDA")
    ap.add_argument("--device", default="wgpu+rs", help="our backend for --sd15-gpu")
    a = ap.parse_args()
    if a.child:
        return _child(a)
    if a.sd15_child:
        return _sd15_child(a.sd15_child, a.threads)
    if a.sd15_memory:
        return _sd15_memory(a)
    if a.sd15_gpu:
        return _sd15_gpu(a)
    import onnxruntime as ort
    import torch

    from cyb_llm import _core

    have = _core.cpu_levels()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               "?") if os.path.exists("/proc/cpuinfo") else "?"
    print(f"{cpu}, {os.cpu_count()} CPUs visible, {a.threads} threads, onnxruntime {ort.__version__}, torch "
          f"{torch.__version__}, best of {a.reps}, load average {os.getloadavg()[0]:.1f} at start")
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        extra = []
        if "tiny-sd" in a.models:
            import sd_tiny

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path, _ = sd_tiny.make_model(tmp)
            extra = ["--sd-path", path, "--sd-folder", tmp]
        for level in a.levels.split(","):
            if level not in have:
                print(f"{level}: not on this CPU (levels here: {', '.join(have)})")
                continue
            env = dict(os.environ, CYB_CPU_LEVEL=level, PYTHONPATH=str(ROOT / "python"))
            cmd = [sys.executable, __file__, "--child", "--threads", str(a.threads), "--reps", str(a.reps),
                   "--models", a.models] + extra
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{level}: child failed: {r.stderr.strip()[-800:]}")
                continue
            table[level] = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"\nCYB_CPU_LEVEL={level} (load average {os.getloadavg()[0]:.1f} after it)")
            print(f"  {'model':24s} {'unit':>9s} {'cyb_llm':>9s} {'peer':>9s}  {'ratio':>6s} {'max err':>8s}  peer")
            for row in table[level]:
                if "skipped" in row:
                    print(f"  {row['model']:24s} skipped: {row['skipped'][:160]}")
                    continue
                print(f"  {row['model']:24s} {row['unit']:>9s} {row['ours']:9.2f} {row['peer']:9.2f} "
                      f"{row['ratio']:5.2f}x {row['err']:8.1e}  {row['peer_name']}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": cpu, "threads": a.threads, "reps": a.reps, "levels": table}, f, indent=1)


if __name__ == "__main__":
    main()
