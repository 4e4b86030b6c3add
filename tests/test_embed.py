"""Encoders on real weights against their references (docs/encoders.md):

- all-MiniLM-L6-v2 (`hub.fetch("minilm")`) embeddings vs sentence-transformers (torch CPU) on 160
  varied sentences (2..483 tokens, so truncation at 256 is exercised; many scripts, emoji),
  batch sizes 1/7/64, precise and fast; token states (`encode`) vs its token embeddings; the
  nearest-neighbour order of a small retrieval set; `create_embedding`; `cyb-llm embed`.
- tiny random checkpoints of every family with their heads vs transformers (classification as the
  text-classification pipeline scores it, token classification, CrossEncoder.predict for rerank).

Bounds: docs/runtime.md "Tolerances" (`embed-precise/minilm`, `embed-fast/minilm`,
`embed-fast-cosine/minilm`, `precise-vs-transformers`, `fast-vs-precise`) through tests/tolerances.py.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub
from tolerances import tolerance

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")

BASE = [
    "A man is eating food.", "A man is riding a horse.", "The new movie is awesome!", "The cat sits outside",
    "I love pasta with tomato sauce.", "Quantum computers use qubits instead of bits.", "It rained all day in Paris.",
    "Der schnelle braune Fuchs springt über den faulen Hund.", "Je pense, donc je suis.",
    "El perro corre en el parque con su dueño.", "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "我喜欢在周末去公园散步。", "東京は日本の首都です。", "오늘 날씨가 정말 좋네요.", "القطة تجلس على الحصيرة",
    "मुझे हिंदी में पढ़ना पसंद है।", "Η γρήγορη καφέ αλεπού.", "שלום עולם, מה שלומך?", "ฉันชอบกินข้าวผัด",
    "Emoji test 😀🎉🚀 with mixed content 👍🏽", "🙂", "naïve café résumé coöperate", "x", "?",
    "def f(x): return x ** 2  # a Python function", "https://example.com/path?query=1&b=2",
    "3.14159 is approximately pi; e ≈ 2.71828", "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Tabs\tand\nnewlines   and   spaces", "Supercalifragilisticexpialidocious", "Ünïcödé ñ ß ø å æ œ",
    "A cheetah is running behind its prey.", "Two men pushed carts through the woods.",
    "The stock market fell sharply after the announcement.", "Photosynthesis converts light into chemical energy.",
    "She sells sea shells by the sea shore.", "Machine learning models need data.", "₿ Bitcoin ₿ and € euros £",
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "",
]


def corpus(n: int = 160, seed: int = 0) -> list[str]:
    """BASE, then joins of 2..40 random BASE sentences (up to ~500 tokens, past the 256 limit)."""
    rng = np.random.default_rng(seed)
    out = list(BASE)
    while len(out) < n:
        k = int(rng.choice([2, 2, 3, 3, 4, 5, 6, 8, 10, 14, 20, 28, 40]))
        out.append(" ".join(BASE[int(i)] for i in rng.integers(0, len(BASE), size=k)))
    return out


@pytest.fixture(scope="module")
def minilm():
    return hub.fetch("minilm", progress=False)


@pytest.fixture(scope="module")
def st_model():
    torch.set_num_threads(2)
    return st.SentenceTransformer(hub.fetch_source("minilm", progress=False), device="cpu")


@pytest.fixture(scope="module")
def texts():
    return corpus()


@pytest.fixture(scope="module")
def reference(st_model, texts):
    return st_model.encode(texts, batch_size=32, convert_to_numpy=True).astype(np.float64)


def test_corpus_exercises_truncation(st_model, texts):
    lens = [len(x) for x in st_model.tokenizer(texts)["input_ids"]]
    assert min(lens) == 2 and max(lens) > 400 and sum(n > 256 for n in lens) >= 15
    assert sum(lens[i] > 256 for i in range(1, len(lens), 4)) >= 4  # the subset of the small buckets


def _max_abs(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max())


def _cos(a, b) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_minilm_precise_matches_sentence_transformers(minilm, texts, reference):
    """Every second sentence in buckets of 64, every fourth in buckets of 7 and of 1 (the fast test
    below runs all of them: the time of the default tier)."""
    m = cyb_llm.load(minilm, precise=True)
    assert m.is_encoder and not hasattr(m, "chat")  # a TextModel attribute (cyb_llm.pipelines)
    half = list(range(0, len(texts), 2))
    ours = m.embed([texts[i] for i in half], batch_size=64)
    assert ours.shape == reference[half].shape and ours.dtype == np.float32
    err = _max_abs(ours, reference[half])
    assert err <= tolerance("embed-precise/minilm"), f"max abs {err:.2e}"
    sub = list(range(1, len(texts), 4))
    for bs in (1, 7):
        err = _max_abs(m.embed([texts[i] for i in sub], batch_size=bs), reference[sub])
        assert err <= tolerance("embed-precise/minilm"), f"batch size {bs}: max abs {err:.2e}"


def test_minilm_fast_matches_sentence_transformers(minilm, texts, reference):
    m = cyb_llm.load(minilm)
    ours = m.embed(texts)
    err = _max_abs(ours, reference)
    worst = float(1.0 - _cos(ours, reference).min())
    assert err <= tolerance("embed-fast/minilm"), f"max abs {err:.2e}"
    assert worst <= tolerance("embed-fast-cosine/minilm"), f"1 - cosine {worst:.2e}"


def test_minilm_token_states_and_poolings(minilm, st_model, texts):
    """encode() = the transformer's last_hidden_state; cls/max/unnormalized pooling from it."""
    m = cyb_llm.load(minilm, precise=True)
    sample = texts[:12] + texts[-4:]
    ref = st_model.encode(sample, output_value="token_embeddings", convert_to_numpy=False)
    ids = m.tokenize_batch(sample).ids  # truncated to 256 with [SEP] kept, as s-t
    states = m.encode(ids, batch_size=5)
    bound = tolerance("precise-vs-transformers")  # relative: max |a - b| / max |reference|
    for h, r in zip(states, ref):
        r = r.double().numpy()
        assert h.shape == r.shape
        assert _max_abs(h, r) / np.abs(r).max() <= bound
    for mode, pool in (("cls", lambda r: r[0]), ("max", lambda r: r.max(0)), ("mean", lambda r: r.mean(0))):
        ours = m.embed(sample, pooling=mode, normalize=False)
        want = np.stack([pool(r.double().numpy()) for r in ref])
        assert _max_abs(ours, want) / np.abs(want).max() <= bound, mode


def test_minilm_nearest_neighbours(minilm, st_model):
    docs = ["The cat sleeps on the sofa.", "Stock prices dropped today.", "A recipe for tomato soup.",
            "Football match ends in a draw.", "New smartphone released with better camera.",
            "The kitten is napping on the couch.", "Markets fell on inflation fears.", "How to cook pasta al dente.",
            "The team scored in the final minute.", "This phone has a great battery.", "Die Katze schläft.",
            "猫がソファで寝ている。"]
    queries = ["Where is the cat sleeping?", "economy and stock market", "cooking dinner", "sports results",
               "mobile phone review", "Katze"]
    m = cyb_llm.load(minilm)
    q, d = m.embed(queries), m.embed(docs)
    rq, rd = st_model.encode(queries), st_model.encode(docs)
    for i in range(len(queries)):
        assert list(np.argsort(-(d @ q[i]))[:4]) == list(np.argsort(-(rd @ rq[i]))[:4]), queries[i]


def test_create_embedding_and_cli(minilm, capsys):
    m = cyb_llm.load(minilm)
    r = m.create_embedding(["hello world", "a"])
    np.testing.assert_array_equal(np.array([d["embedding"] for d in r["data"]], np.float32), m.embed(["hello world", "a"]))
    assert r["usage"]["prompt_tokens"] == 4 + 3
    from cyb_llm import cli

    assert cli.main(["embed", minilm, "hello world", "a", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dim"] == 384 and len(out["embeddings"]) == 2
    np.testing.assert_array_equal(np.array(out["embeddings"], np.float32), m.embed(["hello world", "a"]))
    assert cli.main(["embed", minilm, "hello"]) == 0
    assert capsys.readouterr().out.startswith("384 dims [")


# --- tiny random checkpoints with heads ---------------------------------------------------------

FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "modernbert")
TEXTS = ["the cat ran to the house", "hello world!", "", "a dog saw the big old tree and ran very much " * 8]


def _tiny(tmp_path, family, head, **kw):
    from encoder_fixtures import make_encoder_folder
    from cyb_llm.convert import import_model

    folder = make_encoder_folder(tmp_path, family, head, **kw)
    out = str(tmp_path / f"{family}-{head}.model")
    import_model(folder, out, progress=False)
    return folder, out


def _hf_inputs(folder, texts, pairs=None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    kw = dict(padding=True, truncation=True, return_tensors="pt")  # to model_max_length, as Model's truncation
    return tok(texts, pairs, **kw) if pairs else tok(texts, **kw)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_encoder_states_vs_transformers(tmp_path, family):
    from transformers import AutoModel

    folder, path = _tiny(tmp_path, family, None)
    ref_model = AutoModel.from_pretrained(folder).eval()
    m = cyb_llm.load(path, precise=True)
    enc = _hf_inputs(folder, TEXTS)
    with torch.no_grad():
        ref = ref_model(**enc).last_hidden_state.double().numpy()
    mask = enc["attention_mask"].numpy()
    ids = m.tokenize_batch(TEXTS).ids
    assert max(len(x) for x in ids) == 64  # the long text was cut
    states = m.encode(ids)
    for i, h in enumerate(states):
        r = ref[i][mask[i] == 1]
        assert _max_abs(h, r) / np.abs(r).max() <= tolerance("precise-vs-transformers"), (family, i)
    mean = (ref * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(m.embed(TEXTS, pooling="mean", normalize=False), mean,
                               atol=tolerance("precise-vs-transformers") * np.abs(mean).max())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("problem_type", [None, "multi_label_classification"])
def test_tiny_classify_as_pipeline(tmp_path, family, problem_type):
    from transformers import AutoModelForSequenceClassification, pipeline

    folder, path = _tiny(tmp_path, family, "seq", num_labels=3, problem_type=problem_type)
    pipe = pipeline("text-classification", model=folder, tokenizer=folder, device="cpu", top_k=None)
    m = cyb_llm.load(path, precise=True)
    ours = m.classify(TEXTS, top_k=None)
    ref = pipe(TEXTS, truncation=True)
    bound = tolerance("precise-vs-transformers")
    for o, r in zip(ours, ref):
        assert [x["label"] for x in o] == [x["label"] for x in r]
        np.testing.assert_allclose([x["score"] for x in o], [x["score"] for x in r], atol=bound)
    top = m.classify(TEXTS[0])
    assert top == [ours[0][0]] or top[0]["label"] == ours[0][0]["label"]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    pairs = [("the cat", "a dog runs"), ("hello", "the big tree")]
    enc = _hf_inputs(folder, [p[0] for p in pairs], [p[1] for p in pairs])
    with torch.no_grad():
        logits = model(**enc).logits.double().numpy()
    scores = m.scores(logits)
    for o, s in zip(m.classify(pairs, top_k=None), scores):
        np.testing.assert_allclose(sorted((x["score"] for x in o), reverse=True), sorted(s, reverse=True), atol=bound)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "modernbert"])
def test_tiny_classify_tokens(tmp_path, family):
    from transformers import AutoModelForTokenClassification

    folder, path = _tiny(tmp_path, family, "token", num_labels=4)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    m = cyb_llm.load(path, precise=True)
    enc = _hf_inputs(folder, TEXTS[:2])
    with torch.no_grad():
        logits = model(**enc).logits.double().numpy()
    res = m.classify_tokens(TEXTS[:2])
    for i, ents in enumerate(res):
        p = m.scores(logits[i])
        for e in ents:
            assert e["label"] == model.config.id2label[int(np.argmax(p[e["index"]]))]
            assert abs(e["score"] - p[e["index"]].max()) <= tolerance("precise-vs-transformers")


@pytest.mark.parametrize("family", ["bert", "xlm-roberta", "modernbert"])
def test_tiny_rerank_as_cross_encoder(tmp_path, family):
    folder, path = _tiny(tmp_path, family, "seq", num_labels=1)
    ce = st.CrossEncoder(folder, device="cpu")
    docs = ["the cat sat", "a dog ran to the house", "", "hello world " * 30]
    ref = ce.predict([("the cat", d) for d in docs])
    m = cyb_llm.load(path, precise=True)
    ours = m.rerank("the cat", docs)
    assert ours.shape == (4,)
    np.testing.assert_allclose(ours, ref, atol=tolerance("precise-vs-transformers"))


def test_minilm_is_no_decoder(minilm):
    m = cyb_llm.load(minilm)
    assert m.is_encoder and not hasattr(m, "chat") and m.family == "bert"
    for name in ("new_conversation", "generator", "create_chat_completion"):  # TextModel's (cyb_llm.pipelines)
        with pytest.raises(AttributeError, match=f"'{name}': that is a TextModel method .* model_type 'bert'"):
            getattr(m, name)
    with pytest.raises(cyb_llm.InvalidConfig, match="bert"):  # the native model refuses a conversation too
        m._native.new_conversation(8)
