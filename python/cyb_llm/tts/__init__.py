"""Text-to-speech, Piper voices (docs/tts.md).

    frontend.py   text -> phonemes -> phoneme ids, as piper-tts 1.8 does (espeak-ng)
    _espeak.py    espeak-ng from the piper-tts wheel (the `tts` extra), loaded without importing piper

Nothing here imports piper, onnxruntime, torch or transformers; espeak-ng loads on first use.
"""
from __future__ import annotations

from .frontend import VoiceConfig, phoneme_ids, phonemize, text_to_phoneme_ids, voice_config

__all__ = ["VoiceConfig", "phoneme_ids", "phonemize", "text_to_phoneme_ids", "voice_config"]
