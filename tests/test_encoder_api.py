"""The Python side of the encoder API (cyb_llm/encode/model.py) over a stand-in native model: tokenizing,
truncation as sentence-transformers, bucketing and input order, argument errors, scores."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import hub
from cyb_llm.encode.model import Encoder, max_length
from cyb_llm.errors import InvalidConfig, TokenizerError
from cyb_llm.format import ModelFile

from tolerances import tolerance


class FakeNative:
    """Records each call; embed row = [sum of ids, tokens, padded T, B, first id, token types sum]."""

    hidden_size = 6

    def __init__(self, num_labels=0, logits=None):
        self.calls = []
        self.num_labels = num_labels
        self.logits = logits

    def _check(self, ids, mask, tt):
        assert ids.dtype == np.int32 and mask.dtype == np.int32 and ids.flags.c_contiguous
        assert ids.shape == mask.shape and (tt is None or tt.shape == ids.shape)
        self.calls.append(ids.shape)

    def embed(self, ids, mask, tt, pooling, normalize):
        self._check(ids, mask, tt)
        self.last = (pooling, normalize)
        b, t = ids.shape
        rows = [[(ids[r] * mask[r]).sum(), mask[r].sum(), t, b, ids[r, 0], 0 if tt is None else tt[r].sum()]
                for r in range(b)]
        return np.array(rows, dtype=np.float32)

    def encode(self, ids, mask, tt):
        self._check(ids, mask, tt)
        return np.repeat(ids[:, :, None].astype(np.float32), self.hidden_size, axis=2)

    def classify(self, ids, mask, tt):
        self._check(ids, mask, tt)
        # the logits row of each item: chosen by its last token before the final [SEP]
        return np.stack([self.logits[int(ids[r, mask[r].sum() - 2]) % len(self.logits)]
                         for r in range(ids.shape[0])]).astype(np.float32)


@pytest.fixture(scope="module")
def minilm_file():
    return ModelFile(hub.fetch("minilm", progress=False))


def make(mf, config=None, **native_kw):
    native = FakeNative(**native_kw)
    return Encoder._over(mf, native, config=config or mf.config, name="minilm"), native


def corpus(n=150, seed=0):
    rng = np.random.default_rng(seed)
    words = "the cat sat on a mat while über-fast 東京 dogs 🙂 barked loudly at strangers ₿ naïve café".split()
    return [" ".join(rng.choice(words, size=int(rng.integers(0, 300)))) for _ in range(n)]


@pytest.mark.parametrize("bs", [1, 7, 64])
def test_buckets_keep_input_order(minilm_file, bs):
    enc, native = make(minilm_file)
    texts = corpus()
    out = enc.embed(texts, batch_size=bs)
    ids = [e.ids for e in enc._tokenizer(True).encode_batch(texts)]
    assert out.shape == (len(texts), 6) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, 0], [sum(x) for x in ids])  # each row came back to its text
    np.testing.assert_array_equal(out[:, 1], [len(x) for x in ids])
    assert len(native.calls) == -(-len(texts) // bs)  # one native call per bucket
    # buckets sorted by length: padded lengths never increase, each is its bucket's longest
    ts = [t for _, t in native.calls]
    assert ts == sorted(ts, reverse=True)
    assert max(out[:, 2] - out[:, 1]) < max(len(x) for x in ids)
    for row in out:
        assert row[2] >= row[1]
    assert native.last == ("mean", True)  # the file's [pooling]


def test_truncation_matches_sentence_transformers(minilm_file):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(hub.fetch_source("minilm", progress=False), device="cpu")
    assert model.max_seq_length == 256 == max_length(minilm_file.config)
    enc, _ = make(minilm_file)
    texts = corpus(60, seed=1) + ["", "a", "x " * 255, "x " * 254, "y " * 400]
    ref = model.tokenize(texts)
    ours = enc.tokenize_batch(texts).ids
    for i, t in enumerate(texts):
        n = int(ref["attention_mask"][i].sum())
        assert ours[i] == ref["input_ids"][i][:n].tolist(), i
    assert max(len(x) for x in ours) == 256


def test_max_length_rules():
    base = {"architecture": {"max_position_embeddings": 514, "pad_token_id": 1}}
    assert max_length(dict(base, model_type="roberta")) == 512
    assert max_length(dict(base, model_type="xlm-roberta")) == 512
    assert max_length(dict(base, model_type="bert")) == 514
    assert max_length(dict(base, model_type="bert", tokenizer={"model_max_length": 128})) == 128
    assert max_length(dict(base, model_type="bert", pooling={"max_seq_length": 64})) == 64


def test_truncate_false_names_the_text(minilm_file):
    enc, _ = make(minilm_file)
    with pytest.raises(InvalidConfig, match=r"item 2 is 402 tokens long, more than the model's 256") as e:
        enc.embed(["a", "b", "y " * 400], truncate=False)
    assert e.value.fields["field"] == "texts[2]"
    assert enc.embed(["a", "y " * 100], truncate=False).shape == (2, 6)


def test_empty_inputs(minilm_file):
    enc, native = make(minilm_file)
    v = enc.embed("")  # [CLS] [SEP], as sentence-transformers
    assert v.shape == (6,) and v[1] == 2 and v[0] == 101 + 102
    assert enc.embed([]).shape == (0, 6) and not native.calls[1:]
    with pytest.raises(InvalidConfig, match="empty list"):
        enc.create_embedding([])


def test_bad_arguments(minilm_file):
    enc, _ = make(minilm_file)
    for bad in (3, None, b"x", ["ok", 3], [["a"]]):
        with pytest.raises(TypeError):
            enc.embed(bad)
    with pytest.raises(InvalidConfig, match="mix of single texts"):
        enc.classify(["a", ("b", "c")])
    with pytest.raises(InvalidConfig, match="pooling"):
        enc.embed("a", pooling="mean_sqrt_len")
    with pytest.raises(TypeError):
        enc.embed("a", normalize="yes")
    with pytest.raises(InvalidConfig, match="batch_size"):
        enc.embed(["a"], batch_size=0)
    with pytest.raises(TypeError):
        enc.embed(["a"], batch_size=2.0)
    with pytest.raises(TokenizerError, match="surrogate"):
        enc.embed(["ok", "bad \ud800"])


def test_pooling_override(minilm_file):
    enc, native = make(minilm_file)
    enc.embed(["a"], pooling="cls", normalize=False)
    assert native.last == ("cls", False)


def test_token_types_of_pairs(minilm_file):
    cfg = dict(minilm_file.config, architecture=dict(minilm_file.config["architecture"], id2label={"0": "x"}))
    enc, native = make(minilm_file, cfg, num_labels=1, logits=[[0.0]])
    ref = enc.tokenize_batch([("a cat", "the dog sat")]).types[0]
    assert ref == [0, 0, 0, 0, 1, 1, 1, 1]
    emb = enc.embed(["a cat"])  # single texts: token types all 0
    assert emb[0, 5] == 0


def test_classify_scores_as_pipeline(minilm_file):
    logits = [[2.0, 0.5, -1.0], [-3.0, 0.0, 3.0]]
    cfg = dict(minilm_file.config, architecture=dict(minilm_file.config["architecture"],
                                                      id2label={"0": "neg", "1": "neu", "2": "pos"},
                                                      architectures=["BertForSequenceClassification"]))
    enc, native = make(minilm_file, cfg, num_labels=3, logits=logits)
    a, b = enc.tokenize_batch(["x", "y"]).ids  # the token before [SEP] picks the logits row
    texts = ["x", "y"] if a[-2] % 2 == 0 else ["y", "x"]
    assert a[-2] % 2 != b[-2] % 2
    res = enc.classify(texts, top_k=None)
    sm = np.exp(logits[0]) / np.exp(logits[0]).sum()
    assert [r["label"] for r in res[0]] == ["neg", "neu", "pos"]
    probs_tol = tolerance("sampler-probs")  # an f32 softmax vs numpy f64 (docs/runtime.md)
    assert np.max(np.abs(np.array([r["score"] for r in res[0]]) - sm)) <= probs_tol * np.max(sm)
    assert enc.classify(texts[1]) == [{"label": "pos", "score": pytest.approx(np.exp(3) / (np.exp(3) + 1 + np.exp(-3)))}]
    cfg["architecture"]["problem_type"] = "multi_label_classification"
    enc, _ = make(minilm_file, cfg, num_labels=3, logits=logits)
    res = enc.classify(texts, top_k=2)
    want = 1 / (1 + np.exp(-np.array([2.0, 0.5])))
    assert np.max(np.abs(np.array([r["score"] for r in res[0]]) - want)) <= probs_tol * np.max(want)
    with pytest.raises(InvalidConfig, match="classify_tokens"):
        enc2, _ = make(minilm_file, dict(cfg, architecture=dict(cfg["architecture"],
                                                                 architectures=["BertForTokenClassification"])),
                       num_labels=3, logits=logits)
        enc2.classify("x")
    with pytest.raises(InvalidConfig, match="no classification head"):
        make(minilm_file)[0].classify("x")


def test_rerank_activation(minilm_file):
    cfg = dict(minilm_file.config, architecture=dict(minilm_file.config["architecture"], id2label={"0": "LABEL_0"}))
    enc, native = make(minilm_file, cfg, num_labels=1, logits=[[1.5], [-0.5]])
    a, b = enc.tokenize_batch(["x", "y"]).ids
    assert a[-2] % 2 != b[-2] % 2
    s = enc.rerank("q", ["x", "y", "x"])
    assert s.shape == (3,) and s.dtype == np.float32
    assert s[0] == s[2] and 0 < s.min() and s.max() < 1
    assert set(np.round(s, 6)) == set(np.round(1 / (1 + np.exp(-np.array([1.5, -0.5]))), 6).astype(np.float32))
    enc, _ = make(minilm_file, dict(cfg, rerank={"activation": "identity"}), num_labels=1, logits=[[1.5], [-0.5]])
    assert set(enc.rerank("q", ["x", "y"]).tolist()) == {1.5, -0.5}
    assert enc.rerank("q", ("x", "y")).shape == (2,)  # a tuple of documents is a list, not a pair
    assert enc.rerank("q", "y") == np.float32(-0.5)  # one document: one score
    for q, d in ((["q"], ["x"]), ("q", [("x", "y")]), ("q", 3)):
        with pytest.raises(TypeError):
            enc.rerank(q, d)


def test_create_embedding_shape(minilm_file):
    enc, _ = make(minilm_file)
    r = enc.create_embedding(["hello world", "a"], model="m")
    assert r["object"] == "list" and r["model"] == "m"
    assert [d["index"] for d in r["data"]] == [0, 1] and all(d["object"] == "embedding" for d in r["data"])
    assert len(r["data"][0]["embedding"]) == 6 and isinstance(r["data"][0]["embedding"][0], float)
    assert r["usage"] == {"prompt_tokens": 4 + 3, "total_tokens": 7}
    assert enc.create_embedding("a")["model"] == "minilm"


def test_encode_unpads(minilm_file):
    enc, native = make(minilm_file)
    h = enc.encode([101, 7592, 102])
    assert h.shape == (3, 6) and h[1, 0] == 7592
    hs = enc.encode([[101, 102], [101, 5, 6, 7, 102]], batch_size=2)
    assert [x.shape for x in hs] == [(2, 6), (5, 6)] and hs[1][3, 0] == 7 and hs[0][1, 0] == 102
    assert native.calls[-1] == (2, 5)
    with pytest.raises(InvalidConfig, match="input_ids"):
        enc.encode([101, 30522])
    with pytest.raises(TypeError):
        enc.encode([1.0, 2.0])
    with pytest.raises(InvalidConfig, match="513 tokens"):
        enc.encode([101] * 513)


def test_decoder_refuses_embeddings():
    import cyb_llm

    m = cyb_llm.load(hub.fetch("smollm2", progress=False))
    assert m.is_encoder is False and isinstance(m, cyb_llm.TextModel) and not isinstance(m, Encoder)
    for name in ("embed", "classify", "classify_tokens", "rerank", "create_embedding", "encode"):
        with pytest.raises(AttributeError, match=f"'TextModel' object has no attribute '{name}': that is an "
                                                 r"Encoder method \(encoder models\); this model is a text "
                                                 r"model \(.*, model_type 'llama'\)"):
            getattr(m, name)
        assert not hasattr(m, name)


def test_cli_embed_on_a_decoder(capsys):
    from cyb_llm import cli

    assert cli.main(["embed", hub.fetch("smollm2", progress=False), "hello"]) == 1
    assert "error: InvalidConfig: " in capsys.readouterr().err
