"""The native whisper family (csrc/families/whisper.cc, docs/whisper.md "The whisper family")
against transformers' WhisperForConditionalGeneration on tiny random checkpoints built here from
WhisperConfig (an 80-mel one and a 128-mel large-v3-shaped one), saved as HF folders and imported
with the HF importer: the encoder output and the decoder logits of a prompt plus single-token steps
through the self-attention cache, at every cpu level (`_core.cpu_levels()`) and on wgpu+rs
(lavapipe in CI; every op must run there: tests/placement.py), within `precise-vs-transformers`
(docs/runtime.md, "Tolerances").

The cross-attention cache test bites: the dispatch records must show the cross-attention K/V
projections once per window (start), however many tokens are decoded; a decoder that recomputed
them per token fails it. The q8_0 import is judged on its decoded weights (the transformers model
gets the dequantized values), within the same bound.
"""
from __future__ import annotations

import gc
import json
import os

import numpy as np
import pytest

from cyb_llm import _core, errors
from cyb_llm.speech.model import WhisperModel, reorder
from placement import assert_ran_on, wgpu_skip_reason
from tolerances import tolerance

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

TOL = tolerance("precise-vs-transformers")
FAST = tolerance("fast-vs-precise/whisper-tiny")
LEVELS = _core.cpu_levels()
WGPU_SKIP = wgpu_skip_reason()
BACKENDS = [f"cpu:{lvl}" for lvl in LEVELS] + ["wgpu+rs"]
SHAPES = {"tiny80": dict(num_mel_bins=80), "v3-128": dict(num_mel_bins=128)}
PROMPT = [3, 7, 11]
STEPS = [5, 9, 2]


def rel_err(a, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(a, np.float64) - ref)) / np.max(np.abs(ref)))


def make_folder(root, n_mels: int, seed: int = 0) -> str:
    """A tiny random WhisperForConditionalGeneration saved as an HF folder (safetensors, config,
    a small byte-level BPE tokenizer.json)."""
    from encoder_fixtures import make_tokenizer

    tok, _ = make_tokenizer("roberta")
    vocab = tok.get_vocab_size(True)
    cfg = tf.WhisperConfig(vocab_size=vocab, num_mel_bins=n_mels, d_model=64, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                           decoder_ffn_dim=128, max_source_positions=1500, max_target_positions=48,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    torch.manual_seed(seed)
    model = tf.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # norms and biases away from their 1 / 0 init, so that each one is tested
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    folder = os.path.join(str(root), f"whisper-{n_mels}")
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}, f)
    return folder


class Tiny:
    def __init__(self, root, n_mels):
        from cyb_llm.convert import import_model

        self.folder = make_folder(root, n_mels)
        self.path = self.folder + ".model"
        import_model(self.folder, self.path, progress=False)
        self.hf = tf.WhisperForConditionalGeneration.from_pretrained(self.folder).eval()
        rng = np.random.default_rng(5)
        self.mel = rng.standard_normal((n_mels, 3000)).astype(np.float32)
        self.ids = PROMPT + STEPS
        self.ref_enc, self.ref_logits = self.reference(self.hf)

    def reference(self, hf):
        with torch.no_grad():
            enc = hf.model.encoder(torch.tensor(self.mel[None])).last_hidden_state
            out = hf(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([self.ids]))
        return enc[0].numpy(), out.logits[0].numpy()


@pytest.fixture(scope="module")
def tinies(tmp_path_factory):
    cache = {}

    def get(shape):
        if shape not in cache:
            cache[shape] = Tiny(tmp_path_factory.mktemp(shape), SHAPES[shape]["num_mel_bins"])
        return cache[shape]
    return get


@pytest.fixture(autouse=True)
def _restore_level():
    before = _core.cpu_level()
    yield
    _core.set_cpu_level(before)


def load(path, backend, precise=True):
    kind, _, lvl = backend.partition(":")
    if kind == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    if lvl:
        _core.set_cpu_level(lvl)
    return WhisperModel(path, backend=kind, precise=precise)


def decode(m, enc):
    """Logits of the prompt (one forward) then of each step token (one forward each), [n, vocab]."""
    s = m.new_session()
    s.start(enc)
    rows = [s.forward(PROMPT)]
    for t in STEPS:
        rows.append(s.forward([t]))
    return np.concatenate(rows), s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_whisper_matches_transformers(tinies, shape, backend):
    t = tinies(shape)
    m = load(t.path, backend)
    assert (m.n_mels, m.n_audio_ctx, m.d_model) == (SHAPES[shape]["num_mel_bins"], 1500, 64)
    enc = m.encode(t.mel)
    assert enc.shape == (1500, 64)
    assert rel_err(enc, t.ref_enc) <= TOL, "encoder"
    logits, s = decode(m, enc)
    assert logits.shape == t.ref_logits.shape and s.position == len(t.ids)
    assert rel_err(logits, t.ref_logits) <= TOL, "decoder"
    if backend == "wgpu+rs":
        assert_ran_on(m, "wgpu+rs", f"whisper {shape}")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_fast_mode_stays_near_precise(tinies, shape):
    t = tinies(shape)
    precise = WhisperModel(t.path, backend="cpu", precise=True)
    fast = WhisperModel(t.path, backend="cpu", precise=False)
    enc_p, enc_f = precise.encode(t.mel), fast.encode(t.mel)
    assert rel_err(enc_f, enc_p) <= FAST
    assert rel_err(decode(fast, enc_f)[0], decode(precise, enc_p)[0]) <= FAST


def test_batched_encode_equals_one_window_at_a_time(tinies):
    t = tinies("tiny80")
    m = WhisperModel(t.path, backend="cpu", precise=True)
    mel2 = np.stack([t.mel, t.mel[:, ::-1].copy()])
    both = m.encode(mel2)
    assert both.shape == (2, 1500, 64)
    assert rel_err(both[0], m.encode(mel2[0])) <= TOL
    assert rel_err(both[1], m.encode(mel2[1])) <= TOL


def test_cross_kv_computed_once_per_window(tinies):
    """The cross-attention K/V projections run in start() only: once per window and layer,
    never per decoded token (a decoder recomputing them would count len(ids) per layer)."""
    t = tinies("tiny80")
    m = WhisperModel(t.path, backend="cpu", precise=True)
    enc = m.encode(t.mel)
    m.clear_dispatch_records()

    def counts():
        c = {}
        for r in m.dispatch_records:
            c[r["label"]] = c.get(r["label"], 0) + r["count"]
        return c

    s = m.new_session()
    s.start(enc)
    s.forward(PROMPT)
    for tok in STEPS:
        s.forward([tok])
    c = counts()
    n_forwards = 1 + len(STEPS)
    for layer in range(2):
        base = f"decoder.layers.{layer}.encoder_attn"
        assert c[f"{base}.k_proj"] == 1 and c[f"{base}.v_proj"] == 1, c
        assert c[f"{base}.q_proj"] == n_forwards  # the cross attention itself ran every forward
        assert c[f"{base}.attention"] == n_forwards
    # a second window: once more; a clone shares the window's K/V (no projection)
    s2 = s.clone()
    s2.forward([4])
    s.start(enc)
    s.forward(PROMPT)
    c = counts()
    for layer in range(2):
        assert c[f"decoder.layers.{layer}.encoder_attn.k_proj"] == 2
        assert c[f"decoder.layers.{layer}.encoder_attn.v_proj"] == 2


@pytest.mark.parametrize("backend", ["cpu", "wgpu+rs"])
def test_clone_and_copy_continue_like_the_original(tinies, backend):
    # on wgpu+rs the self caches are copied on the device (copy ops, no read-back): the clone and the
    # reordered session continue with the original's logits, bit for bit
    t = tinies("tiny80")
    m = load(t.path, backend)
    enc = m.encode(t.mel)
    s = m.new_session()
    s.start(enc)
    s.forward(PROMPT)
    c = s.clone()
    assert c.position == len(PROMPT) and c.started
    a = s.forward([STEPS[0]])
    b = c.forward([STEPS[0]])
    assert np.array_equal(a, b)
    # beam reorder: other takes c's state; diverging continuations stay independent
    other = m.new_session()
    other.copy_from(c)
    x = other.forward([STEPS[1]])
    y = c.forward([STEPS[1]])
    assert np.array_equal(x, y)
    z = s.forward([STEPS[2]])  # s is one token behind other and c: its own cache
    assert s.position == len(PROMPT) + 2 and not np.array_equal(z, x)
    beams = reorder([s, c], [1, 1])
    assert [b.position for b in beams] == [c.position, c.position]
    assert np.array_equal(beams[0].forward([STEPS[2]]), c.forward([STEPS[2]]))
    # a clone after the session that ran last is gone (wgpu+rs once read the caches through that
    # session's freed device state here: a segfault)
    beams[0].forward([STEPS[0]])
    del beams
    gc.collect()
    assert s.clone().position == s.position
    if backend == "wgpu+rs":
        assert_ran_on(m, "wgpu+rs", "whisper clones")
        assert any(r["label"] == "whisper.session_copy" for r in m.dispatch_records)
    s.reset()
    assert s.position == 0 and not s.started


def _two_windows(tinies, backend, seed):
    """(model, encoder output of the tiny mel, encoder output of random mel)."""
    t = tinies("tiny80")
    m = load(t.path, backend)
    rng = np.random.default_rng(seed)
    return m, m.encode(t.mel), m.encode(rng.standard_normal(t.mel.shape).astype(np.float32))


def _check_batched_steps(m, sessions, tokens, steps: int) -> None:
    """forward_batch over sessions() equals each session's own one-token forward, `steps` times
    (later steps: the caches hold the batched rows), and advances each by one."""
    batched, single = sessions(), sessions()
    for _ in range(steps):
        got = m.forward_batch(batched, tokens)
        want = np.stack([s.forward([tok])[-1] for s, tok in zip(single, tokens)])
        assert got.shape == want.shape
        assert rel_err(got, want) <= TOL
        assert [s.position for s in batched] == [s.position for s in single]


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_step_equals_one_forward_per_session(tinies, backend):
    """WhisperModel.forward_batch (beam search's step: the native forward_batch over sessions of
    two windows at different positions) gives each session the logits of its own one-token forward
    and advances it by one. Catches: rows of one session attending over another's self cache, the
    cross K/V of the wrong window, positions not advanced."""
    m, enc_a, enc_b = _two_windows(tinies, backend, 9)

    def sessions():
        out = []
        for enc, prompt in ((enc_a, PROMPT), (enc_a, PROMPT[:2]), (enc_b, PROMPT), (enc_b, PROMPT + STEPS[:1])):
            s = m.new_session()
            s.start(enc)
            s.forward(prompt)
            out.append(s)
        return out
    _check_batched_steps(m, sessions, [STEPS[1], STEPS[2], STEPS[0], STEPS[2]], 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_step_of_beams_sharing_a_window(tinies, backend):
    """forward_batch over clones of one started session (a beam search's beams: one window's cross
    K/V, read once for all their rows; csrc/families/whisper.cc forward_rows) at different positions,
    with a session of another window in between. Catches the beams' query heads grouped in the
    wrong order over the shared K/V."""
    m, enc_a, enc_b = _two_windows(tinies, backend, 11)

    def sessions():
        a = m.new_session()
        a.start(enc_a)
        a.forward(PROMPT)
        b = m.new_session()
        b.start(enc_b)
        b.forward(PROMPT[:2])
        a2, a3 = a.clone(), a.clone()
        a3.forward(STEPS[:2])
        return [a, a2, a3, b, a.clone()]
    _check_batched_steps(m, sessions, [STEPS[1], STEPS[2], STEPS[0], STEPS[2], STEPS[0]], 1)


def test_q8_0_import_matches_its_decoded_weights(tinies, tmp_path):
    """q8_0 (the matmul weights; conv, positions and norms stay float) vs transformers with the
    same dequantized weights, within precise-vs-transformers."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from cyb_llm.convert import import_model
    from cyb_llm.format import ModelFile

    t = tinies("tiny80")
    path = str(tmp_path / "q8.model")
    import_model(t.folder, path, quantize="q8_0", progress=False)
    mf = ModelFile(path)
    hf = tf.WhisperForConditionalGeneration.from_pretrained(t.folder).eval()
    sd = hf.state_dict()
    quantized = [n for n, i in mf.tensors.items() if i.encoding == "q8_0"]
    assert any("encoder_attn.k_proj" in n for n in quantized) and any("fc1" in n for n in quantized)
    assert not any("embed_positions" in n or "conv" in n for n in quantized)
    with torch.no_grad():
        for n in quantized:
            raw = mf.tensor_bytes(n)
            shape = tuple(mf.tensors[n].shape)
            deq = dequantize(np.asarray(raw).reshape(shape[0], -1), GGMLQuantizationType.Q8_0).reshape(shape)
            sd[n].copy_(torch.from_numpy(np.ascontiguousarray(deq, np.float32)))
    if "proj_out.weight" in sd:
        sd["proj_out.weight"].copy_(sd["model.decoder.embed_tokens.weight"])
    ref_enc, ref_logits = t.reference(hf)
    m = WhisperModel(path, backend="cpu", precise=True)
    enc = m.encode(t.mel)
    assert rel_err(enc, ref_enc) <= TOL
    assert rel_err(decode(m, enc)[0], ref_logits) <= TOL
    # and the quantization did change the model (the comparison is not with the f32 weights only)
    assert rel_err(ref_logits, t.ref_logits) > TOL


def test_bad_inputs_are_structured_errors(tinies):
    t = tinies("tiny80")
    m = WhisperModel(t.path, backend="cpu", precise=True)
    with pytest.raises(errors.ShapeMismatch):
        m.encode(np.zeros((80, 2999), np.float32))  # not a 30 s window
    with pytest.raises(errors.ShapeMismatch):
        m.encode(np.zeros((128, 3000), np.float32))  # n_mels of another model
    with pytest.raises(errors.ShapeMismatch):
        m.encode(np.zeros(3000, np.float32))
    with pytest.raises(TypeError):
        m.encode(np.array([["a"]]))
    with pytest.raises(errors.FormatError):
        m.encode(np.full((80, 3000), np.nan, np.float32))
    s = m.new_session()
    with pytest.raises(errors.InvalidConfig, match="start"):
        s.forward([1])  # no encoder output yet
    with pytest.raises(errors.ShapeMismatch):
        s.start(np.zeros((1499, 64), np.float32))
    enc = m.encode(t.mel)
    s.start(enc)
    with pytest.raises(errors.InvalidConfig):
        s.forward([m.vocab_size])
    with pytest.raises(errors.InvalidConfig):
        s.forward([-1])
    assert s.position == 0
    with pytest.raises(errors.ShapeMismatch):
        s.forward(list(range(3)) * 20)  # past max_target_positions (48)
    assert s.forward([1]).shape == (1, m.vocab_size)  # still usable
