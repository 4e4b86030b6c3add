"""The two-stage SpeechT5 TTS (docs/tts.md "Two-stage models"): a SpeechT5ForTextToSpeech built tiny
from its config here (prenet dropout 0, 80 mel bins, 512-d speaker embeddings), saved with
save_pretrained, imported with `cyb-llm import FOLDER --vocoder voc.onnx` (convert/speecht5.py) and
compared with transformers: the encoder stage, decoder steps with the K/V carried, and the whole
generate_speech spectrogram (same number of frames) for several inputs and speaker embeddings;
speak through the vocoder stage vs generate_speech + onnxruntime; the CLI and the server; bad input.
transformers, torch and onnxruntime are the oracles only."""
from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import cyb_llm  # noqa: E402
from cyb_llm.cli import main  # noqa: E402
from cyb_llm.convert import detect_source, import_model  # noqa: E402
from cyb_llm.errors import FormatError, InvalidConfig  # noqa: E402
from cyb_llm.named_arrays import load_stage  # noqa: E402
from cyb_llm.tts.speecht5 import SPACE  # noqa: E402
from tolerances import tolerance  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tts_graphs  # noqa: E402

TOL = tolerance("speecht5-vs-transformers")
#: the character vocabulary written as the folder's vocab.json (SpeechT5Tokenizer's specials first)
CHARS = [SPACE] + list("abcdefghijklmnopqrstuvwxyz.,?!'")
VOCAB = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{c: 4 + i for i, c in enumerate(CHARS)}}
# token ids (</s> = 2 last, as SpeechT5Tokenizer gives them); the tiny model stops after 1 to 27 steps on these
INPUTS = [[4, 9, 17, 22, 5, 30, 2], [7, 3, 11, 2], [12, 13, 14, 15, 16, 2], [30, 31, 5, 33, 34, 35, 36, 37, 2]]


def _tiny(folder: str) -> Any:
    cfg = transformers.SpeechT5Config(
        vocab_size=40, hidden_size=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, speech_decoder_prenet_units=24,
        speech_decoder_prenet_layers=2, speech_decoder_prenet_dropout=0.0, speech_decoder_postnet_units=24,
        speech_decoder_postnet_layers=3, speech_decoder_postnet_kernel=5, num_mel_bins=80, speaker_embedding_dim=512,
        max_text_positions=64, max_speech_positions=512, encoder_max_relative_position=4)
    torch.manual_seed(0)
    m = transformers.SpeechT5ForTextToSpeech(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights of unit scale (the default init's are near zero), batch-norm statistics set
        for name, p in m.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            elif name.endswith("alpha"):
                p.fill_(0.7)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm1d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
        # a stop head whose sum(sigmoid) crosses 0.5 after a few steps, at a step that depends on the input
        m.speecht5.decoder.prenet.encode_positions.alpha.fill_(4.0)
        m.speech_decoder_postnet.prob_out.weight.mul_(4.0)
        m.speech_decoder_postnet.prob_out.bias.fill_(-3.4)
    m.save_pretrained(folder)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(VOCAB, f, ensure_ascii=False)
    return m


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("speecht5"))
    folder = os.path.join(d, "tiny-speecht5")
    hf = _tiny(folder)
    tts_graphs.tiny_vocoder(d, n_mels=80, hop=4, sample_rate=16000)
    voc = os.path.join(d, "voc.onnx")
    out = os.path.join(d, "tts.model")
    assert main(["import", folder, "--vocoder", voc, "-o", out]) == 0
    return hf, folder, voc, out


@pytest.fixture(scope="module")
def model(built):
    return cyb_llm.load(built[3], threads=2)


def _rel(ref, got) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def _speaker(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(512).astype(np.float32)


def test_import_routes_and_loads(built, model):
    _, folder, _, out = built
    assert detect_source(folder) == "speecht5"
    assert type(model).__name__ == "TtsModel" and model.style == "speecht5" and model.sample_rate == 16000
    assert model.config["stages"] == {"pipeline": "tts", "names": ["encoder", "decoder", "postnet", "vocoder"],
                                      "sources": model.config["stages"]["sources"]}
    assert model.voices == [] and model.speaker_id("alloy") is None  # one voice: any name


def test_encoder_matches(built):
    hf, _, _, out = built
    enc = load_stage(out, "encoder", threads=2)
    for ids in INPUTS + [list(range(3, 40)) + [2]]:  # 38 tokens: relative positions clipped at +-4
        x = np.array([ids], np.int64)
        got = enc.run({"input_ids": x})
        with torch.no_grad():
            ref = hf.speecht5.encoder(input_values=torch.tensor(x)).last_hidden_state
            ref_k = hf.speecht5.decoder.wrapped_decoder.layers[1].encoder_attn.k_proj(ref)
        assert got["encoder_out"].shape == tuple(ref.shape)
        assert _rel(ref.numpy(), got["encoder_out"]) <= TOL
        k = got["cross_k_1"]  # [1, heads, seq, head_dim]
        assert _rel(ref_k.numpy(), k.transpose(0, 2, 1, 3).reshape(ref_k.shape)) <= TOL


def test_decoder_steps_match(built):
    """Three decoder steps, the K/V carried by the caller, vs transformers' prenet + decoder with its cache."""
    hf, _, _, out = built
    enc = load_stage(out, "encoder", threads=2)
    dec = load_stage(out, "decoder", threads=2)
    ids = np.array([INPUTS[0]], np.int64)
    spk = _speaker(3)[None]
    e = enc.run({"input_ids": ids})
    feeds = {"speaker": spk, **{f"{w}_{i}": e[f"{w}_{i}"] for w in ("cross_k", "cross_v") for i in range(2)},
             **{f"past_{w}_{i}": np.zeros((1, 2, 0, 16), np.float32) for w in "kv" for i in range(2)}}
    with torch.no_grad():
        enc_ref = hf.speecht5.encoder(input_values=torch.tensor(ids)).last_hidden_state
        seq = torch.zeros(1, 1, 80)
        cache = None
        for step in range(3):
            h = hf.speecht5.decoder.prenet(seq, torch.tensor(spk))
            o = hf.speecht5.decoder.wrapped_decoder(hidden_states=h[:, -1:], encoder_hidden_states=enc_ref,
                                                    cache=cache, use_cache=True, return_dict=True)
            cache = o.cache
            last = o.last_hidden_state.squeeze(1)
            feat_ref = hf.speech_decoder_postnet.feat_out(last).view(1, 2, 80)
            prob_ref = hf.speech_decoder_postnet.prob_out(last)
            got = dec.run({**feeds, "frame": seq[:, -1:].numpy(), "position": np.array([step], np.int64)})
            assert _rel(feat_ref.numpy(), got["feat"]) <= TOL and _rel(prob_ref.numpy(), got["prob"]) <= TOL
            assert got["present_k_0"].shape == (1, 2, step + 1, 16)
            for w in "kv":
                for i in range(2):
                    feeds[f"past_{w}_{i}"] = got[f"present_{w}_{i}"]
            seq = torch.cat([seq, feat_ref[:, -1:]], dim=1)


# speaker embeddings 1 and 2: tests/slow/test_tts_speecht5_slow.py (the default tier's time budget)
@pytest.mark.parametrize("spk_seed", [0])
def test_generate_speech_matches(built, model, spk_seed):
    hf, *_ = built
    spk = _speaker(spk_seed)
    frames = set()
    for ids in INPUTS:
        for ratios in ({}, {"minlenratio": 1.0, "maxlenratio": 3.0}):
            with torch.no_grad():
                ref = hf.generate_speech(torch.tensor([ids]), torch.tensor(spk[None]), **ratios).numpy()
            got = model.text_to_mel(ids, speaker_embedding=spk, **ratios)
            assert got.shape == ref.shape and got.dtype == np.float32, (ids, ratios)
            assert _rel(ref, got) <= TOL, (ids, ratios)
            frames.add(ref.shape[0])
    assert len(frames) >= 3  # the stop rule, minlenratio and maxlenratio all decide some lengths


def test_speak_is_generate_speech_then_vocoder(built, model):
    """speak(text): the stored character vocabulary, generate_speech, the vocoder stage; vs transformers
    on the same ids and onnxruntime on the vocoder's .onnx."""
    hf, _, voc, _ = built
    text = "hi, bob.  Go!"
    ids = [VOCAB[c] for c in SPACE + "hi," + SPACE + "bob."] + [2]  # the sentence cut after "."
    ids2 = [VOCAB[SPACE], VOCAB["<unk>"], VOCAB["o"], VOCAB["!"], 2]  # "G" is not in the vocabulary
    assert model.sentences(text) == [ids, ids2]
    spk = _speaker(7)
    sess = ort.InferenceSession(voc, providers=["CPUExecutionProvider"])
    want = []
    for i in (ids, ids2):
        with torch.no_grad():
            mel = hf.generate_speech(torch.tensor([i]), torch.tensor(spk[None])).numpy()
        want.append(np.clip(sess.run(None, {"mel": mel.T[None]})[0].reshape(-1), -1, 1))
    chunks = list(model.speak_stream(text, voice="alloy", speaker_embedding=spk))
    assert [c.shape for c in chunks] == [w.shape for w in want]
    for c, w in zip(chunks, want):
        assert _rel(w, c) <= TOL
    audio, sr = model.speak(text)  # zeros as speaker embedding
    assert sr == 16000 and audio.dtype == np.float32 and audio.size > 0


def test_mel_to_audio_is_the_vocoder(built, model):
    voc = built[2]
    mel = np.random.default_rng(0).standard_normal((13, 80)).astype(np.float32)
    ref = ort.InferenceSession(voc, providers=["CPUExecutionProvider"]).run(None, {"mel": mel.T[None]})[0]
    got = model.mel_to_audio(mel)
    assert got.shape == (13 * 4,) and _rel(ref.reshape(-1), got) <= TOL


def test_cli_speak(built, tmp_path, model):
    sf = pytest.importorskip("soundfile")
    out = str(tmp_path / "hi.wav")
    assert main(["speak", built[3], "Hi bob.", "-o", out]) == 0
    got, sr = sf.read(out, dtype="float32")
    want = model.speak("Hi bob.")[0]
    assert sr == 16000 and got.shape == want.shape


def test_server_speech(model):
    pytest.importorskip("fastapi")
    openai = pytest.importorskip("openai")
    from test_serve import serving

    with serving({"st5": model}) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        r = client.audio.speech.create(model="st5", input="Hi bob.", voice="alloy", response_format="pcm")
        assert np.array_equal(np.frombuffer(r.content, "<i2").shape, model.speak("Hi bob.")[0].shape)
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.speech.create(model="st5", input="Hi bob.", voice="alloy", speed=2.0)
        assert "speed" in e.value.body["message"]


@pytest.mark.parametrize("call,field", [
    (lambda m: m.text_to_mel([4, 5, 2], speaker_embedding=np.ones(256, np.float32)), "speaker_embedding"),
    (lambda m: m.text_to_mel([4, 5, 2], speaker_embedding=np.full(512, np.nan, np.float32)), "speaker_embedding"),
    (lambda m: m.text_to_mel([4, 5, 2], speaker_id=3), "speaker_id"),
    (lambda m: m.text_to_mel("   "), "text"),
    (lambda m: m.text_to_mel([]), "phonemes"),
    (lambda m: m.text_to_mel([4, 99, 2]), "phonemes"),
    (lambda m: m.text_to_mel([4, 1, 2]), "phonemes"),  # the pad id
    (lambda m: m.text_to_mel([4] * 65), "phonemes"),  # over max_text_positions
    (lambda m: m.text_to_mel([4, 5, 2], maxlenratio=float("nan")), "maxlenratio"),
    (lambda m: m.mel_to_audio(np.zeros((5, 40), np.float32)), "mel"),
    (lambda m: m.speak("Hi.", speed=1.5), "speed"),
    (lambda m: m.speak("Hi.", noise_scale=0.3), "noise_scale"),
    (lambda m: m.speak("Hi.", speaker_embedding=np.ones(3)), "speaker_embedding"),
])
def test_bad_input(model, call, field):
    with pytest.raises(InvalidConfig) as e:
        call(model)
    assert e.value.fields.get("field") == field


def test_empty_text_speaks_nothing(model):
    audio, sr = model.speak("  ")
    assert audio.size == 0 and sr == 16000


def test_import_errors(built, tmp_path):
    hf, folder, voc, _ = built
    with pytest.raises(InvalidConfig):  # --vocoder on something else
        import_model(voc, str(tmp_path / "x.model"), vocoder=voc)
    os.makedirs(tmp_path / "v4")
    tts_graphs.tiny_vocoder(str(tmp_path / "v4"), n_mels=4)
    with pytest.raises(InvalidConfig) as e:  # a vocoder of 4 mel bins
        import_model(folder, str(tmp_path / "y.model"), vocoder=str(tmp_path / "v4" / "voc.onnx"), progress=False)
    assert e.value.fields["field"] == "vocoder" and not os.path.exists(tmp_path / "y.model")
    # without a vocoder stage: text_to_mel works, mel_to_audio says how to add one
    out = str(tmp_path / "novoc.model")
    import_model(folder, out, progress=False)
    m = cyb_llm.load(out, threads=2)
    assert m.text_to_mel([4, 5, 2]).shape[1] == 80
    with pytest.raises(InvalidConfig) as e:
        m.mel_to_audio(np.zeros((3, 80), np.float32))
    assert "--vocoder" in e.value.fields["reason"]
    # a checkpoint missing a tensor
    broken = tmp_path / "broken"
    broken.mkdir()
    with open(os.path.join(folder, "config.json")) as f:
        (broken / "config.json").write_text(f.read())
    from safetensors.numpy import load_file, save_file

    t = load_file(os.path.join(folder, "model.safetensors"))
    del t["speech_decoder_postnet.feat_out.weight"]
    save_file(t, str(broken / "model.safetensors"))
    with pytest.raises(FormatError) as e:
        import_model(str(broken), str(tmp_path / "b.model"), progress=False)
    assert "feat_out.weight" in str(e.value)
    assert not os.path.exists(tmp_path / "b.model")


def test_spm_char_model_is_speecht5_tokenizer(built, tmp_path):
    """A folder with SpeechT5Tokenizer's SentencePiece char model (spm_char.model, trained here): the
    importer reads its pieces without sentencepiece; the ids of speak's sentences are the tokenizer's."""
    spm = pytest.importorskip("sentencepiece")
    import shutil

    _, folder, _, _ = built
    d = tmp_path / "with-spm"
    d.mkdir()
    for n in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(folder, n), d / n)
    train = tmp_path / "train.txt"
    train.write_text("hello there, how are you? the quick brown fox jumps over the lazy dog! it's 1 2 3.\n" * 20)
    spm.SentencePieceTrainer.train(input=str(train), model_prefix=str(d / "spm_char"), model_type="char",
                                   vocab_size=40, bos_id=0, pad_id=1, eos_id=2, unk_id=3, character_coverage=1.0,
                                   minloglevel=2)
    out = str(tmp_path / "spm.model")
    import_model(str(d), out, progress=False)
    m = cyb_llm.load(out, threads=2)
    tok = transformers.SpeechT5Tokenizer(str(d / "spm_char.model"))
    for text in ["Hello there", "  the  quick brown fox, 1 2 3!", "Zebra \u00fcmlaut", "it\u2019s \uff48i fine?"]:
        assert m.sentences(text) == [tok(text).input_ids], text


def test_speak_imports_no_torch(built):
    """speak of the two-stage model in a fresh interpreter imports none of the oracles."""
    import subprocess

    from serve_proc import child_env

    code = ("import sys, cyb_llm; m = cyb_llm.load(sys.argv[1]); a, sr = m.speak('hi bob.'); assert a.size > 0; "
            "print(sorted(n for n in ('onnxruntime', 'torch', 'transformers', 'onnx', 'sentencepiece') "
            "if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, built[3]], capture_output=True, text=True, env=child_env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_nox_matches_cpu(built, model):
    nox = cyb_llm.load(built[3], backend="nox")
    ids, spk = INPUTS[0], _speaker(4)
    a = nox.text_to_mel(ids, speaker_embedding=spk, minlenratio=2.0)
    digest = nox._st5.decoder.last_digest
    b = model.text_to_mel(ids, speaker_embedding=spk, minlenratio=2.0)
    assert a.shape == b.shape and _rel(b, a) <= tolerance("cross-path")
    assert np.array_equal(nox.text_to_mel(ids, speaker_embedding=spk, minlenratio=2.0), a)
    assert digest and nox._st5.decoder.last_digest == digest


def test_prenet_dropout_is_seeded(tmp_path):
    """speech_decoder_prenet_dropout > 0 (the released checkpoints' 0.5): transformers draws the masks at
    inference too; here they come from the seed (same seed, same mel; another seed, another mel)."""
    folder = str(tmp_path / "drop")
    hf = _tiny(folder)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg["speech_decoder_prenet_dropout"] = 0.5
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    out = str(tmp_path / "drop.model")
    import_model(folder, out, progress=False)
    m = cyb_llm.load(out, threads=2)
    kw = {"speaker_embedding": _speaker(0), "minlenratio": 2.0, "maxlenratio": 2.0}
    a = m.text_to_mel(INPUTS[0], seed=1, **kw)
    assert np.array_equal(m.text_to_mel(INPUTS[0], seed=1, **kw), a)
    assert not np.array_equal(m.text_to_mel(INPUTS[0], seed=2, **kw), a)
    assert not np.array_equal(m.text_to_mel(INPUTS[0], **kw), m.text_to_mel(INPUTS[0], **kw))
    # the dropout is on: the mel differs from transformers with dropout 0 (the same weights otherwise)
    with torch.no_grad():
        ref = hf.generate_speech(torch.tensor([INPUTS[0]]), torch.tensor(kw["speaker_embedding"][None]),
                                 minlenratio=2.0, maxlenratio=2.0).numpy()
    assert a.shape == ref.shape and _rel(ref, a) > tolerance("speecht5-vs-transformers")
