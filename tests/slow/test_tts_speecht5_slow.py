"""tests/test_tts_speecht5.py's generate_speech comparison for two more speaker embeddings (the
default tier runs one)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import test_tts_speecht5 as base  # noqa: E402
from test_tts_speecht5 import built, model  # noqa: E402,F401  (the fixtures)


@pytest.mark.parametrize("spk_seed", [1, 2])
def test_generate_speech_matches_more_speakers(built, model, spk_seed):  # noqa: F811
    base.test_generate_speech_matches(built, model, spk_seed)
