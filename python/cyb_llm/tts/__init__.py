"""Text-to-speech, Piper voices (docs/tts.md).

    frontend.py   text -> phonemes -> phoneme ids, as piper-tts 1.8 does (espeak-ng)
    _espeak.py    espeak-ng from the piper-tts wheel (the `tts` extra), loaded without importing piper
    model.py      TtsModel, the `tts` pipeline's class (speak, speak_stream, text_to_mel, mel_to_audio)

Nothing here imports piper, onnxruntime, torch or transformers; espeak-ng loads on first use.
"""
from __future__ import annotations

from .frontend import VoiceConfig, phoneme_ids, phonemize, text_to_phoneme_ids, voice_config



def __getattr__(name: str):
    if name == "TtsModel":  # imported on first use: the frontend alone needs no native model class
        from .model import TtsModel
        return TtsModel
    raise AttributeError(f"module 'cyb_llm.tts' has no attribute {name!r}")


__all__ = ["TtsModel", "VoiceConfig", "phoneme_ids", "phonemize", "text_to_phoneme_ids", "voice_config"]
