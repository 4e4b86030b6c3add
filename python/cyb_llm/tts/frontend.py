"""The text frontend of Piper text-to-speech: text -> phonemes -> phoneme ids (docs/tts.md).

It follows piper-tts 1.8.0 step by step, so that the ids equal `PiperVoice.phonemize` +
`PiperVoice.phonemes_to_ids` (tests/test_tts_frontend.py compares them):

  * text is cut at ``[[ ... ]]`` blocks: a block's content is raw phonemes (one per code point,
    surrounding whitespace stripped, a space kept where the text around it has one); the rest
    goes to espeak-ng;
  * espeak-ng (the build in piper-tts, see _espeak.py) splits the text into clauses and
    normalises it itself (numbers, abbreviations, dates, currency are its rules); each clause
    comes back as IPA with its terminator (. ? ! , : ;) and whether it ends a sentence;
  * per clause: language-switch flags ``(en)`` are removed, the terminator is appended as a
    phoneme (`,` `:` `;` followed by a space), the string is NFD-normalised and split into
    code points (so an accent becomes a phoneme of its own); a sentence ends where espeak-ng
    says one does, and the text's tail without a terminator is a sentence too;
  * the voice's ``vowel_clusters`` (if any) merge runs of phonemes into one, longest first;
  * ids: BOS, PAD, then each phoneme's ids followed by PAD, then EOS; a phoneme the voice's
    ``phoneme_id_map`` lacks is dropped with a warning (logger ``cyb_llm.tts``), as Piper does.

Voices of ``phoneme_type`` "text" take the NFD code points of the text as one sentence. The
other types (pinyin, hebrew, japanese, thai) and Arabic's diacritizer need models of their own
and raise InvalidConfig. Where Piper itself fails (a NUL or a lone surrogate in the text,
a config without the pad/BOS/EOS symbols) this module raises InvalidConfig naming the field.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import InvalidConfig

PAD, BOS, EOS = "_", "^", "$"
#: Piper's PhonemeType values; the frontend implements the first two.
PHONEME_TYPES = ("espeak", "text", "pinyin", "hebrew", "japanese", "thai")
SUPPORTED_PHONEME_TYPES = ("espeak", "text")
# Piper's defaults for a config without "inference" / "hop_length" (piper/config.py)
DEFAULT_NOISE_SCALE, DEFAULT_LENGTH_SCALE, DEFAULT_NOISE_W_SCALE = 0.667, 1.0, 0.8
DEFAULT_HOP_LENGTH = 256

_RAW_BLOCK = re.compile(r"(\[\[.*?\]\])")  # `.` stops at a newline, as in Piper
_LANG_FLAG = re.compile(r"\([^)]+\)")  # espeak-ng's "(en)" ... "(fr)" around foreign words
_CLAUSE_BREAKS = (",", ":", ";")  # terminators inside a sentence: a space follows them

_LOG = logging.getLogger("cyb_llm.tts")


@dataclass(frozen=True)
class VoiceConfig:
    """What the frontend (and later the synthesizer) reads of a Piper voice's ``.onnx.json``."""

    espeak_voice: str
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    num_symbols: int
    num_speakers: int
    sample_rate: int
    phoneme_type: str = "espeak"
    noise_scale: float = DEFAULT_NOISE_SCALE
    length_scale: float = DEFAULT_LENGTH_SCALE
    noise_w_scale: float = DEFAULT_NOISE_W_SCALE
    hop_length: int = DEFAULT_HOP_LENGTH
    speaker_id_map: Mapping[str, int] = field(default_factory=dict)
    default_speaker_id: int = 0
    vowel_clusters: frozenset[tuple[str, ...]] | None = None
    piper_version: str | None = None

    @classmethod
    def from_dict(cls, config: Any) -> "VoiceConfig":
        """Validate a parsed ``.onnx.json``; InvalidConfig names the first bad field."""
        if not isinstance(config, Mapping):
            raise InvalidConfig(field="voice_config", reason=f"must be a JSON object, got {type(config).__name__}")
        num_symbols = _int(config, "num_symbols", minimum=1)
        num_speakers = _int(config, "num_speakers", minimum=1)
        audio = _section(config, "audio", required=True)
        sample_rate = _int(audio, "sample_rate", minimum=1, where="audio.")
        espeak = _section(config, "espeak", required=True)
        voice = espeak.get("voice")
        if not isinstance(voice, str) or not voice or "\0" in voice:
            raise InvalidConfig(field="espeak.voice", reason=f"must be an espeak-ng voice name, got {voice!r}")
        ptype = config.get("phoneme_type", "espeak")
        if ptype not in PHONEME_TYPES:
            raise InvalidConfig(field="phoneme_type", reason=f"must be one of {', '.join(PHONEME_TYPES)}; got {ptype!r}")
        id_map = _id_map(config.get("phoneme_id_map"), num_symbols)
        inference = _section(config, "inference", required=False)
        speakers = config.get("speaker_id_map") or {}
        if not isinstance(speakers, Mapping) or not all(
                isinstance(k, str) and _is_int(v) and 0 <= v < num_speakers for k, v in speakers.items()):
            raise InvalidConfig(field="speaker_id_map",
                                reason=f"must map names to speaker ids in 0..{num_speakers - 1}")
        default_speaker = _int(config, "default_speaker_id", minimum=0, default=0)
        if default_speaker >= num_speakers:
            raise InvalidConfig(field="default_speaker_id", reason=f"{default_speaker} is not below num_speakers {num_speakers}")
        version = config.get("piper_version")
        return cls(
            espeak_voice=voice, phoneme_id_map=id_map, num_symbols=num_symbols, num_speakers=num_speakers,
            sample_rate=sample_rate, phoneme_type=ptype,
            noise_scale=_float(inference, "noise_scale", DEFAULT_NOISE_SCALE),
            length_scale=_float(inference, "length_scale", DEFAULT_LENGTH_SCALE),
            noise_w_scale=_float(inference, "noise_w", DEFAULT_NOISE_W_SCALE),
            hop_length=_int(config, "hop_length", minimum=1, default=DEFAULT_HOP_LENGTH),
            speaker_id_map=dict(speakers), default_speaker_id=default_speaker,
            vowel_clusters=_clusters(config.get("vowel_clusters")),
            piper_version=version if isinstance(version, str) else None,
        )

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "VoiceConfig":
        """Read a voice's ``.onnx.json`` (for ``voice.onnx``, pass ``voice.onnx.json``)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise InvalidConfig(field="voice_config", reason=f"cannot read {os.fspath(path)!r}: {e.strerror or e}") from None
        try:
            config = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise InvalidConfig(field="voice_config", reason=f"{os.fspath(path)!r} is not UTF-8 JSON: {e}") from None
        return cls.from_dict(config)


VoiceLike = Union[VoiceConfig, Mapping, str, os.PathLike]


def voice_config(voice: VoiceLike) -> VoiceConfig:
    """A VoiceConfig from itself, a parsed ``.onnx.json`` (a dict) or the path of one."""
    if isinstance(voice, VoiceConfig):
        return voice
    if isinstance(voice, Mapping):
        return VoiceConfig.from_dict(voice)
    if isinstance(voice, (str, os.PathLike)):
        return VoiceConfig.load(voice)
    raise InvalidConfig(field="voice_config",
                        reason=f"must be a VoiceConfig, a dict or a path to .onnx.json, got {type(voice).__name__}")


def phonemize(text: str, voice: VoiceLike) -> list[list[str]]:
    """Text to phonemes, one list per sentence (Piper's ``PiperVoice.phonemize``)."""
    cfg = voice_config(voice)
    if not isinstance(text, str):
        raise InvalidConfig(field="text", reason=f"must be a str, got {type(text).__name__}")
    if cfg.phoneme_type == "text":
        return [list(unicodedata.normalize("NFD", text))]
    if cfg.phoneme_type != "espeak":
        raise InvalidConfig(field="phoneme_type", reason=(
            f"{cfg.phoneme_type!r} voices need Piper's own phonemizer models; this frontend does "
            f"{' and '.join(SUPPORTED_PHONEME_TYPES)}"))
    if cfg.espeak_voice == "ar":
        raise InvalidConfig(field="espeak.voice", reason=(
            "Arabic voices need Piper's tashkeel diacritizer (an ONNX model) before espeak-ng; "
            "not in this frontend"))

    sentences: list[list[str]] = []
    parts = _RAW_BLOCK.split(text)
    after_raw = False  # the previous part was a [[ ]] block: the next text continues its sentence
    offset = 0
    for i, part in enumerate(parts):
        start, offset = offset, offset + len(part)
        if part.startswith("[["):  # a block (or a text part that starts like one: Piper's test)
            if not sentences:
                sentences.append([])
            if i > 0 and parts[i - 1].endswith(" "):
                sentences[-1].append(" ")
            sentences[-1].extend(part[2:-2].strip())
            if i < len(parts) - 1 and parts[i + 1].startswith(" "):
                sentences[-1].append(" ")
            after_raw = True
            continue
        _check_for_espeak(part, start)
        got = _espeak_sentences(cfg, part)
        if after_raw and got:
            sentences[-1].extend(got[0])
            got = got[1:]
        sentences.extend(got)
        after_raw = False
    if sentences and not sentences[-1]:
        sentences.pop()
    return sentences


def phoneme_ids(phonemes: Iterable[str], voice: VoiceLike) -> list[int]:
    """One sentence's phonemes to ids: BOS PAD (id PAD)* EOS (Piper's ``phonemes_to_ids``).

    A phoneme the voice's map lacks is dropped, with one warning per call naming them all."""
    cfg = voice_config(voice)
    if isinstance(phonemes, (bytes, bytearray)) or not isinstance(phonemes, Iterable):
        raise InvalidConfig(field="phonemes", reason=f"must be a list of str, got {type(phonemes).__name__}")
    id_map = cfg.phoneme_id_map
    pad = id_map[PAD]
    ids = [*id_map[BOS], *pad]
    missing: list[str] = []
    for p in phonemes:
        if not isinstance(p, str):
            raise InvalidConfig(field="phonemes", reason=f"must hold str, got {type(p).__name__}")
        got = id_map.get(p)
        if got is None:
            missing.append(p)
            continue
        ids += got
        ids += pad
    ids += id_map[EOS]
    if missing:
        _LOG.warning("phonemes missing from the voice's phoneme_id_map, dropped: %s",
                     ", ".join(sorted({ascii(m) for m in missing})))
    return ids


def text_to_phoneme_ids(text: str, voice: VoiceLike) -> list[list[int]]:
    """Text to one id list per sentence, as Piper synthesizes them (empty sentences skipped)."""
    cfg = voice_config(voice)
    return [phoneme_ids(s, cfg) for s in phonemize(text, cfg) if s]


# --- espeak-ng ---------------------------------------------------------------------------------

def _check_for_espeak(text: str, start: int) -> None:
    """espeak-ng reads a NUL-terminated UTF-8 string: refuse what it cannot be given (Piper raises too)."""
    nul = text.find("\0")
    if nul >= 0:
        raise InvalidConfig(field="text", reason=f"NUL character (U+0000) at index {start + nul}: "
                                                 f"espeak-ng reads text up to the first NUL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidConfig(field="text", reason=f"lone surrogate U+{ord(text[e.start]):04X} at index "
                                                 f"{start + e.start} is not encodable as UTF-8") from None


def _espeak_sentences(cfg: VoiceConfig, text: str) -> list[list[str]]:
    from . import _espeak

    out: list[list[str]] = []
    current: list[str] = []
    for phonemes, terminator, ends_sentence in _espeak.clauses(cfg.espeak_voice, text):
        clause = _LANG_FLAG.sub("", phonemes) + terminator
        if terminator in _CLAUSE_BREAKS:
            clause += " "
        current.extend(unicodedata.normalize("NFD", clause))
        if ends_sentence:
            out.append(_merge_clusters(current, cfg.vowel_clusters))
            current = []
    if current:  # the tail without a sentence terminator
        out.append(_merge_clusters(current, cfg.vowel_clusters))
    return out


def _merge_clusters(phonemes: list[str], clusters: frozenset[tuple[str, ...]] | None) -> list[str]:
    """Each run of phonemes that is a known cluster becomes one phoneme, the longest run first."""
    if not clusters:
        return phonemes
    longest = max(len(c) for c in clusters)
    out: list[str] = []
    i, n = 0, len(phonemes)
    while i < n:
        for size in range(min(longest, n - i), 1, -1):
            if tuple(phonemes[i:i + size]) in clusters:
                out.append("".join(phonemes[i:i + size]))
                i += size
                break
        else:
            out.append(phonemes[i])
            i += 1
    return out


# --- config validation -------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(section: Mapping, key: str, *, minimum: int, default: int | None = None, where: str = "") -> int:
    v = section.get(key, default)
    if not _is_int(v) or v < minimum:
        raise InvalidConfig(field=where + key, reason=f"must be an integer >= {minimum}, got {v!r}")
    return v


def _float(section: Mapping, key: str, default: float) -> float:
    v = section.get(key, default)
    if not (_is_int(v) or isinstance(v, float)) or not math.isfinite(v) or v < 0:
        raise InvalidConfig(field=f"inference.{key}", reason=f"must be a finite number >= 0, got {v!r}")
    return float(v)


def _section(config: Mapping, key: str, *, required: bool) -> Mapping:
    v = config.get(key)
    if v is None and not required:
        return {}
    if not isinstance(v, Mapping):
        raise InvalidConfig(field=key, reason=f"must be a JSON object, got {type(v).__name__}")
    return v


def _id_map(raw: Any, num_symbols: int) -> dict[str, tuple[int, ...]]:
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidConfig(field="phoneme_id_map", reason="must be a non-empty JSON object phoneme -> [ids]")
    out: dict[str, tuple[int, ...]] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k:
            raise InvalidConfig(field="phoneme_id_map", reason=f"key {k!r} is not a phoneme string")
        if not isinstance(v, (list, tuple)) or not all(_is_int(x) and 0 <= x < num_symbols for x in v):
            raise InvalidConfig(field=f"phoneme_id_map[{k!r}]",
                                reason=f"must be a list of ids in 0..{num_symbols - 1} (num_symbols), got {v!r}")
        out[k] = tuple(v)
    for sym, name in ((PAD, "pad"), (BOS, "BOS"), (EOS, "EOS")):
        if sym not in out:
            raise InvalidConfig(field="phoneme_id_map", reason=f"has no {name} symbol {sym!r}")
    return out


def _clusters(raw: Any) -> frozenset[tuple[str, ...]] | None:
    if not raw:
        return None
    if not isinstance(raw, (list, tuple)) or not all(
            isinstance(c, (list, tuple)) and c and all(isinstance(p, str) for p in c) for c in raw):
        raise InvalidConfig(field="vowel_clusters", reason="must be a list of lists of phoneme strings")
    return frozenset(tuple(c) for c in raw)
