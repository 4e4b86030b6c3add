"""The CTranslate2 importer on the real Whisper weights (cyb_llm.hub: whisper-tiny = tiny.en,
whisper-base = base multilingual with a two-part model.bin). Skipped when the packages cannot be fetched."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import hub
from cyb_llm.convert.whisper_common import expected_tensors
from cyb_llm.format import ModelFile
from oracles import peer_missing

# the published sizes of the two releases (OpenAI's model dimensions)
DIMS = {
    "whisper-tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                         decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                         max_source_positions=1500, max_target_positions=448, vocab_size=51864,
                         decoder_start_token_id=50257, eos_token_id=50256, no_timestamps_token_id=50362,
                         timestamp_begin=50363, is_multilingual=False),
    "whisper-base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                         decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, num_mel_bins=80,
                         max_source_positions=1500, max_target_positions=448, vocab_size=51865,
                         decoder_start_token_id=50258, eos_token_id=50257, no_timestamps_token_id=50363,
                         timestamp_begin=50364, is_multilingual=True),
}


def _fetch(name: str) -> str:
    try:
        return hub.fetch(name, progress=False)
    except hub.FetchError as e:
        peer_missing(f"{name} cannot be fetched here: {e}")  # a failure under CYB_REQUIRE_PEERS=1


@pytest.mark.parametrize("name", sorted(DIMS))
def test_real_whisper(name):
    mf = ModelFile(_fetch(name))
    cfg = mf.config
    a = cfg["architecture"]
    assert cfg["model_type"] == "whisper"
    for key, value in DIMS[name].items():
        assert a[key] == value, key
    want = expected_tensors(a)
    assert len(mf.tensors) == len(want) == 11 + a["encoder_layers"] * 15 + a["decoder_layers"] * 24
    assert {n: t.shape for n, t in mf.tensors.items()} == want
    assert {t.encoding for t in mf.tensors.values()} == {"f16"}  # as shipped
    assert cfg["parameters"] == sum(int(np.prod(s)) for s in want.values())
    # the split blocks of a fused projection are different weights (not one block three times)
    q, k, v = (mf.tensor(f"model.decoder.layers.0.self_attn.{p}_proj.weight") for p in "qkv")
    assert not np.array_equal(q, k) and not np.array_equal(k, v)
    assert np.isfinite(mf.tensor("model.decoder.embed_tokens.weight").astype(np.float32)).all()
    assert a["suppress_tokens"][:4] == [1, 2, 7, 8] and a["begin_suppress_tokens"] == [220, a["eos_token_id"]]
    assert len(a["alignment_heads"]) > 0 and all(0 <= l < a["decoder_layers"] and 0 <= h < a["decoder_attention_heads"]
                                                 for l, h in a["alignment_heads"])
    assert a["lang_to_id"]["<|en|>"] == a["decoder_start_token_id"] + 1 and len(a["lang_to_id"]) == 99
    assert len(a["lang_ids"]) in (98, 99)  # CTranslate2's config.json list, kept as shipped
    tok = mf.tokenizer
    sot, ts = a["decoder_start_token_id"], a["timestamp_begin"]
    text = tok.decode([sot, ts, *tok.encode(" Hello world.", add_special_tokens=False), ts + 50],
                      skip_special_tokens=False)
    assert text == "<|startoftranscript|><|0.00|> Hello world.<|1.00|>"
