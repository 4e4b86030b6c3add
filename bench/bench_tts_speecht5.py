"""Two-stage TTS speed (docs/tts.md "Two-stage models"): the SpeechT5 acoustic model (text -> mel, the
autoregressive loop over the imported stages) vs transformers' SpeechT5ForTextToSpeech.generate_speech
on the same weights and ids, both on the same number of threads, in one run.

    PYTHONPATH=python python bench/bench_tts_speecht5.py [--threads 2] [--tokens 60] [--steps 100]

The model is SpeechT5's released size (transformers' default SpeechT5Config: hidden 768, 12 encoder
and 6 decoder layers, 80 mel, reduction factor 2) with random weights built here (no download) and
speech_decoder_prenet_dropout 0 (so both sides compute the same mel); minlenratio = maxlenratio fix
the number of decoder steps. Prints the best of `repeat` runs for each side and the ratio, plus the
per-step time. torch and transformers are the peer here only."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def _best(fn, repeat: int) -> float:
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=60, help="input length (token ids)")
    ap.add_argument("--steps", type=int, default=100, help="decoder steps (2 mel frames each)")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    import torch
    import transformers

    import cyb_llm

    torch.set_num_threads(a.threads)
    cfg = transformers.SpeechT5Config(speech_decoder_prenet_dropout=0.0)
    torch.manual_seed(0)
    hf = transformers.SpeechT5ForTextToSpeech(cfg).eval()
    d = tempfile.mkdtemp()
    folder = os.path.join(d, "speecht5")
    hf.save_pretrained(folder)
    out = os.path.join(d, "tts.model")
    cyb_llm.convert.import_model(folder, out, progress=False)
    m = cyb_llm.load(out, threads=a.threads)
    ids = [4 + (i * 7) % 70 for i in range(a.tokens - 1)] + [2]
    spk = np.random.default_rng(0).standard_normal(512).astype(np.float32)
    ratio = a.steps * cfg.reduction_factor / len(ids)
    kw = {"minlenratio": ratio, "maxlenratio": ratio}
    ours = m.text_to_mel(ids, speaker_embedding=spk, **kw)
    with torch.no_grad():
        ref = hf.generate_speech(torch.tensor([ids]), torch.tensor(spk[None]), **kw).numpy()
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    t_ours = _best(lambda: m.text_to_mel(ids, speaker_embedding=spk, **kw), a.repeat)

    def peer():
        with torch.no_grad():
            hf.generate_speech(torch.tensor([ids]), torch.tensor(spk[None]), **kw)

    t_hf = _best(peer, a.repeat)
    level = cyb_llm._core.cpu_level()
    print(f"SpeechT5 (768 hidden, 12+6 layers), {len(ids)} tokens, {ours.shape[0]} frames, {a.threads} threads, "
          f"cpu level {level}, mel error vs transformers {err:.1e}")
    print(f"  cyb_llm      {t_ours:7.3f} s  ({t_ours / a.steps * 1000:6.2f} ms / step)")
    print(f"  transformers {t_hf:7.3f} s  ({t_hf / a.steps * 1000:6.2f} ms / step)")
    print(f"  speed-up x{t_hf / t_ours:.2f}")


if __name__ == "__main__":
    sys.exit(main())
