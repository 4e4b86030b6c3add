"""The native encoders (csrc/families/encoder.cc, docs/encoders.md "Native encoder") against
transformers on tiny random checkpoints: bert, roberta, xlm-roberta and distilbert, each with a
sequence- and a token-classification head, and a bert cross-encoder pair model with token types.
Every checkpoint is built here (tests/encoder_fixtures.py), imported to a .model, and run through
`_core.Model.encode / embed / classify / classify_tokens` at every cpu level
(`_core.cpu_levels()`) in both precision modes and on wgpu+rs (lavapipe in CI; every op must run
there: tests/placement.py). Inputs carry real padding (different lengths in one batch).

The tests bite: a transformers run without the padding mask, with causal attention, or with the
token types zeroed is farther from the reference than `encoder-ablation`, so a match within
`encoder-vs-transformers` (docs/runtime.md, "Tolerances") proves that the runtime does each.
"""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core, errors
from cyb_llm.format import ModelFile
from placement import assert_ran_on, wgpu_skip_reason
from tolerances import tolerance

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

TOL = tolerance("encoder-vs-transformers")
FAST_TOL = tolerance("encoder-fast-vs-transformers")  # fast mode (amx: bf16 split products)
ABLATION = tolerance("encoder-ablation")
LEVELS = _core.cpu_levels()
WGPU_SKIP = wgpu_skip_reason()  # None, or why the wgpu+rs row is skipped
BACKENDS = [f"cpu:{lvl}" for lvl in LEVELS] + ["wgpu+rs"]
FAMILIES = ["bert", "roberta", "xlm-roberta", "distilbert"]
if hasattr(tf, "ModernBertConfig"):  # RoPE, GeGLU, alternating local (windowed) / global attention
    FAMILIES.append("modernbert")
HEADS = ["seq", "token"]
AUTO = {None: "AutoModel", "seq": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification"}


def rel_err(a, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(a, np.float64) - ref)) / np.max(np.abs(ref)))


class Tiny:
    """One checkpoint: the HF folder, its .model, the transformers model, a padded batch."""

    def __init__(self, root, family, head, seed=0, lengths=(9, 4, 1, 6)):
        from cyb_llm.convert import import_model
        from encoder_fixtures import make_encoder_folder

        self.family, self.head = family, head
        self.folder = make_encoder_folder(root, family, head, num_labels=3, seed=seed)
        self.path = self.folder + ".model"
        import_model(self.folder, self.path, progress=False)
        self.hf = getattr(tf, AUTO[head]).from_pretrained(self.folder).eval()
        cfg = self.hf.config
        rng = np.random.default_rng(seed + 7)
        # real padding: different lengths in one batch
        B, T = len(lengths), max(lengths)
        pad = cfg.pad_token_id
        self.ids = rng.integers(5, cfg.vocab_size, (B, T)).astype(np.int32)
        self.mask = np.zeros((B, T), np.int32)
        for b, n in enumerate(lengths):
            self.mask[b, :n] = 1
        self.ids[self.mask == 0] = pad
        self.types = None
        if family == "bert":  # a pair: segment B from the middle of each real span
            self.types = np.zeros((B, T), np.int32)
            for b, n in enumerate(lengths):
                self.types[b, n // 2:n] = 1

    def reference(self, mask=None, types="same", model=None):
        """transformers' (last_hidden_state, logits or None) for this batch."""
        kw = {"input_ids": torch.tensor(self.ids, dtype=torch.long),
              "attention_mask": torch.tensor(self.mask if mask is None else mask, dtype=torch.long)}
        t = self.types if isinstance(types, str) else types
        if t is not None:
            kw["token_type_ids"] = torch.tensor(t, dtype=torch.long)
        with torch.no_grad():
            out = (model or self.hf)(**kw, output_hidden_states=True)
        logits = out.logits.numpy() if hasattr(out, "logits") else None
        return out.hidden_states[-1].numpy(), logits

    def ours(self, m, what="encode"):
        return getattr(m, what)(self.ids, self.mask, self.types)


@pytest.fixture(scope="module")
def tinies(tmp_path_factory):
    cache = {}

    def get(family, head):
        if (family, head) not in cache:
            cache[(family, head)] = Tiny(tmp_path_factory.mktemp(f"{family}-{head}"), family, head)
        return cache[(family, head)]
    return get


def ran_on(m, backend, what):
    """tests/placement.py's check on a native _core.Model (dispatch_records is a method there)."""
    class Recs:
        dispatch_records = m.dispatch_records()
    assert_ran_on(Recs, backend, what)


def load(t, backend, precise=True):
    kind, _, lvl = backend.partition(":")
    if kind == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    if lvl:
        _core.set_cpu_level(lvl)
    return _core.load(ModelFile(t.path)._native, backend=kind, precise=precise)


@pytest.fixture(autouse=True)
def _restore_level():
    before = _core.cpu_level()
    yield
    _core.set_cpu_level(before)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("family", FAMILIES)
def test_encoder_matches_transformers(tinies, family, head, backend):
    t = tinies(family, head)
    hidden, logits = t.reference()
    for precise in ([True, False] if backend.startswith("cpu") else [True]):
        m = load(t, backend, precise)
        assert m.is_encoder and m.family == family and m.hidden_size == 32 and m.num_labels == 3
        tol = TOL if precise else FAST_TOL
        assert rel_err(t.ours(m, "encode"), hidden) <= tol, (precise, "encode")
        what = "classify" if head == "seq" else "classify_tokens"
        got = t.ours(m, what)
        assert got.shape == logits.shape
        assert rel_err(got, logits) <= tol, (precise, what)
        if backend == "wgpu+rs":
            ran_on(m, "wgpu+rs", f"{family}-{head}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_embed_pools_the_real_tokens(tinies, pooling, backend):
    t = tinies("bert", "seq")
    hidden, _ = t.reference()
    ref = np.zeros((hidden.shape[0], hidden.shape[2]))
    for b in range(hidden.shape[0]):
        rows = hidden[b][t.mask[b] != 0].astype(np.float64)
        ref[b] = {"cls": hidden[b, 0], "mean": rows.mean(0), "max": rows.max(0)}[pooling]
    m = load(t, backend)
    got = m.embed(t.ids, t.mask, t.types, pooling, False)
    assert rel_err(got, ref) <= TOL
    unit = m.embed(t.ids, t.mask, t.types, pooling, True)
    assert rel_err(unit, ref / np.linalg.norm(ref, axis=1, keepdims=True)) <= TOL
    if backend == "wgpu+rs":
        ran_on(m, "wgpu+rs", f"embed {pooling}")


def test_repeated_calls_match_a_fresh_model(tinies):
    """A device backend keeps its context (frame buffers, bind groups, read-back buffers) from one
    encode call to the next of the same shape: a sequence of calls of changing shapes, requests and
    inputs gives, call by call, what a freshly loaded model gives for that call alone."""
    t = tinies("bert", "seq")
    rng = np.random.default_rng(5)
    ids2 = rng.integers(5, 90, size=(3, 9)).astype(np.int32)
    mask2 = np.ones_like(ids2)
    mask2[1, 6:] = 0
    rev = t.ids[:, ::-1].copy()
    calls = [("embed", t.ids, t.mask), ("embed", rev, t.mask), ("embed", t.ids, t.mask), ("encode", ids2, mask2),
             ("encode", ids2[::-1].copy(), mask2), ("embed", ids2, mask2), ("embed", ids2, np.ones_like(ids2)),
             ("embed", t.ids, t.mask)]

    def call(m, what, ids, mask):
        return m.embed(ids, mask, None, "mean", True) if what == "embed" else m.encode(ids, mask, None)

    kept = load(t, "wgpu+rs")
    for what, ids, mask in calls:
        got = call(kept, what, ids, mask)
        want = call(load(t, "wgpu+rs"), what, ids, mask)
        assert np.array_equal(got, want), what


def test_ablations_are_far_from_the_reference(tinies):
    """Dropping the padding mask, attending causally or zeroing the token types moves the
    transformers output by more than `encoder-ablation` >> `encoder-vs-transformers`: our match
    (test_encoder_matches_transformers) therefore proves the runtime does each."""
    assert ABLATION > 10 * TOL
    t = tinies("bert", "seq")
    hidden, logits = t.reference()
    m = load(t, "cpu")
    ours_h = t.ours(m, "encode")  # judged on the hidden states (a tiny random head squashes differences)
    # no padding mask: every key visible (judged on the real tokens, where the mask matters)
    h_nomask, _ = t.reference(mask=np.ones_like(t.mask))
    real = t.mask != 0
    assert rel_err(ours_h[real], h_nomask[real]) > ABLATION
    # causal attention: the same weights as a decoder (transformers' is_decoder)
    causal = tf.AutoModelForSequenceClassification.from_pretrained(t.folder, is_decoder=True).eval()
    h_causal, _ = t.reference(model=causal)
    assert rel_err(ours_h[real], h_causal[real]) > ABLATION
    # token types zeroed
    h_zero, _ = t.reference(types=np.zeros_like(t.types))
    assert rel_err(ours_h, h_zero) > ABLATION
    # and ours without token types is that reference
    assert rel_err(m.encode(t.ids, t.mask, None), h_zero) <= TOL


@pytest.mark.skipif("modernbert" not in FAMILIES, reason="transformers without ModernBERT")
def test_modernbert_local_window_matters(tmp_path):
    """The local layers see only |t - s| <= local_attention / 2: on long rows, the same weights
    with every layer global are farther than `encoder-ablation-window` from the reference we match
    (one local layer of three on tiny random weights: a smaller effect than the mask's)."""
    t = Tiny(tmp_path, "modernbert", "token", lengths=(48, 30))
    m = load(t, "cpu")
    ours = t.ours(m, "encode")
    assert rel_err(ours, t.reference()[0]) <= TOL
    cfg = t.hf.config
    assert "sliding_attention" in cfg.layer_types and t.ids.shape[1] > cfg.local_attention // 2 + 1
    wide = getattr(tf, AUTO["token"]).from_pretrained(t.folder, layer_types=["full_attention"] * len(cfg.layer_types)).eval()
    h_wide, _ = t.reference(model=wide)
    real = t.mask != 0
    assert rel_err(ours[real], h_wide[real]) > tolerance("encoder-ablation-window") >= 10 * TOL


@pytest.mark.parametrize("level", LEVELS)
def test_quantized_fast_vs_precise(tmp_path_factory, level):
    """Q8_0 weights: fast mode runs the matmuls on 16-bit activations (docs/runtime.md,
    "Precision modes"), within `fast-vs-precise/encoder-q8` of precise; precise is the same at every level."""
    from cyb_llm.convert import import_model

    t = Tiny(tmp_path_factory.mktemp("q8"), "bert", "seq")
    q8 = t.folder + "-q8_0.model"
    import_model(t.folder, q8, quantize="q8_0", progress=False)
    assert any(i.encoding == "q8_0" for i in ModelFile(q8).tensors.values())
    _core.set_cpu_level("scalar")
    ref = _core.load(ModelFile(q8)._native, backend="cpu", precise=True)
    want = ref.encode(t.ids, t.mask, t.types)
    _core.set_cpu_level(level)
    for precise, key in ((True, "cross-path"), (False, "fast-vs-precise/encoder-q8")):
        m = _core.load(ModelFile(q8)._native, backend="cpu", precise=precise)
        assert rel_err(m.encode(t.ids, t.mask, t.types), want) <= tolerance(key), (level, precise)


def test_roberta_positions_skip_the_padding(tinies):
    """roberta positions start at padding_idx + 1 and skip pad ids: a left-padded row equals the
    unpadded row (transformers' create_position_ids_from_input_ids), a bert row does not."""
    t = tinies("roberta", "seq")
    m = load(t, "cpu")
    pad = t.hf.config.pad_token_id
    row = t.ids[1][t.mask[1] != 0]
    n = len(row)
    left = np.full((1, n + 3), pad, np.int32)
    left[0, 3:] = row
    lmask = np.zeros_like(left)
    lmask[0, 3:] = 1
    a = m.encode(row[None], np.ones((1, n), np.int32))[0]
    b = m.encode(left, lmask)[0, 3:]
    assert rel_err(b, a) <= TOL
    hidden, _ = Tiny.reference(type("X", (), {"ids": left, "mask": lmask, "types": None, "hf": t.hf})())
    assert rel_err(b, hidden[0, 3:]) <= TOL


def test_concurrent_calls_match(tinies):
    """encode releases the GIL and keeps its activations per call: calls from several threads on
    one model give the single-threaded results."""
    import threading

    t = tinies("bert", "seq")
    m = load(t, "cpu")
    want_h, want_l = t.ours(m, "encode"), t.ours(m, "classify")
    got, errs = [], []

    def work():
        try:
            for _ in range(3):
                got.append((t.ours(m, "encode"), t.ours(m, "classify")))
        except Exception as e:  # reported below
            errs.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errs and len(got) == 9
    for h, lg in got:
        np.testing.assert_array_equal(h, want_h)
        np.testing.assert_array_equal(lg, want_l)


def test_memory_budget_is_checked(tinies):
    t = tinies("bert", "seq")
    m = _core.load(ModelFile(t.path)._native, backend="cpu", max_memory=ModelFile(t.path).file_size + 4096)
    with pytest.raises(errors.OutOfMemory, match="encode"):
        m.encode(np.zeros((64, 64), np.int32), np.ones((64, 64), np.int32))


@pytest.mark.parametrize("change, field", [
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"hidden_act": "mish"}, "hidden_act"),
    ({"num_attention_heads": 5}, "num_attention_heads"),
    ({"layer_norm_eps": -1.0}, "layer_norm_eps"),
    ({"max_position_embeddings": 0}, "max_position_embeddings"),
])
def test_bad_config_is_invalid_config(tinies, tmp_path, change, field):
    from cyb_llm.format import _source_tensors, write_model

    t = tinies("bert", "seq")
    mf = ModelFile(t.path)
    cfg = dict(mf.config)
    cfg["architecture"] = dict(cfg["architecture"], **change)
    bad = str(tmp_path / "bad.model")
    write_model(bad, name=mf.name, config=cfg, tensors=_source_tensors(mf))
    with pytest.raises(errors.InvalidConfig) as ei:
        _core.load(ModelFile(bad)._native, backend="cpu")
    assert ei.value.fields["field"] == "architecture." + field


def test_api_errors(tinies, tmp_path):
    t = tinies("bert", "seq")
    m = load(t, "cpu")
    with pytest.raises(errors.ShapeMismatch):  # ids not [B, T]
        m.encode(t.ids[0], t.mask[0])
    with pytest.raises(errors.ShapeMismatch):  # mask of another shape
        m.encode(t.ids, t.mask[:, :3])
    with pytest.raises(errors.ShapeMismatch):  # longer than max_position_embeddings
        m.encode(np.zeros((1, 65), np.int32), np.ones((1, 65), np.int32))
    with pytest.raises(errors.InvalidConfig, match="input_ids"):
        m.encode(np.full((1, 2), t.hf.config.vocab_size, np.int32), np.ones((1, 2), np.int32))
    with pytest.raises(errors.InvalidConfig, match="token_type_ids"):
        m.encode(t.ids, t.mask, np.full_like(t.ids, 2))
    with pytest.raises(TypeError):
        m.encode(t.ids.astype(np.float32), t.mask)
    with pytest.raises(errors.InvalidConfig, match="pooling"):
        m.embed(t.ids, t.mask, None, "sum", False)
    with pytest.raises(errors.InvalidConfig, match="sequence classification head"):
        m.classify_tokens(t.ids, t.mask, t.types)
    with pytest.raises(errors.InvalidConfig, match="bert"):
        m.new_conversation(8)
    with pytest.raises(errors.BackendInit, match="nox"):
        _core.load(ModelFile(t.path)._native, backend="nox")
    # a decoder refuses the encoder API
    from graph_util import write_tiny

    dec = _core.load(ModelFile(write_tiny(tmp_path / "dec.model", model_type="llama"))._native, backend="cpu")
    assert not dec.is_encoder and dec.num_labels == 0
    with pytest.raises(errors.InvalidConfig, match="is a decoder") as ei:
        dec.embed(t.ids, t.mask, None, "mean", True)
    assert ei.value.fields["field"] == "architecture.model_type"
