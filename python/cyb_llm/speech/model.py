"""The speech pipeline's model: `WhisperModel` (cyb_llm.pipelines, kind "speech"), the Python
face of the native whisper family (csrc/families/whisper.h, docs/whisper.md "The whisper
family"): load a whisper `.model`, run the encoder on log-mel windows, and decode with sessions
whose cross-attention K/V are computed once per window.

    m = WhisperModel("tiny.model", precise=True)     # or cyb_llm.load("whisper-tiny")
    enc = m.encode(mel)                  # float32 [n_mels, 3000] -> [1500, d_model]
    s = m.new_session()
    s.start(enc)                         # cross K/V of every decoder layer, once
    logits = s.forward([sot, lang, task])   # [3, vocab]; appends to the self-attention cache
    beam = s.clone()                     # self cache copied, cross K/V shared

Every forward runs natively with the GIL released.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import _core
from ..base import Conversation, Model
from ..errors import InvalidConfig
from ..ids import token_id_array
from .audio import load_audio
from .pipeline import WhisperPipeline


class WhisperSession(Conversation):
    """One decoding stream over one audio window: the self-attention KV cache (a Conversation of
    the native family) plus the window's cross-attention K/V (shared between clones)."""

    @property
    def started(self) -> bool:
        return self.model._native.whisper_started(self._native)

    def start(self, encoder_output: np.ndarray) -> None:
        """Computes the cross-attention K/V of `encoder_output` [n_audio_ctx, d_model] (the only
        time the cross K/V projections run for this window) and empties the self-attention cache."""
        self.model._native.whisper_start(self._native, encoder_output)

    def forward(self, tokens: Sequence[int] | np.ndarray, all_logits: bool = True) -> np.ndarray:
        """Runs `tokens` at the current position: logits [len(tokens), vocab] (or [vocab] of the
        last one when all_logits is False)."""
        return super().forward(tokens, all_logits)

    def cross_attention(self, tokens: Sequence[int] | np.ndarray, heads: Sequence[Sequence[int]],
                        n_frames: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Runs `tokens` at the current position as forward does (appending to the self cache) and
        returns (logits float32 [n, vocab], attn float32 [len(heads), n, n_frames]): attn[i] holds
        the cross-attention probabilities of heads[i] = (layer, head), the softmax of
        q . k / sqrt(head_dim) over the first `n_frames` encoder positions (default all
        n_audio_ctx: the weights the forward itself uses). Computed on the host; on wgpu+rs the
        q rows and the window's cross K are downloaded for it."""
        arr = token_id_array(tokens, self.model.vocab_size)
        hs = [(int(l), int(h)) for l, h in heads]
        return self.model._native.whisper_cross_attention(self._native, arr, hs,
                                                          self.model.n_audio_ctx if n_frames is None else int(n_frames))

    def clone(self) -> "WhisperSession":
        return WhisperSession(self.model, self.model._native.whisper_clone(self._native))

    def copy_from(self, other: "WhisperSession") -> None:
        """Takes `other`'s state (same max_context): beam reordering without allocating."""
        self.model._native.whisper_copy(self._native, other._native)

    def reset(self) -> None:
        """Position 0 and no encoder output (start() again before the next forward)."""
        self.model._native.whisper_reset(self._native)


def reorder(sessions: list[WhisperSession], indices: Sequence[int]) -> list[WhisperSession]:
    """Beam search: new sessions where session i holds the state of sessions[indices[i]]
    (the self caches copied, cross K/V shared)."""
    return [sessions[j].clone() for j in indices]


class WhisperModel(Model):
    """A loaded whisper `.model`: transcribe, transcribe_stream, and the encoder / decoder sessions
    underneath."""

    kind = "speech"

    def _native_options(self, exec_path: str | None, fuse: bool) -> tuple[str | None, bool]:
        if exec_path not in (None, "curated"):
            raise InvalidConfig(field="exec_path", reason="whisper models run only the curated path")
        return None, True

    def _setup(self, n_ctx: int | None = None) -> None:
        dims = self._native.whisper_dims()
        self.n_mels: int = dims["n_mels"]
        self.n_audio_ctx: int = dims["n_audio_ctx"]
        self.d_model: int = dims["d_model"]
        self.n_text_ctx: int = dims["n_text_ctx"]
        self._n_vocab: int = dims["n_vocab"]
        self._pipe: Any = None

    def _on_close(self) -> None:
        self._pipe = None

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    # --- transcription (the decoding pipeline of cyb_llm.speech.pipeline over this model) ------
    # The runtime interface (common.WhisperRuntime): n_mels, n_vocab, encode, session.
    @property
    def n_vocab(self) -> int:
        return self.vocab_size

    def session(self, encoder_output: np.ndarray) -> "WhisperSession":
        """A decoder session started on `encoder_output` (its cross K/V computed once)."""
        s = self.new_session()
        s.start(encoder_output)
        return s

    def cross_attention(self, encoder_output: np.ndarray, tokens: Sequence[int], heads: Sequence[Sequence[int]],
                        n_frames: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """WhisperSession.cross_attention of `tokens` from position 0 on a new session over
        `encoder_output` (word timestamps: alignment.find_alignment)."""
        return self.session(encoder_output).cross_attention(tokens, heads, n_frames)

    def _pipeline(self) -> WhisperPipeline:
        p = self._pipe
        if p is None:
            p = self._pipe = WhisperPipeline.from_modelfile(self, self.file)
        return p

    def transcribe(self, audio: Any, **options: Any) -> dict:
        """Speech to text: `audio` is a path / binary file (any format soundfile reads, resampled to
        16 kHz) or float samples at 16 kHz. Options as faster-whisper's transcribe: language (None:
        detected on multilingual models), task ("transcribe" | "translate"), beam_size (5), best_of,
        patience, length_penalty, temperature (the fallback sequence), compression_ratio_threshold,
        log_prob_threshold, no_speech_threshold, condition_on_previous_text, initial_prompt,
        without_timestamps, max_initial_timestamp, word_timestamps (False), prepend_punctuations,
        append_punctuations, vad_filter (False: True decodes only the speech chunks that the
        Silero VAD finds, times kept on the input's timeline; speech/vad.py) and vad_parameters
        (a dict of VadOptions fields or a VadOptions). Returns {"text", "language",
        "language_probability", "segments": [{"id", "seek", "start", "end", "text", "tokens",
        "temperature", "avg_logprob", "compression_ratio", "no_speech_prob"}]} (docs/whisper.md); with word_timestamps each
        segment also has "words": [{"word", "start", "end", "probability"}]; with vad_filter the
        result also has "duration_after_vad" (seconds) and "speech_chunks" ([{"start", "end"}],
        samples)."""
        samples = load_audio(audio)
        result = self._pipeline().transcribe(samples, **options)
        result["duration"] = len(samples) / 16000.0
        return result

    def transcribe_stream(self, audio: Any, **options: Any) -> Any:
        """The segments of `transcribe`, yielded as each 30 s window is decoded."""
        return self._pipeline().transcribe_stream(load_audio(audio), **options)

    def forward_batch(self, sessions: Sequence[WhisperSession], tokens: Sequence[int]) -> np.ndarray:
        """One token for each session in one batched forward (the weights read once for all rows;
        sessions sharing a window's cross K/V take one cross-attention call): float32 logits
        [len(sessions), vocab]; each session advances by one."""
        ids = token_id_array(tokens, self.vocab_size)
        return self._native.forward_batch([s._native for s in sessions], ids)

    @property
    def device_beams(self) -> bool:
        """True when decode steps take their candidates on the device (wgpu+rs: forward_batch_beam)."""
        return bool(self._native.device_beams())

    def forward_batch_beam(self, sessions: Sequence[WhisperSession], tokens: Sequence[int], masks: np.ndarray,
                           checks: Sequence[bool], cums: Sequence[float], ts_begin: int, ts_end: int,
                           k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """forward_batch with the k best candidates of its rows taken on the device (device_beams:
        only the candidates come back; `_core.forward_batch_beam`, docs/whisper.md "Decoding on the
        device"): (beams, tokens, scores), best first."""
        return _core.forward_batch_beam(self._native, [s._native for s in sessions], [int(t) for t in tokens],
                                        masks, list(checks), list(cums), ts_begin, ts_end, k)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """Encoder output of a log-mel window float32 [n_mels, 2 * n_audio_ctx] -> [n_audio_ctx, d_model]
        (batched: [B, n_mels, frames] -> [B, n_audio_ctx, d_model])."""
        return self._native.encode_audio(mel)

    def new_session(self, max_context: int | None = None) -> WhisperSession:
        return WhisperSession(self, self._native.new_conversation(self.n_text_ctx if max_context is None
                                                                  else max_context))

    def __repr__(self) -> str:
        if self.closed:
            return super().__repr__()
        return f"WhisperModel({self.path!r}, n_mels={self.n_mels}, d_model={self.d_model})"
