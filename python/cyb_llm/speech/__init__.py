"""The speech pipeline (cyb_llm.pipelines kind "speech"): Whisper speech recognition.

    model.py       WhisperModel: transcribe, transcribe_stream, and the encoder / decoder sessions
    pipeline.py    long-form transcription: 30 s windows, seek, segments, language detection
    search.py      one window's decoding: the logits rules, greedy / sampling / beam search, fallback
    alignment.py   word timestamps: cross-attention alignment, DTW, words and their times
    common.py      the constants, the runtime interface and the vocabulary's special ids they share
    audio.py       audio files -> 16 kHz samples -> log-mel (the native frontend)
    transcript.py  a transcription as text, json, verbose_json, srt or vtt
"""
from __future__ import annotations

from .audio import load_audio, log_mel_spectrogram
from .model import WhisperModel, WhisperSession
from .pipeline import WhisperPipeline
from .transcript import render

__all__ = ["WhisperModel", "WhisperSession", "WhisperPipeline", "load_audio", "log_mel_spectrogram", "render"]
