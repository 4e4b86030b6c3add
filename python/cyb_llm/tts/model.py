"""TtsModel: the `tts` pipeline's class (docs/tts.md). An imported ONNX graph (the named-array
core it shares with cyb_llm.graph.GraphModel: inputs, outputs, sidecar, run) of one of two shapes, decided from the graph's inputs when it loads:

  * a Piper VITS voice: inputs `input` (phoneme ids, i64 [1, T]), `input_lengths` (i64 [1]),
    `scales` (f32 [3]: noise_scale, length_scale, noise_w) and, for multi-speaker voices, `sid`
    (i64 [1]); the voice's `.onnx.json` kept at import (`m.sidecar`) holds its phoneme map,
    sample rate and inference defaults. speak() runs it sentence by sentence as piper-tts does.
  * a vocoder: one f32 input (mel [B, n_mels, frames]) and one f32 output (audio); its sidecar
    (a JSON object) names `audio.sample_rate` (or `sample_rate`). mel_to_audio() runs it.
  * a two-stage SpeechT5 model: a "graph-stages" file (`[tts] style = "speecht5"`: encoder, decoder,
    postnet and optionally vocoder stages, cyb_llm/convert/speecht5.py); this object runs the encoder
    stage and cyb_llm.tts.speecht5.SpeechT5 the loop and the other stages.

    m = cyb_llm.load("piper-joe")                    # a TtsModel
    audio, sr = m.speak("Hello there. How are you?")  # float32 [N], 22050
    for chunk in m.speak_stream(long_text): ...       # one array per sentence, as each finishes

Nothing here imports piper, onnxruntime, torch or transformers.
"""
from __future__ import annotations

import math
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidConfig
from ..named_arrays import NamedArrayModel
from .frontend import VoiceConfig, phoneme_ids as _phoneme_ids, phonemize

PIPER_INPUTS = ("input", "input_lengths", "scales")
#: piper-tts's default `--sentence-silence` (seconds of silence between sentences)
DEFAULT_SENTENCE_SILENCE = 0.0


def looks_like_piper_config(sidecar: Any) -> bool:
    """Whether a graph's sidecar is a Piper voice config (`voice.onnx.json`): the keys Piper reads."""
    return isinstance(sidecar, Mapping) and "phoneme_id_map" in sidecar and "num_symbols" in sidecar \
        and isinstance(sidecar.get("audio"), Mapping)


class TtsModel(NamedArrayModel):
    """Text to speech over an imported graph (module docstring)."""

    kind = "tts"

    def _native_stage(self, mf: Any) -> str:
        return "encoder" if _two_stage_style(mf.config) == "speecht5" else ""

    def _setup(self, **options: Any) -> None:
        super()._setup(**options)
        names = {i.name for i in self.inputs}
        self.voice_config: VoiceConfig | None = None
        self._st5: Any = None
        style = _two_stage_style(self.config)
        if style is not None:
            if style != "speecht5":
                raise InvalidConfig(field="tts.style", reason=f"unknown two-stage style {style!r} (known: speecht5)")
            from .speecht5 import SpeechT5

            self.style = "speecht5"
            self._st5 = SpeechT5(self)
            self.sample_rate = self._st5.sample_rate
        elif set(PIPER_INPUTS) <= names:
            self.style = "piper"
            if self.sidecar is None:
                raise InvalidConfig(field="sidecar", reason=(
                    "a Piper voice needs its config (voice.onnx.json) to speak: import voice.onnx with "
                    "voice.onnx.json next to it (cyb-llm import keeps it in the .model)"))
            self.voice_config = VoiceConfig.from_dict(self.sidecar)
            self.sample_rate: int = self.voice_config.sample_rate
            self._has_sid = "sid" in names
            if self.voice_config.num_speakers > 1 and not self._has_sid:
                raise InvalidConfig(field="num_speakers", reason=(
                    f"the voice config names {self.voice_config.num_speakers} speakers but the graph has no "
                    "`sid` input"))
            extra = names - set(PIPER_INPUTS) - {"sid"}
            if extra:
                raise InvalidConfig(field="graph.inputs", reason=f"a Piper voice graph has no inputs {sorted(extra)}")
        elif len(self.inputs) == 1 and len(self.outputs) >= 1 and self.inputs[0].dtype == "f32":
            self.style = "vocoder"
            side = self.sidecar if isinstance(self.sidecar, Mapping) else {}
            audio = side.get("audio") if isinstance(side.get("audio"), Mapping) else {}
            sr = audio.get("sample_rate", side.get("sample_rate"))
            if not isinstance(sr, int) or isinstance(sr, bool) or sr <= 0:
                raise InvalidConfig(field="sidecar.audio.sample_rate", reason=(
                    f"a vocoder graph needs its sample rate in its sidecar JSON "
                    f"({{\"audio\": {{\"sample_rate\": 16000}}}}), got {sr!r}"))
            self.sample_rate = sr
        else:
            raise InvalidConfig(field="graph.inputs", reason=(
                "a tts graph is a Piper VITS voice (inputs input, input_lengths, scales[, sid]) or a vocoder "
                f"(one f32 mel input); this graph's inputs: {', '.join(sorted(names)) or 'none'}"))

    # --- voices -----------------------------------------------------------------------------------
    @property
    def voices(self) -> list[str]:
        """The named voices (a multi-speaker Piper voice's speaker_id_map); [] for a single voice,
        which accepts any voice name."""
        cfg = self.voice_config
        return list(cfg.speaker_id_map) if cfg is not None else []

    def speaker_id(self, voice: Any = None) -> int | None:
        """The graph's speaker id for `voice`: None for a single-speaker voice (any name is
        accepted, OpenAI's "alloy" included); a named voice of speaker_id_map, or a speaker id
        (an int, or its decimal string) below num_speakers; None: the voice's default speaker.
        InvalidConfig(field="voice") for anything else."""
        if voice is not None and not isinstance(voice, (str, int)) or isinstance(voice, bool):
            raise InvalidConfig(field="voice", reason=f"must be a voice name (str) or a speaker id, got {type(voice).__name__}")
        if self._st5 is not None:  # one voice (the speaker embedding picks the speaker)
            return None
        cfg = self._piper("voice")
        if cfg.num_speakers <= 1 and not cfg.speaker_id_map:
            return None
        if voice is None:
            return cfg.default_speaker_id
        if isinstance(voice, str) and voice in cfg.speaker_id_map:
            return int(cfg.speaker_id_map[voice])
        sid = voice if isinstance(voice, int) else int(voice) if voice.isdigit() else None
        if sid is not None and 0 <= sid < cfg.num_speakers:
            return sid
        named = f"; its voices: {', '.join(cfg.speaker_id_map)}" if cfg.speaker_id_map else ""
        raise InvalidConfig(field="voice", reason=(
            f"unknown voice {voice!r}: this model has {cfg.num_speakers} speakers (ids 0..{cfg.num_speakers - 1})"
            f"{named}"))

    # --- text -> ids -------------------------------------------------------------------------------
    def sentences(self, text: str) -> list[list[int]]:
        """The phoneme ids of each sentence of `text`, as piper-tts synthesizes them (empty
        sentences skipped): the frontend's text_to_phoneme_ids with this voice's config. A SpeechT5
        model: the token ids of each piece SpeechT5.sentences cuts."""
        if self._st5 is not None:
            return [self._st5.ids(s).tolist() for s in self._st5.sentences(text)]
        cfg = self._piper("sentences")
        if not isinstance(text, str):
            raise InvalidConfig(field="text", reason=f"must be a str, got {type(text).__name__}")
        return [_phoneme_ids(s, cfg) for s in phonemize(text, cfg) if s]

    # --- synthesis ---------------------------------------------------------------------------------
    def speak(self, text: str, voice: Any = None, speed: float = 1.0, seed: int | None = None,
              noise_scale: float | None = None, noise_w: float | None = None,
              sentence_silence: float = DEFAULT_SENTENCE_SILENCE,
              speaker_embedding: Any = None) -> tuple[np.ndarray, int]:
        """(audio float32 [N] in [-1, 1], sample_rate): `text` synthesized sentence by sentence as
        piper-tts does (each sentence's audio scaled to peak 1, clipped), `sentence_silence` seconds
        of silence between sentences. Text without anything to say gives 0 samples. A SpeechT5 model
        (docs/tts.md "Two-stage models"): no peak scaling, `speaker_embedding` its x-vector."""
        chunks = list(self.speak_stream(text, voice=voice, speed=speed, seed=seed, noise_scale=noise_scale,
                                        noise_w=noise_w, sentence_silence=sentence_silence,
                                        speaker_embedding=speaker_embedding))
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        return audio, self.sample_rate

    def speak_stream(self, text: str, voice: Any = None, speed: float = 1.0, seed: int | None = None,
                     noise_scale: float | None = None, noise_w: float | None = None,
                     sentence_silence: float = DEFAULT_SENTENCE_SILENCE,
                     on_sentence: Any = None, speaker_embedding: Any = None) -> Iterator[np.ndarray]:
        """speak() one sentence at a time: yields each sentence's audio (float32 [n]) as soon as it
        is synthesized, the silence before it included (none before the first). Arguments are
        checked before the first sentence. `on_sentence(i, n)`: called before sentence i of n."""
        if self._st5 is not None:
            return self._st5_stream(text, voice, speed, seed, noise_scale, noise_w, sentence_silence, on_sentence,
                                    speaker_embedding)
        if speaker_embedding is not None:
            raise InvalidConfig(field="speaker_embedding", reason="a Piper voice picks speakers by voice; it takes no "
                                                                  "speaker embedding")
        plan = self._plan(text, voice, speed, seed, noise_scale, noise_w, sentence_silence)
        return self._stream(*plan, on_sentence)

    def _st5_stream(self, text, voice, speed, seed, noise_scale, noise_w, sentence_silence, on_sentence,
                    speaker_embedding: Any = None) -> Iterator[np.ndarray]:
        """speak_stream of a SpeechT5 model: text cut into sentences (SpeechT5.sentences), each one's
        mel (text_to_mel) through the vocoder stage, clipped to [-1, 1]."""
        st5 = self._st5
        if _number("speed", speed, positive=True) != 1.0:
            raise InvalidConfig(field="speed", reason="a SpeechT5 model has no speed control: speed must be 1.0")
        for name, v in (("noise_scale", noise_scale), ("noise_w", noise_w)):
            if v is not None:
                raise InvalidConfig(field=name, reason="a SpeechT5 model has no noise scales (a Piper setting)")
        self.speaker_id(voice)
        silence = _number("sentence_silence", sentence_silence)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 63):
            raise InvalidConfig(field="seed", reason=f"must be an integer in [0, 2^63), got {seed!r}")
        st5.need_vocoder()
        speaker = st5.speaker(None, speaker_embedding)
        sentences = [st5.ids(s) for s in st5.sentences(text)]
        gap = np.zeros(int(self.sample_rate * silence), np.float32)

        def run() -> Iterator[np.ndarray]:
            for i, ids in enumerate(sentences):
                if on_sentence is not None:
                    on_sentence(i, len(sentences))
                mel = st5.generate(ids, speaker, seed=None if seed is None else _sentence_seed(seed, i))
                audio = np.clip(st5.mel_to_audio(mel), -1.0, 1.0).astype(np.float32)
                yield np.concatenate([gap, audio]) if i and gap.size else audio

        return run()

    def _plan(self, text, voice, speed, seed, noise_scale, noise_w, sentence_silence):
        cfg = self._piper("speak")
        speed = _number("speed", speed, positive=True)
        length_scale = cfg.length_scale / speed
        if not 0 < length_scale < 1e30:  # the graph takes it as f32
            raise InvalidConfig(field="speed", reason=f"length_scale / speed = {length_scale!r} is out of range")
        scales = np.array([cfg.noise_scale if noise_scale is None else _number("noise_scale", noise_scale),
                           length_scale,
                           cfg.noise_w_scale if noise_w is None else _number("noise_w", noise_w)], np.float32)
        silence = _number("sentence_silence", sentence_silence)
        sid = self.speaker_id(voice)
        if seed is None:
            seed = secrets.randbits(63)  # fresh noise each call, as piper-tts on onnxruntime
        elif not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 63:
            raise InvalidConfig(field="seed", reason=f"must be an integer in [0, 2^63), got {seed!r}")
        sentences = self.sentences(text)
        gap = np.zeros(int(self.sample_rate * silence), np.float32)
        return sentences, scales, sid, seed, gap

    def _stream(self, sentences, scales, sid, seed, gap, on_sentence) -> Iterator[np.ndarray]:
        for i, ids in enumerate(sentences):
            if on_sentence is not None:
                on_sentence(i, len(sentences))
            audio = _peak_normalize(self._vits(ids, scales, sid, _sentence_seed(seed, i)))
            yield np.concatenate([gap, audio]) if i and gap.size else audio

    def _vits(self, ids: Sequence[int], scales: np.ndarray, sid: int | None, seed: int | None) -> np.ndarray:
        feeds = {"input": np.asarray([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                 "scales": scales}
        if self._has_sid:
            feeds["sid"] = np.array([0 if sid is None else sid], np.int64)
        out = self.run(feeds, seed=seed)
        return np.asarray(out[self.outputs[0].name], np.float32).reshape(-1)

    # --- the two stages ----------------------------------------------------------------------------
    def text_to_mel(self, phonemes: Sequence[Any], speaker_id: int | None = None,
                    speaker_embedding: Any = None, *, seed: int | None = None,
                    noise_scale: float | None = None, length_scale: float | None = None,
                    noise_w: float | None = None, **generate: Any) -> np.ndarray:
        """The acoustic stage. For a Piper VITS voice the graph is one piece (its decoder is not cut
        out): this runs the whole graph and returns the waveform (float32 [N], not peak-scaled), and
        mel_to_audio of it is the identity. `phonemes`: one sentence's phonemes (str each) or its
        phoneme ids (int each, BOS/EOS included as sentences() gives them). `speaker_id`: the
        `sid` of a multi-speaker voice (None: its default). A Piper voice has no speaker embedding.

        For a SpeechT5 model: `phonemes` is text (str, tokenized with the stored character vocabulary),
        a list of characters, or token ids (ints, </s> included as transformers takes input_ids);
        `speaker_embedding` a speaker_embedding_dim x-vector (None: zeros); `seed` the prenet dropout's
        noise; `threshold`, `minlenratio`, `maxlenratio` as transformers' generate_speech. Returns the
        mel after the postnet, f32 [frames, n_mels] (generate_speech's spectrogram)."""
        if self._st5 is not None:
            if length_scale is not None or noise_scale is not None or noise_w is not None:
                raise InvalidConfig(field="noise_scale", reason="a SpeechT5 model has no noise or length scales")
            st5 = self._st5
            ids = st5.ids(phonemes)
            return st5.generate(ids, st5.speaker(speaker_id, speaker_embedding), seed=seed, **generate)
        if generate:
            raise InvalidConfig(field=next(iter(generate)), reason="a Piper voice has no such setting")
        cfg = self._piper("text_to_mel")
        if speaker_embedding is not None:
            raise InvalidConfig(field="speaker_embedding", reason="a Piper voice picks speakers by speaker_id; "
                                                                  "it takes no speaker embedding")
        if isinstance(phonemes, (str, bytes)) or not isinstance(phonemes, Sequence) or not phonemes:
            raise InvalidConfig(field="phonemes", reason="must be a non-empty list of phonemes (str) or phoneme ids (int)")
        if all(isinstance(p, str) for p in phonemes):
            ids = _phoneme_ids(phonemes, cfg)
        elif all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in phonemes):
            ids = [int(p) for p in phonemes]
            bad = [p for p in ids if not 0 <= p < cfg.num_symbols]
            if bad:
                raise InvalidConfig(field="phonemes", reason=f"phoneme ids {bad[:5]} are outside 0..{cfg.num_symbols - 1}")
        else:
            raise InvalidConfig(field="phonemes", reason="must hold only phonemes (str) or only phoneme ids (int)")
        sid = self.speaker_id(int(speaker_id) if isinstance(speaker_id, np.integer) else speaker_id)
        scales = np.array([cfg.noise_scale if noise_scale is None else _number("noise_scale", noise_scale),
                           cfg.length_scale if length_scale is None else _number("length_scale", length_scale,
                                                                                 positive=True),
                           cfg.noise_w_scale if noise_w is None else _number("noise_w", noise_w)], np.float32)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 64):
            raise InvalidConfig(field="seed", reason=f"must be an integer in [0, 2^64), got {seed!r}")
        return self._vits(ids, scales, sid, seed)

    def mel_to_audio(self, mel: Any) -> np.ndarray:
        """The vocoder stage: mel (float32 [n_mels, frames] or [1, n_mels, frames]) to audio
        (float32 [samples]). On a Piper voice, whose text_to_mel already gives the waveform, it
        returns that waveform (1-D float32) unchanged. For a SpeechT5 model: mel [frames, n_mels] as
        text_to_mel gives it, through the file's vocoder stage."""
        if self._st5 is not None:
            return self._st5.mel_to_audio(mel)
        x = np.asarray(mel)
        if x.dtype.kind not in "fiu" or x.size == 0:
            raise InvalidConfig(field="mel", reason=f"must be a non-empty float array, got dtype {x.dtype}, "
                                                    f"shape {x.shape}")
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise InvalidConfig(field="mel", reason="holds NaN or infinity")
        if self.style == "piper":
            return x.reshape(-1)
        spec = self.inputs[0]
        if x.ndim == 2:
            x = x[None]
        if x.ndim != 3 or x.shape[0] != 1:
            raise InvalidConfig(field="mel", reason=f"must be [n_mels, frames] or [1, n_mels, frames], got {x.shape}")
        if len(spec.shape) == 3 and isinstance(spec.shape[1], int) and spec.shape[1] != x.shape[1]:
            raise InvalidConfig(field="mel", reason=f"the vocoder takes {spec.shape[1]} mel bins, got {x.shape[1]} "
                                                    f"(shape {x.shape})")
        out = self.run({spec.name: np.ascontiguousarray(x)})
        return np.asarray(out[self.outputs[0].name], np.float32).reshape(-1)

    def _piper(self, what: str) -> VoiceConfig:
        if self.voice_config is None:
            raise InvalidConfig(field="model", reason=(
                f"{what}: {self.name!r} is a vocoder (mel in, audio out); it has mel_to_audio only"))
        return self.voice_config


def _two_stage_style(config: Any) -> str | None:
    """The `[tts] style` of a two-stage "graph-stages" file ("speecht5"); None for a single graph."""
    tts = config.get("tts") if isinstance(config, Mapping) else None
    if not isinstance(config.get("stages"), Mapping) or not isinstance(tts, Mapping):  # [stages]: a graph-stages file
        return None
    return tts.get("style")


def _number(field: str, v: Any, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise InvalidConfig(field=field, reason=f"must be a number, got {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f) or f < 0 or f > 1e30 or (positive and f == 0):
        raise InvalidConfig(field=field, reason=f"must be a finite number {'>' if positive else '>='} 0, got {v!r}")
    return f


def _sentence_seed(seed: int, i: int) -> int:
    """The graph seed of sentence i of a call seeded `seed` (independent streams per sentence)."""
    return int(np.random.SeedSequence([seed, i]).generate_state(1, np.uint64)[0])


def _peak_normalize(audio: np.ndarray) -> np.ndarray:
    """piper-tts's normalize_audio: scaled to peak 1 (all-zero when the peak is below 1e-8), clipped."""
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    audio = np.zeros_like(audio) if peak < 1e-8 else audio / peak
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


__all__ = ["TtsModel", "looks_like_piper_config", "DEFAULT_SENTENCE_SILENCE"]
