"""Whisper speed on a GPU: cyb_llm wgpu+rs against transformers' WhisperForConditionalGeneration in
fp16 on CUDA, same model, same work, one run (docs/whisper.md, "Speed"). For the lent H200, which
has torch and transformers but no network: real Whisper weights cannot travel there and speed does
not depend on the weight values, so the model is a WhisperForConditionalGeneration of a real
model's exact shape (tiny / base / small) with seeded random weights, saved by transformers and
imported by cyb_llm's HF importer (with a BPE tokenizer.json of the model's vocabulary size, no merges).

Both engines do the work of decoding one 30 s window: the encoder on a log-mel window, a 4-token
prompt, then `--steps` single-token decoder steps with the self-attention cache and the window's
cross-attention K/V (the same seeded token ids fed to both: random weights would otherwise decode
different lengths). Printed: windows/s and the real-time factor of each (seconds of compute per
second of audio), the ratio, and the agreement of the first step's logits with transformers f32.

`--beams N` (N > 1) also times a beam search of N beams over `--steps` steps after the prompt, on
both sides, with the end-of-text token never chosen so that both run every step (the same work):
ours is the transcription path's own search (cyb_llm.speech.search.beam_search: the beams' one-token
rows as one batched forward a step, the beams reordered by cloning sessions, whose self caches are
copied on the device on wgpu+rs) with no logit rules; theirs is transformers' `generate` beam search
(num_beams=N, min_new_tokens = max_new_tokens = steps) on the same encoder output.

--shape large-v3: 128 mel bins, 51866 tokens, 32 + 32 layers of 1280 (random weights: 1.55 B
parameters, about 6 GB in float32 for the import); `--layers 2` keeps its widths with two layers
each side (a dry run on a small machine).

    python bench/gpu_bench_whisper.py [--shape base|tiny|small|large-v3] [--layers N] [--steps 128]
        [--reps 3] [--beams 5] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

SHAPES = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                 decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
    "small": dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                  decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),
    # large-v3: 128 mel bins and one more token than the others
    "large-v3": dict(d_model=1280, encoder_layers=32, decoder_layers=32, encoder_attention_heads=20,
                     decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120,
                     num_mel_bins=128, vocab_size=51866),
}
VOCAB = 51865
WINDOW_S = 30.0


def shape_config(shape: str, layers: int = 0) -> dict:
    """The config keys of a shape (80 mels and 51865 tokens unless it says otherwise); layers > 0:
    that many encoder and decoder layers instead (a quick run of a large shape's other dims)."""
    c = {"vocab_size": VOCAB, "num_mel_bins": 80, **SHAPES[shape]}
    if layers > 0:
        c["encoder_layers"] = c["decoder_layers"] = layers
    return c


def make_model(cfg_keys: dict, folder: str):
    """A seeded random whisper of the shape, saved as an HF folder with a merge-less BPE tokenizer."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    cfg = tf.WhisperConfig(max_source_positions=1500, max_target_positions=448,
                           pad_token_id=50257, bos_token_id=50257, eos_token_id=50257,
                           decoder_start_token_id=50258, **cfg_keys)
    torch.manual_seed(0)
    model = tf.WhisperForConditionalGeneration(cfg).eval()
    model.save_pretrained(folder, safe_serialization=True)
    vocab = cfg_keys["vocab_size"]
    tok = Tokenizer(BPE({f"t{i}": i for i in range(vocab)}, [], unk_token="t0"))
    tok.save(os.path.join(folder, "tokenizer.json"))
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="base")
    ap.add_argument("--steps", type=int, default=128, help="single-token decoder steps per window")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="wgpu+rs")
    ap.add_argument("--beams", type=int, default=1, help="also a beam search of this many beams (> 1)")
    ap.add_argument("--layers", type=int, default=0,
                    help="encoder and decoder layers instead of the shape's (a quick dry run of large-v3's dims)")
    ap.add_argument("--torch-cpu", action="store_true",
                    help="without CUDA, time the torch side in float32 on the CPU (a dry run of the script)")
    ap.add_argument("--out", default=None, help="folder for the JSON result")
    a = ap.parse_args()

    import torch

    import cyb_llm
    from cyb_llm.convert import import_model

    tmp = tempfile.mkdtemp()
    keys = shape_config(a.shape, a.layers)
    ref = make_model(keys, tmp)
    path = os.path.join(tmp, f"whisper-{a.shape}-shape.model")
    import_model(tmp, path, progress=False)
    rng = np.random.default_rng(0)
    mel = (rng.standard_normal((keys["num_mel_bins"], 3000)) * 0.5).astype(np.float32)
    prompt = [50258, 50259, 50359, 50363]
    steps = [int(t) for t in rng.integers(0, 50257, size=a.steps)]

    m = cyb_llm.load(path, backend=a.backend)

    def ours() -> np.ndarray:
        s = m.new_session()
        s.start(m.encode(mel))
        first = s.forward(prompt, all_logits=False)
        for t in steps:
            s.forward([t], all_logits=False)
        return first

    def theirs(model, device, dtype) -> np.ndarray:
        with torch.no_grad():
            feats = torch.from_numpy(mel)[None].to(device, dtype)
            enc = model.model.encoder(feats)
            out = model(encoder_outputs=enc, decoder_input_ids=torch.tensor([prompt], device=device), use_cache=True)
            first = out.logits[0, -1].float().cpu().numpy()
            past = out.past_key_values
            for t in steps:
                out = model(encoder_outputs=enc, decoder_input_ids=torch.tensor([[t]], device=device),
                            past_key_values=past, use_cache=True)
                past = out.past_key_values
            if device == "cuda":
                torch.cuda.synchronize()
            return first

    def ours_beam() -> list[int]:
        from cyb_llm.speech.search import LogitRules, beam_search

        s = m.new_session()
        s.start(m.encode(mel))
        first = np.asarray(s.forward(prompt, all_logits=False), dtype=np.float32).reshape(-1)
        hyp = beam_search(s, first, LogitRules(timestamps=False), eot=-1, max_steps=a.steps, beam_size=a.beams)
        return hyp.tokens

    def theirs_beam(model, device, dtype) -> list[int]:
        import transformers

        cfg = transformers.GenerationConfig(num_beams=a.beams, max_new_tokens=a.steps, min_new_tokens=a.steps,
                                            do_sample=False, early_stopping=False, num_return_sequences=1,
                                            eos_token_id=50257, pad_token_id=50257, decoder_start_token_id=prompt[0])
        with torch.no_grad():
            feats = torch.from_numpy(mel)[None].to(device, dtype)
            enc = model.model.encoder(feats)
            out = transformers.GenerationMixin.generate(model, encoder_outputs=enc, generation_config=cfg,
                                                        decoder_input_ids=torch.tensor([prompt], device=device))
            if device == "cuda":
                torch.cuda.synchronize()
        return out[0, len(prompt):].tolist()

    want = theirs(ref, "cpu", torch.float32)
    got = ours()
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))

    def timed_run(fn) -> tuple[float, object]:
        """(best seconds of a.reps calls, the warm-up call's result)."""
        out = fn()  # warm-up
        best = float("inf")
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best, out

    def timed(fn) -> float:
        return timed_run(fn)[0]

    res = {"shape": a.shape, "layers": keys["encoder_layers"], "n_mels": keys["num_mel_bins"], "steps": a.steps, "backend": a.backend, "first_step_logits_rel_err_vs_torch_f32": err,
           "ops_not_on_backend": sorted({r["op"] for r in m.dispatch_records if r["backend"] != a.backend})}
    t_ours = timed(ours)
    res["cyb_llm_seconds_per_window"] = t_ours
    res["cyb_llm_rtf"] = t_ours / WINDOW_S
    if a.beams > 1:
        t_beam, toks = timed_run(ours_beam)
        res["beams"] = a.beams
        res["beam_tokens_ours"] = len(toks)
        res["cyb_llm_beam_seconds_per_window"] = t_beam
    dev, dt = ("cuda", torch.float16) if torch.cuda.is_available() else ("cpu", torch.float32)
    if dev == "cuda" or a.torch_cpu:
        peer = ref.half().cuda() if dev == "cuda" else ref
        t_theirs = timed(lambda: theirs(peer, dev, dt))
        res["torch_seconds_per_window"] = t_theirs
        res["torch_rtf"] = t_theirs / WINDOW_S
        res["torch_device"] = (torch.cuda.get_device_name(0) + " (float16)") if dev == "cuda" else "cpu (float32)"
        res["speed_ratio_cyb_over_torch"] = t_theirs / t_ours
        if a.beams > 1:
            t_beam, toks = timed_run(lambda: theirs_beam(peer, dev, dt))
            res["beam_tokens_torch"] = len(toks)
            res["torch_beam_seconds_per_window"] = t_beam
            res["beam_speed_ratio_cyb_over_torch"] = t_beam / res["cyb_llm_beam_seconds_per_window"]
    print(json.dumps(res, indent=1))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "whisper_gpu.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
