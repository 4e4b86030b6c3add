"""The two-stage TTS of a SpeechT5 "graph-stages" file (cyb_llm/convert/speecht5.py; docs/tts.md
"Two-stage models"): the character tokenizer, transformers' generate_speech loop over the native
stages (encoder once, one decoder step per frame group with the self-attention K/V carried, the
postnet once) and the vocoder stage. TtsModel (model.py) holds one SpeechT5 and delegates to it.

Nothing here imports torch or transformers.
"""
from __future__ import annotations

import json
import math
import re
import secrets
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidConfig
from ..named_arrays import NamedArrayModel, load_stage, stage_names

#: SentencePiece's word-boundary piece: a space, and the start of the text
SPACE = "\u2581"
#: transformers' generate_speech defaults
THRESHOLD, MINLENRATIO, MAXLENRATIO = 0.5, 0.0, 20.0
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


class SpeechT5:
    """The stages and settings of one SpeechT5 file; `encoder` is the TtsModel's own native stage."""

    def __init__(self, owner: NamedArrayModel):
        cfg = owner.config.get("tts", {}).get("speecht5")
        if not isinstance(cfg, dict):
            raise InvalidConfig(field="tts.speecht5", reason="a SpeechT5 file records its settings in [tts.speecht5] "
                                                             "(cyb-llm import of the HF folder writes it)")
        self.cfg = cfg
        self.n_mels = int(cfg["num_mel_bins"])
        self.r = int(cfg["reduction_factor"])
        self.speaker_dim = int(cfg["speaker_embedding_dim"])
        self.layers = int(cfg["decoder_layers"])
        self.heads = int(cfg["decoder_heads"])
        self.head_dim = int(cfg["head_dim"])
        self.max_text = int(cfg["max_text_positions"])
        self.max_speech = int(cfg["max_speech_positions"])
        self.vocab_size = int(cfg["vocab_size"])
        self.pad_id = int(cfg["pad_token_id"])
        self.eos_id = int(cfg["eos_token_id"])
        self.sample_rate = int(cfg["sample_rate"])
        self.dropout = float(cfg["speech_decoder_prenet_dropout"])
        self.encoder = owner
        opts = {"backend": owner.backend, "precise": owner.precise}
        self.decoder = load_stage(owner.file, "decoder", **opts)
        self.postnet = load_stage(owner.file, "postnet", **opts)
        self.vocoder = load_stage(owner.file, "vocoder", **opts) if "vocoder" in stage_names(owner.file) else None
        self.vocab: dict[str, int] | None = None
        if "char_vocab" in owner.file.sections:
            self.vocab = json.loads(owner.file.section_text("char_vocab"))
        self.unk_id = self.vocab.get("<unk>") if self.vocab else None

    # --- text -> ids -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """SpeechT5Tokenizer's ids of `text` from the stored character vocabulary: NFKC (SentencePiece's
        nmt_nfkc, without its control-character rules), whitespace runs as one SPACE piece, a SPACE first, each character its piece (<unk> for one the vocabulary lacks),
        then </s>."""
        if self.vocab is None:
            raise InvalidConfig(field="text", reason=(
                "this SpeechT5 file has no character vocabulary (vocab.json was not in the HF folder at import): "
                "pass token ids to text_to_mel"))
        pieces = SPACE + SPACE.join(unicodedata.normalize("NFKC", text).split())
        ids = []
        for ch in pieces:
            i = self.vocab.get(ch, self.unk_id)
            if i is None:
                raise InvalidConfig(field="text", reason=f"the character {ch!r} is not in the model's vocabulary "
                                                         "(which has no <unk>)")
            ids.append(int(i))
        return ids + [self.eos_id]

    def ids(self, phonemes: Any) -> np.ndarray:
        """i64 [n] from text (str), characters (a list of str) or token ids (ints, taken as given)."""
        if isinstance(phonemes, str):
            if not phonemes.strip():
                raise InvalidConfig(field="text", reason="is empty: nothing to say")
            ids = self.tokenize(phonemes)
        elif isinstance(phonemes, (bytes, bytearray)) or not isinstance(phonemes, (Sequence, np.ndarray)) \
                or len(phonemes) == 0:
            raise InvalidConfig(field="phonemes", reason="must be text (str), a non-empty list of characters or of "
                                                         "token ids")
        elif all(isinstance(p, str) for p in phonemes):
            ids = self.tokenize("".join(phonemes))
        elif all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in phonemes):
            ids = [int(p) for p in phonemes]
            bad = [p for p in ids if not 0 <= p < self.vocab_size or p == self.pad_id]
            if bad:
                raise InvalidConfig(field="phonemes", reason=f"token ids {bad[:5]} are outside 0..{self.vocab_size - 1} "
                                                             f"or the pad id {self.pad_id}")
        else:
            raise InvalidConfig(field="phonemes", reason="must hold only characters (str) or only token ids (int)")
        if len(ids) > self.max_text:
            raise InvalidConfig(field="phonemes", reason=f"{len(ids)} tokens: the model takes at most {self.max_text} "
                                                         "(max_text_positions); speak() splits long text")
        return np.asarray(ids, np.int64)

    def sentences(self, text: str) -> list[str]:
        """`text` cut after . ! ? ; : and then at spaces, each piece within max_text_positions tokens."""
        if not isinstance(text, str):
            raise InvalidConfig(field="text", reason=f"must be a str, got {type(text).__name__}")
        out: list[str] = []
        room = self.max_text - 2  # the leading SPACE and </s>
        for s in _SENTENCE_END.split(text):
            words = s.split()
            cur = ""
            for w in words:
                while len(w) > room:  # one "word" longer than the model takes
                    if cur:
                        out.append(cur)
                        cur = ""
                    out.append(w[:room])
                    w = w[room:]
                if cur and len(cur) + 1 + len(w) > room:
                    out.append(cur)
                    cur = w
                else:
                    cur = f"{cur} {w}" if cur else w
            if cur:
                out.append(cur)
        return out

    def speaker(self, speaker_id: Any, speaker_embedding: Any) -> np.ndarray:
        """f32 [1, speaker_dim]: the given x-vector, or zeros (no speaker conditioning) when None."""
        if speaker_id is not None:
            raise InvalidConfig(field="speaker_id", reason=(
                "a SpeechT5 model has no speaker table: pass speaker_embedding (a "
                f"{self.speaker_dim}-d x-vector) instead"))
        if speaker_embedding is None:
            return np.zeros((1, self.speaker_dim), np.float32)
        e = np.asarray(speaker_embedding)
        if e.dtype.kind not in "fiu" or e.size != self.speaker_dim or e.ndim not in (1, 2):
            raise InvalidConfig(field="speaker_embedding", reason=(
                f"must be {self.speaker_dim} numbers ([{self.speaker_dim}] or [1, {self.speaker_dim}]), got dtype "
                f"{e.dtype}, shape {e.shape}"))
        e = e.astype(np.float32).reshape(1, self.speaker_dim)
        if not np.isfinite(e).all():
            raise InvalidConfig(field="speaker_embedding", reason="holds NaN or infinity")
        return e

    # --- the loop --------------------------------------------------------------------------------
    def encode(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.encoder.run({"input_ids": np.ascontiguousarray(ids.reshape(1, -1))})

    def generate(self, ids: np.ndarray, speaker: np.ndarray, threshold: float = THRESHOLD,
                 minlenratio: float = MINLENRATIO, maxlenratio: float = MAXLENRATIO,
                 seed: int | None = None) -> np.ndarray:
        """transformers' generate_speech for one utterance: mel f32 [frames, n_mels] after the postnet.
        Steps until sum(sigmoid(prob)) >= threshold (not before minlen steps), at most maxlen steps;
        minlen / maxlen = int(len(ids) * ratio / reduction_factor); never more than max_speech_positions.
        `seed`: the prenet dropout's masks (a model with speech_decoder_prenet_dropout > 0; None: fresh
        ones each call)."""
        for name, v in (("threshold", threshold), ("minlenratio", minlenratio), ("maxlenratio", maxlenratio)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidConfig(field=name, reason=f"must be a finite number >= 0, got {v!r}")
        if seed is None and self.dropout > 0:
            seed = secrets.randbits(63)  # fresh dropout masks each call, as transformers
        enc = self.encode(ids)
        n = int(ids.size)
        maxlen = int(n * maxlenratio / self.r)
        minlen = int(n * minlenratio / self.r)
        feeds: dict[str, np.ndarray] = {"speaker": speaker}
        for i in range(self.layers):
            feeds[f"cross_k_{i}"] = enc[f"cross_k_{i}"]
            feeds[f"cross_v_{i}"] = enc[f"cross_v_{i}"]
            feeds[f"past_k_{i}"] = np.zeros((1, self.heads, 0, self.head_dim), np.float32)
            feeds[f"past_v_{i}"] = np.zeros((1, self.heads, 0, self.head_dim), np.float32)
        frame = np.zeros((1, 1, self.n_mels), np.float32)
        spectra = []
        idx = 0
        while True:
            idx += 1
            feeds["frame"] = frame
            feeds["position"] = np.array([idx - 1], np.int64)
            out = self.decoder.run(feeds, seed=None if seed is None else _step_seed(seed, idx))
            feat = out["feat"]  # [1, r, n_mels]
            spectra.append(feat[0])
            frame = np.ascontiguousarray(feat[:, -1:, :])
            for i in range(self.layers):
                feeds[f"past_k_{i}"] = out[f"present_k_{i}"]
                feeds[f"past_v_{i}"] = out[f"present_v_{i}"]
            prob = 1.0 / (1.0 + np.exp(-out["prob"].astype(np.float32)))
            if idx < minlen:
                continue
            # past max_speech_positions transformers' positional table ends (an error there): stop
            if idx >= maxlen or idx >= self.max_speech or float(np.sum(prob, dtype=np.float32)) >= threshold:
                break
        mel = np.concatenate(spectra, axis=0)[None]
        return np.asarray(self.postnet.run({"mel": np.ascontiguousarray(mel)})["mel_out"][0], np.float32)

    def need_vocoder(self) -> NamedArrayModel:
        if self.vocoder is None:
            raise InvalidConfig(field="model", reason=(
                "this SpeechT5 file has no vocoder stage: import it with one (cyb-llm import FOLDER --vocoder "
                "vocoder.onnx -o tts.model), or run a vocoder model on text_to_mel's mel"))
        return self.vocoder

    def mel_to_audio(self, mel: Any) -> np.ndarray:
        """mel f32 [frames, n_mels] (as text_to_mel gives it) -> the vocoder stage's audio f32 [samples]."""
        self.need_vocoder()
        x = np.asarray(mel)
        if x.dtype.kind not in "fiu" or x.size == 0:
            raise InvalidConfig(field="mel", reason=f"must be a non-empty float array, got dtype {x.dtype}, shape {x.shape}")
        x = x.astype(np.float32)
        if x.ndim == 3 and x.shape[0] == 1:
            x = x[0]
        if x.ndim != 2 or x.shape[1] != self.n_mels:
            raise InvalidConfig(field="mel", reason=f"must be [frames, {self.n_mels}] (text_to_mel's layout), "
                                                    f"got {x.shape}")
        if not np.isfinite(x).all():
            raise InvalidConfig(field="mel", reason="holds NaN or infinity")
        spec = self.vocoder.inputs[0]
        out = self.vocoder.run({spec.name: np.ascontiguousarray(x.T[None])})
        return np.asarray(out[self.vocoder.outputs[0].name], np.float32).reshape(-1)


def _step_seed(seed: int, step: int) -> int:
    """The decoder's random seed (prenet dropout) at step `step` of a call seeded `seed`."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1, np.uint64)[0])


__all__ = ["SpeechT5", "SPACE", "THRESHOLD", "MINLENRATIO", "MAXLENRATIO"]
