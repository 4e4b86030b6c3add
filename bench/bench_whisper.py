"""Whisper transcription speed on the CPU: cyb_llm against faster-whisper (CTranslate2) on the same
clips, same threads, same beam, in one run (docs/whisper.md, "Speed").

Usage: CYB_LLM_CORE_DIR=... PYTHONPATH=python python bench/bench_whisper.py [--model whisper-tiny]
       [--threads 2] [--beam-size 5] [--reps 3] [--clips 30,75] [--audio FILE ...]
       [--skip precise,q8_0,fw-int8,...] [--cpu-level amx|avx512|avx2] [--profile] [--json FILE]

Clips: English speech synthesized with the Piper voice of tests/whisper_speech.py (its sentences,
cycled until a clip reaches the asked seconds; each clip's reference text is the sentences spoken),
or `--audio FILE...` (no reference: no word error rate). Engines: cyb_llm fast (the model as
shipped, F16 weights, f16 self cache), cyb_llm precise, cyb_llm on `--quantize q8_0` weights (the
CTranslate2 folder imported once by cyb_llm.convert.import_model, cached under
build/bench_whisper/), faster-whisper float32 and int8 (`cpu_threads` = `--threads`). Every engine
gets the same explicit decoding options (those of tests/whisper_speech.py fw_options: temperature
fallback, thresholds, conditioning on previous text; faster-whisper without VAD and word
timestamps). After one warm-up call per engine and clip, `--reps` rounds run every engine once in
turn (a change of the machine's load hits all alike); each engine's best time counts.

Printed per clip and engine: seconds, real-time factor (compute seconds / audio seconds), the
ratio of cyb_llm fast's time to the engine's (> 1: cyb_llm fast is faster), word error rate
against the spoken sentences, whether the text equals faster-whisper float32's; then the goal
ratios faster-whisper float32 / cyb_llm fast and faster-whisper int8 / cyb_llm q8_0.
`--profile`: one more cyb_llm fast transcription per clip with per-op timings (dispatch records)
and the Python-side time of the decoding pipeline (cProfile).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

sys.path.insert(0, str(ROOT / "tests"))
# the sentences, their synthesis, the decoding options and the word error rate of the tests
# (tests/whisper_speech.py: torch-free, unlike tests/whisper_oracle.py)
from whisper_speech import SR, english_clip, fw_options, ours_options, sentences_for, word_errors  # noqa: E402


def speech_clips(seconds: list[float], gap_s: float = 0.4) -> list[tuple[str, np.ndarray, str]]:
    """(name, samples, reference text) per asked length: the sentences in order (cycled), each
    followed by `gap_s` of silence, until the clip reaches the length."""
    out = []
    for target in seconds:
        said = sentences_for(target, gap_s)
        x = english_clip(said, gap_s)
        out.append((f"speech {x.size / SR:.1f} s", x, " ".join(said)))
    return out


def wer(hyp: str, ref: str) -> float:
    e, n = word_errors(ref, hyp)
    return e / max(1, n)


# ---- engines ------------------------------------------------------------------------------------

def q8_model(name: str, folder: str) -> str:
    """The CTranslate2 folder imported with q8_0 weights, once (cached under build/bench_whisper/)."""
    from cyb_llm.convert import import_model

    out = ROOT / "build" / "bench_whisper" / f"{name}-q8_0.model"
    stamp = out.with_suffix(".src")
    src = str(Path(folder).resolve())
    if not out.exists() or not stamp.exists() or stamp.read_text() != src:
        out.parent.mkdir(parents=True, exist_ok=True)
        import_model(folder, str(out), quantize="q8_0", progress=False)
        stamp.write_text(src)
    return str(out)


def make_cyb(path: str, threads: int, precise: bool, beam: int):
    import cyb_llm

    m = cyb_llm.load(path, precise=precise, threads=threads)
    opts = ours_options(beam)
    return m, (lambda audio: m.transcribe(audio, language="en", **opts)["text"].strip())


def make_fw(folder: str, threads: int, compute_type: str, beam: int):
    from faster_whisper import WhisperModel

    m = WhisperModel(folder, device="cpu", compute_type=compute_type, cpu_threads=threads, num_workers=1)
    opts = fw_options(beam)

    def run(audio):
        segments, _ = m.transcribe(audio, language="en", **opts)
        return "".join(s.text for s in segments).strip()

    return m, run


def profile_cyb(model, audio: np.ndarray, beam: int, top: int = 12) -> dict:
    """Per-op native time (dispatch records) and the Python side of one transcription (cProfile)."""
    import cProfile
    import pstats

    native = model._native
    native.clear_dispatch_records()
    native.set_profiling(True)
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    model.transcribe(audio, language="en", **ours_options(beam))
    pr.disable()
    wall = time.perf_counter() - t0
    native.set_profiling(False)
    recs = native.dispatch_records()
    by_op: dict[str, list[float]] = {}
    for r in recs:
        e = by_op.setdefault(r["op"], [0.0, 0])
        e[0] += float(r.get("total_ms", 0.0))
        e[1] += int(r.get("count", 0))
    by_label: dict[str, list[float]] = {}
    for r in recs:
        e = by_label.setdefault(r["label"], [0.0, 0])
        e[0] += float(r.get("total_ms", 0.0))
        e[1] += int(r.get("count", 0))
    st = pstats.Stats(pr)
    funcs = []
    for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
        funcs.append((tt, ct, nc, f"{os.path.basename(file)}:{line}:{fn}"))
    funcs.sort(reverse=True)
    native_ms = sum(v[0] for v in by_op.values())
    return dict(wall_s=wall, native_op_ms=native_ms,
                ops=sorted(([k, round(v[0], 1), v[1]] for k, v in by_op.items()), key=lambda x: -x[1]),
                labels=sorted(([k, round(v[0], 1), v[1]] for k, v in by_label.items()), key=lambda x: -x[1])[:top],
                python_self=[[round(tt, 3), round(ct, 3), nc, name] for tt, ct, nc, name in funcs[:top]])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="whisper-tiny", choices=["whisper-tiny", "whisper-base"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clips", default="30,75", help="comma list of synthesized clip lengths in seconds")
    ap.add_argument("--audio", nargs="+", help="audio files instead of synthesized speech (no word error rate)")
    ap.add_argument("--skip", default="", help="comma list of engines to leave out: fast, precise, q8_0, "
                                               "fw-f32, fw-int8")
    ap.add_argument("--cpu-level", help="sets CYB_CPU_LEVEL (amx, avx512, avx2, ...) before cyb_llm loads")
    ap.add_argument("--profile", action="store_true", help="also profile one cyb_llm fast transcription per clip")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args(argv)
    if a.cpu_level:
        os.environ["CYB_CPU_LEVEL"] = a.cpu_level

    from cyb_llm import _core, hub
    from cyb_llm.speech.audio import load_audio

    skip = set(filter(None, a.skip.split(",")))
    path, folder = hub.fetch(a.model, progress=False), hub.fetch_source(a.model, progress=False)
    if a.audio:
        clips = [(os.path.basename(f), load_audio(f), None) for f in a.audio]
    else:
        clips = speech_clips([float(s) for s in a.clips.split(",")])

    specs = [("cyb fast", "fast", lambda: make_cyb(path, a.threads, False, a.beam_size)),
             ("cyb precise", "precise", lambda: make_cyb(path, a.threads, True, a.beam_size)),
             ("cyb q8_0", "q8_0", lambda: make_cyb(q8_model(a.model, folder), a.threads, False, a.beam_size)),
             ("fw float32", "fw-f32", lambda: make_fw(folder, a.threads, "float32", a.beam_size)),
             ("fw int8", "fw-int8", lambda: make_fw(folder, a.threads, "int8", a.beam_size))]
    engines = [(name, *make()) for name, key, make in specs if key not in skip]
    level = os.environ.get("CYB_CPU_LEVEL") or "default"
    try:
        level = f"{level} (have {', '.join(_core.cpu_levels())})"
    except Exception:
        pass
    load = os.getloadavg()
    print(f"{a.model}, beam {a.beam_size}, {a.threads} threads, CYB_CPU_LEVEL {level}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cpus")

    results = []
    for cname, audio, ref in clips:
        dur = audio.size / SR
        texts = [fn(audio) for _, _, fn in engines]  # warm-up (its text is the one judged)
        best = [float("inf")] * len(engines)
        for _ in range(a.reps):
            for i, (_, _, fn) in enumerate(engines):
                t0 = time.perf_counter()
                fn(audio)
                best[i] = min(best[i], time.perf_counter() - t0)
        by = {n: (b, t) for (n, _, _), b, t in zip(engines, best, texts)}
        fast_s = by.get("cyb fast", (None,))[0]
        fw_text = by.get("fw float32", (None, None))[1]
        print(f"\n{cname} ({dur:.1f} s of audio)")
        print(f"| engine | seconds | RTF | cyb fast is x faster | WER | text == fw float32 |")
        print(f"|---|---|---|---|---|---|")
        rows = []
        for n, (b, t) in by.items():
            w = wer(t, ref) if ref else None
            row = dict(engine=n, seconds=b, rtf=b / dur, vs_fast=(b / fast_s if fast_s else None), wer=w,
                       same_as_fw_f32=(t == fw_text if fw_text is not None else None), text=t)
            rows.append(row)
            print(f"| {n} | {b:.2f} | {b / dur:.3f} | {row['vs_fast']:.2f} | "
                  f"{'-' if w is None else f'{100 * w:.1f}%'} | {row['same_as_fw_f32']} |"
                  if fast_s else f"| {n} | {b:.2f} | {b / dur:.3f} | - | {w} | {row['same_as_fw_f32']} |")
        goals = {}
        if "fw float32" in by and "cyb fast" in by:
            goals["fw_f32_over_cyb_fast"] = by["fw float32"][0] / by["cyb fast"][0]
        if "fw int8" in by and "cyb q8_0" in by:
            goals["fw_int8_over_cyb_q8_0"] = by["fw int8"][0] / by["cyb q8_0"][0]
        for k, v in goals.items():
            print(f"{k}: {v:.2f}" + ("  (goal >= 1.5)" if "f32" in k else "  (goal >= 1.0)"))
        for n, (_, t) in by.items():
            if t != fw_text:
                print(f"  {n}: {t!r}")
        if fw_text is not None:
            print(f"  fw float32: {fw_text!r}")
        clip = dict(clip=cname, audio_s=dur, reference=ref, engines=rows, goals=goals)
        if a.profile and "cyb fast" in by:
            m = next(e[1] for e in engines if e[0] == "cyb fast")
            p = profile_cyb(m, audio, a.beam_size)
            clip["profile"] = p
            print(f"profile (cyb fast, one transcription with per-op timings and cProfile on: {p['wall_s']:.2f} s, "
                  f"native ops {p['native_op_ms'] / 1000:.2f} s)")
            for op, ms, cnt in p["ops"][:10]:
                print(f"  op {op:<20} {ms / 1000:7.3f} s  {cnt} calls")
            for op, ms, cnt in p["labels"][:10]:
                print(f"  label {op:<40} {ms / 1000:7.3f} s  {cnt} calls")
            for tt, ct, nc, name in p["python_self"]:
                print(f"  py self {tt:7.3f} s  cum {ct:7.3f} s  {nc:7d}  {name}")
        results.append(clip)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, threads=a.threads, beam_size=a.beam_size, reps=a.reps,
                           cpu_level=level, load_before=load, load_after=os.getloadavg(), clips=results), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
