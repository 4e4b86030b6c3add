"""The `.model` layout of the `whisper` family, shared by the Whisper importers (convert/ct2.py;
an HF Whisper folder importer can call the same functions so that both write the same file).

Layout (docs/import.md, "CTranslate2 Whisper folders"):
- tensors: the names and shapes of transformers' `WhisperForConditionalGeneration` checkpoint
  (`expected_tensors`); the output projection is tied to `model.decoder.embed_tokens.weight`
  and is not stored;
- config: `model_type = "whisper"`, `[architecture]` = the WhisperConfig keys (`whisper_config`)
  plus the generation settings Whisper decoding needs (suppressed tokens, language and task
  token ids, alignment heads), `[preprocessor]` = the log-mel frontend's settings, and
  `[tokenizer]` = the special token ids (`tokenizer_config`).
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import InvalidConfig, MissingTensor, ShapeMismatch
from .common import make_error

#: tokens of a Whisper vocabulary that are specials but not languages
NON_LANGUAGE_SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
                         "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|nospeech|>", "<|notimestamps|>")

#: the log-mel frontend of every Whisper release (16 kHz, 25 ms window, 10 ms hop, 30 s chunks);
#: a preprocessor_config.json overrides them
PREPROCESSOR_DEFAULTS = {"sampling_rate": 16000, "n_fft": 400, "hop_length": 160, "chunk_length": 30}


def _int(v: Any, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) <= 0:
        raise make_error(InvalidConfig, f"whisper config {key} = {v!r} is not a positive integer", field=key,
                         reason=f"must be a positive integer, got {v!r}")
    return int(v)


def expected_tensors(arch: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor a whisper `.model` holds, from its [architecture]."""
    d = _int(arch.get("d_model"), "d_model")
    mels = _int(arch.get("num_mel_bins"), "num_mel_bins")
    out: dict[str, tuple[int, ...]] = {
        "model.encoder.conv1.weight": (d, mels, 3), "model.encoder.conv1.bias": (d,),
        "model.encoder.conv2.weight": (d, d, 3), "model.encoder.conv2.bias": (d,),
        "model.encoder.embed_positions.weight": (_int(arch.get("max_source_positions"), "max_source_positions"), d),
        "model.encoder.layer_norm.weight": (d,), "model.encoder.layer_norm.bias": (d,),
        "model.decoder.embed_tokens.weight": (_int(arch.get("vocab_size"), "vocab_size"), d),
        "model.decoder.embed_positions.weight": (_int(arch.get("max_target_positions"), "max_target_positions"), d),
        "model.decoder.layer_norm.weight": (d,), "model.decoder.layer_norm.bias": (d,),
    }

    def attention(prefix: str) -> None:
        for p in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{prefix}.{p}.weight"] = (d, d)
            if p != "k_proj":  # Whisper's key projections have no bias
                out[f"{prefix}.{p}.bias"] = (d,)

    def norm(name: str) -> None:
        out[name + ".weight"] = (d,)
        out[name + ".bias"] = (d,)

    for side in ("encoder", "decoder"):
        ffn = _int(arch.get(f"{side}_ffn_dim"), f"{side}_ffn_dim")
        for i in range(_int(arch.get(f"{side}_layers"), f"{side}_layers")):
            p = f"model.{side}.layers.{i}"
            attention(p + ".self_attn")
            norm(p + ".self_attn_layer_norm")
            if side == "decoder":
                attention(p + ".encoder_attn")
                norm(p + ".encoder_attn_layer_norm")
            out[p + ".fc1.weight"], out[p + ".fc1.bias"] = (ffn, d), (ffn,)
            out[p + ".fc2.weight"], out[p + ".fc2.bias"] = (d, ffn), (d,)
            norm(p + ".final_layer_norm")
    return out


def check_tensors(arch: Mapping[str, Any], shapes: Mapping[str, Iterable[int]]) -> None:
    """MissingTensor / ShapeMismatch / InvalidConfig unless `shapes` (name -> shape) is exactly the
    whisper layout of `arch`."""
    want = expected_tensors(arch)
    for name, shape in want.items():
        if name not in shapes:
            raise make_error(MissingTensor, f"whisper tensor {name!r} is missing", name=name, required_by="whisper importer")
        got = tuple(int(x) for x in shapes[name])
        if got != shape:
            raise make_error(ShapeMismatch, f"whisper tensor {name!r} has shape {list(got)}, the config implies {list(shape)}",
                             op=name, expected=str(list(shape)), got=str(list(got)))
    extra = sorted(set(shapes) - set(want))
    if extra:
        raise make_error(InvalidConfig, f"tensors outside the whisper layout: {', '.join(extra[:5])}",
                         field="tensors", reason="unexpected tensors")


def quantizable(name: str, shape: Iterable[int]) -> bool:
    """Whether `--quantize` turns this tensor into blocks: the 2-D matmul weights (projections,
    fc1/fc2 and the tied token embedding / output projection); position tables, norms, biases and
    the conv stem stay as they are."""
    shape = list(shape)
    return (len(shape) == 2 and name.endswith(".weight") and "embed_positions" not in name
            and "layer_norm" not in name and shape[-1] % 32 == 0)


def special_ids(tokens: list[str]) -> dict[str, int]:
    """token text -> id of the `<|...|>` tokens of a Whisper vocabulary (first occurrence)."""
    out: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if t.startswith("<|") and t.endswith("|>"):
            out.setdefault(t, i)
    return out


def _is_timestamp(t: str) -> bool:
    body = t[2:-2]
    return body.replace(".", "", 1).isdigit() and "." in body


def whisper_config(dims: Mapping[str, Any], tokens: list[str], generation: Mapping[str, Any],
                   preprocessor: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `.model` config of a Whisper checkpoint.

    dims: the WhisperConfig sizes (d_model, encoder_layers, decoder_layers, encoder_attention_heads,
      decoder_attention_heads, encoder_ffn_dim, decoder_ffn_dim, num_mel_bins, max_source_positions,
      max_target_positions, vocab_size); other WhisperConfig keys given here are kept as they are.
    tokens: the vocabulary by id (every row of the embedding).
    generation: suppress_tokens, begin_suppress_tokens, alignment_heads ([[layer, head], ...]) and
      lang_ids (optional: the ids CTranslate2 detects languages among; CTranslate2's tiny.en folder
      lists 50259.. where its <|en|> is 50258, so `lang_to_id` is always read from the vocabulary).
    preprocessor: preprocessor_config.json of the checkpoint, if any.
    """
    a: dict[str, Any] = {k: v for k, v in dims.items() if v is not None}
    specials = special_ids(tokens)
    for name in ("<|endoftext|>", "<|startoftranscript|>"):
        if name not in specials:
            raise make_error(InvalidConfig, f"the vocabulary has no {name} token: not a Whisper vocabulary",
                             field="vocabulary", reason=f"{name} missing")
    eot, sot = specials["<|endoftext|>"], specials["<|startoftranscript|>"]
    a.setdefault("activation_function", "gelu")
    a.setdefault("scale_embedding", False)
    a["vocab_size"] = _int(a.get("vocab_size"), "vocab_size")
    a["decoder_start_token_id"] = sot
    a["eos_token_id"] = eot
    a["pad_token_id"] = eot
    a["bos_token_id"] = eot
    a["suppress_tokens"] = [int(x) for x in generation.get("suppress_tokens") or []]
    a["begin_suppress_tokens"] = [int(x) for x in generation.get("begin_suppress_tokens") or []]
    heads = generation.get("alignment_heads")
    if heads:
        a["alignment_heads"] = [[int(l), int(h)] for l, h in heads]
    # the language tokens: every <|xx|> special that is not a task/control token or a timestamp
    a["lang_to_id"] = {t: i for t, i in sorted(specials.items(), key=lambda kv: kv[1])
                       if t not in NON_LANGUAGE_SPECIALS and not _is_timestamp(t)}
    if generation.get("lang_ids"):  # the ids a converter chose for language detection, kept as given
        a["lang_ids"] = [int(i) for i in generation["lang_ids"]]
    a["is_multilingual"] = a["vocab_size"] >= 51865  # multilingual releases have 51865+ tokens, .en ones 51864
    a["task_to_id"] = {k: specials[f"<|{k}|>"] for k in ("transcribe", "translate") if f"<|{k}|>" in specials}
    for key, tok in (("no_timestamps_token_id", "<|notimestamps|>"), ("prev_sot_token_id", "<|startofprev|>"),
                     ("no_speech_token_id", "<|nospeech|>"), ("no_captions_token_id", "<|nocaptions|>")):
        if tok in specials:
            a[key] = specials[tok]
    stamps = [i for t, i in specials.items() if _is_timestamp(t)]
    if stamps:
        a["timestamp_begin"] = min(stamps)
    pre = dict(PREPROCESSOR_DEFAULTS)
    for key in ("sampling_rate", "n_fft", "hop_length", "chunk_length"):
        if preprocessor and isinstance(preprocessor.get(key), int) and preprocessor[key] > 0:
            pre[key] = preprocessor[key]
    pre["num_mel_bins"] = a["num_mel_bins"]
    if preprocessor and preprocessor.get("feature_size") not in (None, a["num_mel_bins"]):
        raise make_error(InvalidConfig, f"preprocessor_config.json feature_size {preprocessor.get('feature_size')!r} "
                         f"differs from the model's {a['num_mel_bins']} mel bins", field="feature_size", reason="mismatch")
    return {"model_type": "whisper", "architecture": a, "preprocessor": pre,
            "tokenizer": tokenizer_config(tokens)}


def tokenizer_config(tokens: list[str]) -> dict[str, Any]:
    """The [tokenizer] table of a Whisper vocabulary (byte-level BPE; no BOS is added: the decoder
    prompt is built by the transcription code)."""
    specials = special_ids(tokens)
    eot = specials["<|endoftext|>"]
    return {"type": "bpe", "add_bos": False, "eos_token_ids": [eot], "pad_token_id": eot}


def complete_tokenizer_json(text: str, tokens: list[str]) -> str:
    """tokenizer.json with every vocabulary entry it lacks (Whisper's tokenizer.json stops before the
    timestamp tokens `<|0.00|>` ...) added as special added tokens at their ids, so that every id
    the model can emit decodes. Unchanged when nothing is missing."""
    j = json.loads(text)
    have: set[int] = set(int(v) for v in (j.get("model", {}).get("vocab") or {}).values())
    have.update(int(t["id"]) for t in j.get("added_tokens", []) if isinstance(t, dict) and "id" in t)
    missing = [i for i in range(len(tokens)) if i not in have]
    if not missing:
        return text
    added = j.setdefault("added_tokens", [])
    for i in missing:
        added.append({"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    return json.dumps(j, ensure_ascii=False)


__all__ = ["expected_tensors", "check_tensors", "quantizable", "whisper_config", "tokenizer_config",
           "complete_tokenizer_json", "special_ids", "PREPROCESSOR_DEFAULTS"]
