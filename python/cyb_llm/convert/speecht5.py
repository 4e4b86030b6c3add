"""SpeechT5 text-to-speech (transformers' SpeechT5ForTextToSpeech) from an HF folder (config.json +
model.safetensors) -> a "graph-stages" .model with pipeline "tts" (docs/tts.md "Two-stage models").

The stages are emitted from the config with GraphBuilder (no graph file to translate):

  encoder   input_ids i64 [1, seq] -> encoder_out f32 [1, seq, hidden], and for each decoder layer i the
            cross-attention keys / values cross_k_i, cross_v_i f32 [1, heads, seq, head_dim]
            (the text prenet: embedding + scaled positional encoding; the relative-position encoder)
  decoder   one autoregressive step: frame f32 [1, 1, n_mels] (the last frame, zeros at the start),
            position i64 [1] (the step, from 0), speaker f32 [1, speaker_embedding_dim], the cross_k_i /
            cross_v_i of the encoder, past_k_i / past_v_i f32 [1, heads, past, head_dim] (the
            self-attention keys / values of the frames before: past = 0 at the first step) ->
            feat f32 [1, reduction_factor, n_mels] (feat_out), prob f32 [1, reduction_factor]
            (prob_out's logits), present_k_i / present_v_i (past + 1 frames; state pairs
            present_k_i -> past_k_i). The K/V are carried, not recomputed.
  postnet   mel f32 [1, frames, n_mels] -> mel_out (the conv postnet, batch norm folded into the convs,
            plus the residual)
  vocoder   (optional: `--vocoder hifigan.onnx`) the vocoder's ONNX graph imported as it is:
            mel f32 [1, n_mels, frames] -> audio

The loop (stop rule, min / max length) runs in Python: cyb_llm.tts.speecht5. Nothing here imports
torch or transformers: the weights are read from safetensors with numpy.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Any

import numpy as np

from ..errors import FormatError, InvalidConfig
from ..pipelines import STAGES_MODEL_TYPE
from .common import make_error, write_import
from .graph_builder import GraphBuilder, tb_attend, tb_heads, tb_layer_norm, tb_linear, tb_merge_heads
from .hf import _read_json, _SafetensorsFile

MODEL_TYPE = "speecht5"
ARCHITECTURE = "SpeechT5ForTextToSpeech"
STAGES = ("encoder", "decoder", "postnet")
#: the files holding the tokenizer's character vocabulary, in order of preference: SpeechT5Tokenizer's
#: SentencePiece char model (its pieces read here without the sentencepiece package) or a JSON
#: {"piece": id} (docs/tts.md "Two-stage models")
VOCAB_FILES = ("spm_char.model", "vocab.json")
_NEEDED = ("vocab_size", "hidden_size", "encoder_layers", "decoder_layers", "encoder_attention_heads",
           "decoder_attention_heads", "num_mel_bins", "speaker_embedding_dim", "reduction_factor",
           "speech_decoder_prenet_layers", "speech_decoder_postnet_layers", "max_text_positions",
           "max_speech_positions", "encoder_max_relative_position")


def is_speecht5_config(cfg: Any) -> bool:
    """Whether an HF config.json (a dict) is a SpeechT5 text-to-speech model."""
    return isinstance(cfg, dict) and cfg.get("model_type") == MODEL_TYPE


def _int(cfg: dict, key: str) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise make_error(InvalidConfig, f"config.json: {key} must be a positive integer, got {v!r}", field=key,
                         reason="not a positive integer")
    return v


def _check_config(cfg: dict) -> dict:
    arch = cfg.get("architectures") or [ARCHITECTURE]
    if ARCHITECTURE not in arch:
        raise make_error(InvalidConfig, f"config.json: architectures {arch}: only {ARCHITECTURE} (text to speech) "
                         "is imported", field="architectures", reason="not text to speech")
    c = {k: _int(cfg, k) for k in _NEEDED}
    for k in ("encoder", "decoder"):
        if c["hidden_size"] % c[f"{k}_attention_heads"]:
            raise make_error(InvalidConfig, f"config.json: hidden_size {c['hidden_size']} is not a multiple of "
                             f"{k}_attention_heads {c[f'{k}_attention_heads']}", field=f"{k}_attention_heads",
                             reason="does not divide hidden_size")
    act = cfg.get("hidden_act", "gelu")
    if act not in ("gelu", "relu"):
        raise make_error(InvalidConfig, f"config.json: hidden_act {act!r}: gelu or relu", field="hidden_act",
                         reason="unsupported activation")
    c["hidden_act"] = act
    c["layer_norm_eps"] = float(cfg.get("layer_norm_eps", 1e-5))
    p = cfg.get("speech_decoder_prenet_dropout", 0.5)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise make_error(InvalidConfig, f"config.json: speech_decoder_prenet_dropout {p!r} must be in [0, 1)",
                         field="speech_decoder_prenet_dropout", reason="out of range")
    c["speech_decoder_prenet_dropout"] = float(p)
    for k, d in (("pad_token_id", 1), ("eos_token_id", 2), ("bos_token_id", 0)):
        c[k] = int(cfg.get(k, d))
    return c


class _Weights:
    """The float tensors of the folder's safetensors files, as float32 numpy arrays."""

    def __init__(self, folder: str):
        files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        self.where: dict[str, _SafetensorsFile] = {}
        for n in files:
            sf = _SafetensorsFile(os.path.join(folder, n))
            for name in sf.entries:
                self.where[name] = sf
        self.used: set[str] = set()

    def __getitem__(self, name: str) -> np.ndarray:
        sf = self.where.get(name)
        if sf is None:
            raise make_error(FormatError, f"the checkpoint has no tensor {name!r}", section="safetensors", key=name)
        e = sf.entries[name]
        raw = sf.raw(name)
        shape = tuple(int(d) for d in e["shape"])
        dt = e["dtype"]
        if dt == "F32":
            a = raw.view("<f4")
        elif dt == "F16":
            a = raw.view("<f2").astype(np.float32)
        elif dt == "BF16":
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise make_error(FormatError, f"tensor {name!r} has dtype {dt}, not a float", section="safetensors", key=name)
        self.used.add(name)
        return np.array(a.reshape(shape), np.float32)


class _Prefixed:
    """`w[name]` = the checkpoint's `prefix + name` (a module's weights under its own names)."""

    def __init__(self, w: _Weights, prefix: str):
        self.w, self.prefix = w, prefix

    def __getitem__(self, name: str) -> np.ndarray:
        return self.w[self.prefix + name]


def scaled_positions(max_len: int, dim: int) -> np.ndarray:
    """SpeechT5ScaledPositionalEncoding's table pe [max_len, dim], in float32 as torch computes it."""
    pe = np.zeros((max_len, dim), np.float32)
    position = np.arange(max_len, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, dim, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / dim))).astype(np.float32)
    pe[:, 0::2] = np.sin(position * div)
    pe[:, 1::2] = np.cos(position * div)[:, : dim // 2]
    return pe


def _ffn(b: GraphBuilder, x: str, w: Any, name: str, act: str) -> str:
    h = tb_linear(b, x, w, f"{name}.intermediate_dense")
    h = b.node("gelu" if act == "gelu" else "relu", [h])
    return tb_linear(b, h, w, f"{name}.output_dense")


def _scaled_q(b: GraphBuilder, x: str, w: Any, name: str, heads: int, hd: int) -> str:
    q = b.node("binary", [tb_linear(b, x, w, f"{name}.q_proj"), b.const([hd ** -0.5])], fn="mul")
    return tb_heads(b, q, heads, hd)


def _positions(b: GraphBuilder, ref: str, axis: int) -> str:
    """i64 [n]: 0..n-1 with n = ref's dim `axis`."""
    n = b.node("squeeze", [b.node("shape", [ref], range=[axis, axis + 1])], axes=[0])
    zero = b.node("squeeze", [b.const([0], "i64")], axes=[0])
    one = b.node("squeeze", [b.const([1], "i64")], axes=[0])
    return b.node("range", [zero, n, one])


def encoder_graph(c: dict, w: _Weights) -> tuple[dict, dict]:
    H, heads = c["hidden_size"], c["encoder_attention_heads"]
    hd = H // heads
    b = GraphBuilder("encoder.")
    ids = b.input("input_ids", "i64", [1, "seq"])
    p = _Prefixed(w, "speecht5.encoder.")
    # text prenet: embedding + alpha * pe[:seq]
    x = b.node("gather", [b.weight("prenet.embed_tokens.weight", p["prenet.embed_tokens.weight"]), ids], axis=0)
    pos = _positions(b, ids, 1)
    pe = b.node("gather", [b.weight("prenet.pe", scaled_positions(c["max_text_positions"], H)), pos], axis=0)
    alpha = b.weight("prenet.encode_positions.alpha", p["prenet.encode_positions.alpha"].reshape(1))
    x = b.node("binary", [x, b.node("binary", [pe, alpha], fn="mul")], fn="add")
    x = tb_layer_norm(b, x, p, "wrapped_encoder.layer_norm", c["layer_norm_eps"])
    # relative position bias table: pe_k[clip(i - j, -max, max - 1) + max] -> [seq, seq, head_dim]
    m = c["encoder_max_relative_position"]
    rel = b.node("binary", [b.node("unsqueeze", [pos], axes=[1]), b.node("unsqueeze", [pos], axes=[0])], fn="sub")
    rel = b.node("binary", [b.node("binary", [rel, b.const([-m], "i64")], fn="max"), b.const([m - 1], "i64")], fn="min")
    rel = b.node("binary", [rel, b.const([m], "i64")], fn="add")
    pb = b.node("gather", [b.weight("wrapped_encoder.embed_positions.pe_k.weight",
                                    p["wrapped_encoder.embed_positions.pe_k.weight"]), rel], axis=0)
    pbt = b.node("transpose", [pb], perm=[0, 2, 1])  # [seq(i), head_dim, seq(j)]
    for i in range(c["encoder_layers"]):
        n = f"wrapped_encoder.layers.{i}"
        q = _scaled_q(b, x, p, f"{n}.attention", heads, hd)
        k = tb_heads(b, tb_linear(b, x, p, f"{n}.attention.k_proj"), heads, hd)
        v = tb_heads(b, tb_linear(b, x, p, f"{n}.attention.v_proj"), heads, hd)
        # bias[h, i, j] = q[h, i] . pb[i, j]: q as [seq, heads, head_dim] @ pb^T [seq, head_dim, seq]
        qi = b.node("transpose", [b.node("reshape", [q], shape=[heads, -1, hd])], perm=[1, 0, 2])
        bias = b.node("transpose", [b.node("matmul_nd", [qi, pbt])], perm=[1, 0, 2])
        bias = b.node("unsqueeze", [bias], axes=[0])
        a = tb_merge_heads(b, tb_attend(b, q, k, v, bias), heads, hd)
        x = b.node("binary", [x, tb_linear(b, a, p, f"{n}.attention.out_proj")], fn="add")
        x = tb_layer_norm(b, x, p, f"{n}.layer_norm", c["layer_norm_eps"])
        x = b.node("binary", [x, _ffn(b, x, p, f"{n}.feed_forward", c["hidden_act"])], fn="add")
        x = tb_layer_norm(b, x, p, f"{n}.final_layer_norm", c["layer_norm_eps"])
    b.output("encoder_out", x, [1, "seq", H])
    x = "encoder_out"
    # the decoder's cross-attention keys / values, once per utterance
    dh = c["decoder_attention_heads"]
    dp = _Prefixed(w, "speecht5.decoder.wrapped_decoder.")
    for i in range(c["decoder_layers"]):
        n = f"layers.{i}.encoder_attn"
        b.output(f"cross_k_{i}", tb_heads(b, tb_linear(b, x, dp, f"{n}.k_proj"), dh, H // dh), [1, dh, "seq", H // dh])
        b.output(f"cross_v_{i}", tb_heads(b, tb_linear(b, x, dp, f"{n}.v_proj"), dh, H // dh), [1, dh, "seq", H // dh])
    return b.build()


def decoder_graph(c: dict, w: _Weights) -> tuple[dict, dict]:
    H, heads, nm, r = c["hidden_size"], c["decoder_attention_heads"], c["num_mel_bins"], c["reduction_factor"]
    hd = H // heads
    b = GraphBuilder("decoder.")
    frame = b.input("frame", "f32", [1, 1, nm])
    position = b.input("position", "i64", [1])
    speaker = b.input("speaker", "f32", [1, c["speaker_embedding_dim"]])
    cross = [(b.input(f"cross_k_{i}", "f32", [1, heads, "seq", hd]), b.input(f"cross_v_{i}", "f32", [1, heads, "seq", hd]))
             for i in range(c["decoder_layers"])]
    past = [(b.input(f"past_k_{i}", "f32", [1, heads, "past", hd]), b.input(f"past_v_{i}", "f32", [1, heads, "past", hd]))
            for i in range(c["decoder_layers"])]
    p = _Prefixed(w, "speecht5.decoder.")
    # speech prenet: relu(linear) layers with transformers' "consistent dropout", always on
    drop = c["speech_decoder_prenet_dropout"]
    if drop == 0:
        # torch.bernoulli(p=0) keeps no unit: the layers' output is all zeros, final_layer gives its bias
        # (the frame does not reach the decoder; transformers' SpeechT5SpeechDecoderPrenet with dropout 0)
        h = b.weight("prenet.final_layer.bias", p["prenet.final_layer.bias"])
    else:
        h = frame
        zp = statistics.NormalDist().inv_cdf(drop)  # keep a unit where normal < zp: probability `drop`, as torch
        for i in range(c["speech_decoder_prenet_layers"]):
            h = b.node("relu", [tb_linear(b, h, p, f"prenet.layers.{i}")])
            keep = b.node("binary", [b.node("random_normal_like", [h], seed=i), b.const([zp])], fn="less")
            h = b.node("binary", [b.node("where", [keep, h, b.const([0.0])]), b.const([1.0 / (1.0 - drop)])], fn="mul")
        h = tb_linear(b, h, p, "prenet.final_layer")
    pe = b.node("gather", [b.weight("prenet.pe", scaled_positions(c["max_speech_positions"], H)), position], axis=0)
    pe = b.node("unsqueeze", [pe], axes=[0])  # [1, 1, H]
    alpha = b.weight("prenet.encode_positions.alpha", p["prenet.encode_positions.alpha"].reshape(1))
    h = b.node("binary", [h, b.node("binary", [pe, alpha], fn="mul")], fn="add")  # [1, 1, H]
    # speaker: F.normalize (x / max(|x|, 1e-12)), concatenated, speaker_embeds_layer, relu
    norm = b.node("sqrt", [b.node("reduce", [b.node("binary", [speaker, speaker], fn="mul")], fn="sum", axes=[1],
                                  keepdims=True)])
    spk = b.node("binary", [speaker, b.node("binary", [norm, b.const([1e-12])], fn="max")], fn="div")
    h = b.node("concat", [h, b.node("unsqueeze", [spk], axes=[1])], axis=-1)
    x = b.node("relu", [tb_linear(b, h, p, "prenet.speaker_embeds_layer")])
    dp = _Prefixed(w, "speecht5.decoder.wrapped_decoder.")
    eps = c["layer_norm_eps"]
    for i in range(c["decoder_layers"]):
        n = f"layers.{i}"
        q = _scaled_q(b, x, dp, f"{n}.self_attn", heads, hd)
        k = b.node("concat", [past[i][0], tb_heads(b, tb_linear(b, x, dp, f"{n}.self_attn.k_proj"), heads, hd)], axis=2)
        v = b.node("concat", [past[i][1], tb_heads(b, tb_linear(b, x, dp, f"{n}.self_attn.v_proj"), heads, hd)], axis=2)
        b.output(f"present_k_{i}", k, [1, heads, "total", hd])
        b.output(f"present_v_{i}", v, [1, heads, "total", hd])
        b.state_pair(f"present_k_{i}", f"past_k_{i}")
        b.state_pair(f"present_v_{i}", f"past_v_{i}")
        a = tb_merge_heads(b, tb_attend(b, q, f"present_k_{i}", f"present_v_{i}"), heads, hd)
        x = b.node("binary", [x, tb_linear(b, a, dp, f"{n}.self_attn.out_proj")], fn="add")
        x = tb_layer_norm(b, x, dp, f"{n}.self_attn_layer_norm", eps)
        q = _scaled_q(b, x, dp, f"{n}.encoder_attn", heads, hd)
        a = tb_merge_heads(b, tb_attend(b, q, cross[i][0], cross[i][1]), heads, hd)
        x = b.node("binary", [x, tb_linear(b, a, dp, f"{n}.encoder_attn.out_proj")], fn="add")
        x = tb_layer_norm(b, x, dp, f"{n}.encoder_attn_layer_norm", eps)
        x = b.node("binary", [x, _ffn(b, x, dp, f"{n}.feed_forward", c["hidden_act"])], fn="add")
        x = tb_layer_norm(b, x, dp, f"{n}.final_layer_norm", eps)
    pp = _Prefixed(w, "speech_decoder_postnet.")
    feat = b.node("reshape", [tb_linear(b, x, pp, "feat_out")], shape=[1, r, nm])
    prob = b.node("reshape", [tb_linear(b, x, pp, "prob_out")], shape=[1, r])
    b.output("feat", feat, [1, r, nm])
    b.output("prob", prob, [1, r])
    return b.build()


def postnet_graph(c: dict, w: _Weights, bn_eps: float = 1e-5) -> tuple[dict, dict]:
    nm = c["num_mel_bins"]
    b = GraphBuilder("postnet.")
    mel = b.input("mel", "f32", [1, "frames", nm])
    h = b.node("transpose", [mel], perm=[0, 2, 1])
    n_layers = c["speech_decoder_postnet_layers"]
    for i in range(n_layers):
        n = f"speech_decoder_postnet.layers.{i}"
        cw = w[f"{n}.conv.weight"]
        k = cw.shape[-1]
        # eval-mode batch norm folded into the conv (it has no bias): y = (conv - mean) * g / sqrt(var + eps) + beta
        g = (w[f"{n}.batch_norm.weight"].astype(np.float64)
             / np.sqrt(w[f"{n}.batch_norm.running_var"].astype(np.float64) + bn_eps))
        fw = (cw.astype(np.float64) * g[:, None, None]).astype(np.float32)
        fb = (w[f"{n}.batch_norm.bias"] - w[f"{n}.batch_norm.running_mean"].astype(np.float64) * g).astype(np.float32)
        h = b.node("conv", [h, b.weight(f"layers.{i}.conv.weight", fw), b.weight(f"layers.{i}.conv.bias", fb)],
                   name=f"layers.{i}.conv", pads=[(k - 1) // 2, (k - 1) // 2])
        if i < n_layers - 1:
            h = b.node("tanh", [h])
    out = b.node("binary", [mel, b.node("transpose", [h], perm=[0, 2, 1])], fn="add")
    b.output("mel_out", out, [1, "frames", nm])
    return b.build()


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes otherwise."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated field")
            v, i = buf[i:i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def spm_pieces(path: str) -> dict[str, int]:
    """{piece: id} of a SentencePiece model file (ModelProto: field 1 = the pieces in id order, each a
    message whose field 1 is the piece's text)."""
    with open(path, "rb") as f:
        buf = f.read()
    out: dict[str, int] = {}
    n = 0
    try:
        for num, wt, v in _fields(buf):
            if num == 1 and wt == 2:
                piece = next((pv for pn, pw, pv in _fields(v) if pn == 1 and pw == 2), b"").decode("utf-8")
                out.setdefault(piece, n)
                n += 1
    except (ValueError, UnicodeDecodeError) as e:
        raise make_error(FormatError, f"{path}: not a SentencePiece model ({e})", section="vocab",
                         key=os.path.basename(path)) from None
    if not out:
        raise make_error(FormatError, f"{path}: a SentencePiece model without pieces", section="vocab",
                         key=os.path.basename(path))
    return out


def _char_vocab(folder: str, c: dict) -> dict[str, int] | None:
    """The tokenizer's character vocabulary ({piece: id}) from the folder's spm_char.model or
    vocab.json; None when the folder has neither (the model then takes token ids only)."""
    for name in VOCAB_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            v = spm_pieces(path) if name.endswith(".model") else _read_json(path, name)
            if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(i, int) and not isinstance(i, bool)
                                                  and 0 <= i < c["vocab_size"] for k, i in v.items()):
                raise make_error(FormatError, f"{path}: a JSON object {{piece: id}} with ids below vocab_size "
                                 f"{c['vocab_size']}", section="vocab", key=name)
            return {k: int(i) for k, i in v.items()}
    return None


def import_speecht5(folder: str, out: str, *, vocoder: str | None = None, progress: bool = True,
                    sample_rate: int | None = None) -> None:
    """Writes `out` from the SpeechT5ForTextToSpeech folder `folder` (module docstring). `vocoder`: a
    vocoder .onnx (mel [1, n_mels, frames] -> audio; its sample rate from `vocoder.onnx.json`, as
    `cyb-llm import --pipeline tts` reads it) added as the stage `vocoder`."""
    folder = os.fspath(folder)
    raw = _read_json(os.path.join(folder, "config.json"), "config.json")
    if not is_speecht5_config(raw):
        raise make_error(InvalidConfig, f"{folder}: config.json has model_type {raw.get('model_type')!r}, not "
                         f"{MODEL_TYPE!r}", field="model_type", reason="not SpeechT5")
    c = _check_config(raw)
    w = _Weights(folder)
    graphs: dict[str, dict] = {}
    weights: dict[str, np.ndarray] = {}
    for stage, fn in (("encoder", encoder_graph), ("decoder", decoder_graph), ("postnet", postnet_graph)):
        g, ws = fn(c, w)
        graphs[stage] = g
        weights.update(ws)
    records: list = [(k, "f32", list(v.shape), v) for k, v in weights.items()]
    tts: dict[str, Any] = {k: c[k] for k in ("num_mel_bins", "reduction_factor", "speaker_embedding_dim",
                                              "max_text_positions", "max_speech_positions", "pad_token_id", "eos_token_id", "vocab_size")}
    tts["speech_decoder_prenet_dropout"] = c["speech_decoder_prenet_dropout"]
    tts["decoder_layers"] = c["decoder_layers"]
    tts["decoder_heads"] = c["decoder_attention_heads"]
    tts["head_dim"] = c["hidden_size"] // c["decoder_attention_heads"]
    tts["sample_rate"] = 16000 if sample_rate is None else int(sample_rate)
    names = list(STAGES)
    sources = {s: "config.json + safetensors" for s in STAGES}
    if vocoder is not None:
        from .onnx_graph import _convert, read_sidecar, stage_graph, weight_records

        vg, vw, _cfg, _ = _convert(vocoder, None)
        ins = vg.get("inputs", [])
        shape = ins[0].get("shape", []) if len(ins) == 1 else []
        if len(ins) != 1 or ins[0].get("dtype") != "f32" or len(shape) != 3 or \
                isinstance(shape[1], int) and shape[1] != c["num_mel_bins"]:
            raise make_error(InvalidConfig, f"{vocoder}: a vocoder takes one f32 mel input [1, {c['num_mel_bins']}, "
                             f"frames]; its inputs: {[(i.get('name'), i.get('shape')) for i in ins]}",
                             field="vocoder", reason="not a vocoder of this model's mel")
        records.extend((f"vocoder.{n}", enc, shape, data) for n, enc, shape, data in weight_records(vg, vw, None))
        graphs["vocoder"], _ = stage_graph(vg, {}, "vocoder")
        names.append("vocoder")
        sources["vocoder"] = os.path.basename(os.fspath(vocoder))
        side = os.fspath(vocoder) + ".json"
        if sample_rate is None and os.path.isfile(side):
            sd = json.loads(read_sidecar(side))
            au = sd.get("audio") if isinstance(sd.get("audio"), dict) else {}
            sr = au.get("sample_rate", sd.get("sample_rate"))
            if not isinstance(sr, int) or isinstance(sr, bool) or sr <= 0:
                raise make_error(InvalidConfig, f"{side}: audio.sample_rate must be a positive integer, got {sr!r}",
                                 field="vocoder.sample_rate", reason="bad sample rate")
            tts["sample_rate"] = sr
    vocab = _char_vocab(folder, c)
    config = {"model_type": STAGES_MODEL_TYPE,
              "stages": {"pipeline": "tts", "names": names, "sources": sources},
              "tts": {"style": MODEL_TYPE, MODEL_TYPE: tts}}
    extra = {"char_vocab": json.dumps(vocab, ensure_ascii=False)} if vocab is not None else {}
    name = os.path.basename(os.path.normpath(folder))
    write_import(out, records, name=name, config=config, stages=graphs, extra_sections=extra, progress=progress)


__all__ = ["import_speecht5", "is_speecht5_config", "scaled_positions", "MODEL_TYPE", "STAGES"]
