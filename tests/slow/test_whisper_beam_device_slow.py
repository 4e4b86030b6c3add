"""Slow tier of tests/test_whisper_beam_device.py: whisper-tiny on wgpu+rs decodes a whole window
(four spoken sentences, ~16 s) with beam 5 and greedy, the candidates on the device, into the
tokens of the same model with its candidates taken on the host; the average log-probabilities
within `device-beam-score`. (About 80 s on lavapipe: a decode step of five beams there takes 2 s.)"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from test_whisper_beam_device import TOL, WGPU, on_host, window_on_wgpu  # noqa: E402

pytestmark = pytest.mark.skipif(WGPU is not None, reason=WGPU or "")


@pytest.mark.parametrize("beam", [5, 1])
def test_tiny_window_on_the_device_equals_the_host_candidates(beam, monkeypatch):
    gpu, tok, decoder, prompt, enc = window_on_wgpu(4)
    dec = decoder(beam)
    on_device = dec.generate(enc, prompt, 0.0)
    on_host(monkeypatch)
    from_host = dec.generate(enc, prompt, 0.0)
    assert on_device.tokens == from_host.tokens and len(on_device.tokens) > 30
    assert abs(on_device.avg_logprob - from_host.avg_logprob) <= TOL
