"""A diffusers pipeline folder (model_index.json: text_encoder, tokenizer, unet, vae, scheduler) ->
one "graph-stages" `.model` (docs/diffusion.md "Importing a diffusers folder"; the file contract:
docs/graph.md "Stages"). Each stage's graph is emitted from the component's config.json with
GraphBuilder (graph_builder.py, its layer helpers), the weights read from safetensors with the
project's own reader (hf.py): torch, diffusers and transformers are never imported.

    import_diffusers("tiny-sd/", "sd.model", quantize="q8_0")

Stages: text_encoder (CLIPTextModel), unet (UNet2DConditionModel), vae_decoder and vae_encoder
(AutoencoderKL). Weights: read as f32 (f16 / bf16 folders converted); the weights of matmul, conv
and conv_transpose nodes that are exact f16 values (an f16 folder's) are written f16, every other
weight f32 (the norm and gather ops read f32); `quantize` puts the UNet's matmul weights in GGML
blocks (onnx_graph.weight_records).
"""
from __future__ import annotations

import glob
import json
import math
import os
from typing import Any

import numpy as np

from ..errors import FormatError, InvalidConfig, MissingTensor, TokenizerError
from .common import make_error, write_import
from .graph_builder import (GraphBuilder, add, attention, conv2d, group_norm, layer_norm, linear, masked_attention,
                            resize_nearest_like, upsample_nearest2x)
from .hf import QUANTIZE_TYPES, _read_json, _SafetensorsFile
from .onnx_graph import STAGES_MODEL_TYPE, stage_graph, weight_records

_FLOATS = {"F32": np.float32, "F16": np.float16, "BF16": None}
_REQUIRED = object()
#: model_index.json component -> the classes this importer reads
_CLASSES = {"text_encoder": ("CLIPTextModel",), "tokenizer": ("CLIPTokenizer", "CLIPTokenizerFast"),
            "unet": ("UNet2DConditionModel",), "vae": ("AutoencoderKL",),
            "scheduler": None}  # any scheduler: its config is kept as it is


class Component:
    """One subfolder of the pipeline: its config.json and the tensors of its *.safetensors files."""

    def __init__(self, root: str, sub: str, config_name: str = "config.json", weights: bool = True):
        self.sub = sub
        self.dir = os.path.join(root, sub)
        if not os.path.isdir(self.dir):
            raise make_error(FormatError, f"{root}: the diffusers folder has no subfolder '{sub}'",
                             section="source", key=sub)
        path = os.path.join(self.dir, config_name)
        if not os.path.isfile(path):
            raise make_error(FormatError, f"{self.dir}: no {config_name}", section="source", key=f"{sub}/{config_name}")
        self.config = _read_json(path, f"{sub}/{config_name}")
        if not isinstance(self.config, dict):
            raise make_error(InvalidConfig, f"{sub}/{config_name} is not a JSON object", field=f"{sub}/{config_name}",
                             reason="not an object")
        self.files: dict[str, _SafetensorsFile] = {}
        if weights:
            names = sorted(glob.glob(os.path.join(self.dir, "*.safetensors")))
            # diffusers' default (no variant) files first; an fp16-variant-only folder is read as it is
            plain = [n for n in names if len(os.path.basename(n).split(".")) == 2]
            names = plain or names
            if not names:
                raise make_error(FormatError, f"{self.dir}: no *.safetensors weights (the importer reads safetensors "
                                 "only)", section="source", key=f"{sub}/*.safetensors")
            for n in names:
                sf = _SafetensorsFile(n)
                for t in sf.entries:
                    self.files[t] = sf

    def cfg(self, key: str, default: Any = _REQUIRED) -> Any:
        if key in self.config and self.config[key] is not None:
            return self.config[key]
        if default is _REQUIRED:
            raise make_error(InvalidConfig, f"{self.sub}/config.json has no '{key}'", field=f"{self.sub}.{key}",
                             reason="missing")
        return default

    def int(self, key: str, default: Any = _REQUIRED) -> int:
        """A config value that must be an integer (InvalidConfig naming the key otherwise)."""
        v = self.cfg(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise make_error(InvalidConfig, f"{self.sub}/config.json: {key} = {v!r} is not an integer",
                             field=f"{self.sub}.{key}", reason="not an integer")
        return v

    def float(self, key: str, default: Any = _REQUIRED) -> float:
        """A config value that must be a finite number (InvalidConfig naming the key otherwise)."""
        v = self.cfg(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise make_error(InvalidConfig, f"{self.sub}/config.json: {key} = {v!r} is not a finite number",
                             field=f"{self.sub}.{key}", reason="not a number")
        return float(v)

    def expect(self, key: str, allowed: tuple, default: Any) -> Any:
        """A config key whose other values this importer does not implement: InvalidConfig naming it."""
        v = self.config.get(key, default)
        if v not in allowed:
            raise make_error(InvalidConfig, f"{self.sub}/config.json: {key} = {v!r} is not supported (supported: "
                             f"{', '.join(repr(a) for a in allowed)})", field=f"{self.sub}.{key}",
                             reason=f"unsupported value {v!r}")
        return v

    def has(self, name: str) -> bool:
        return name in self.files

    def t(self, name: str) -> np.ndarray:
        """The tensor `name` as f32 (f16 values are exact in f32; bf16 widened by a shift; f32 mapped)."""
        sf = self.files.get(name)
        if sf is None:
            raise make_error(MissingTensor, f"{self.sub}: tensor '{name}' is missing from its safetensors files",
                             name=f"{self.sub}/{name}", required_by="diffusers import")
        e = sf.entries[name]
        dt, shape = e.get("dtype"), e.get("shape")
        if dt not in _FLOATS or not isinstance(shape, list):
            raise make_error(FormatError, f"{self.sub}: tensor '{name}' has dtype {dt!r} (F32, F16 or BF16 expected)",
                             section="safetensors", key=f"{self.sub}/{name}")
        raw = sf.raw(name)
        n = int(np.prod(shape)) if shape else 1
        width = 4 if dt == "F32" else 2
        if raw.nbytes != n * width:
            raise make_error(FormatError, f"{self.sub}: tensor '{name}' holds {raw.nbytes} bytes, its shape {shape} "
                             f"and dtype {dt} need {n * width}", section="safetensors", key=f"{self.sub}/{name}")
        if dt == "BF16":
            a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F32":  # a read-only view of the mapped file: an f32 folder is never copied in memory
            a = raw.view(np.float32)
        else:
            a = raw.view(np.float16).astype(np.float32)
        return a.reshape(shape)

    def shape(self, name: str) -> list[int]:
        if name not in self.files:
            self.t(name)  # the MissingTensor error
        return list(self.files[name].entries[name]["shape"])


def _per_block(c: Component, key: str, value: Any, n: int) -> list[int]:
    """An int-or-list config value as one int per block."""
    vals = [value] * n if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(vals, (list, tuple)) and len(vals) == n and all(isinstance(v, int) and v > 0 for v in vals)):
        raise make_error(InvalidConfig, f"{c.sub}/config.json: {key} = {value!r} (a positive int or one per block, "
                         f"{n} blocks)", field=f"{c.sub}.{key}", reason="bad value")
    return list(vals)


def _block_channels(c: Component) -> list[int]:
    """block_out_channels: a non-empty list of positive ints (the block count)."""
    boc = c.cfg("block_out_channels")
    if not isinstance(boc, list) or not boc:
        raise make_error(InvalidConfig, f"{c.sub}/config.json: block_out_channels = {boc!r} (a list of channels per "
                         "block)", field=f"{c.sub}.block_out_channels", reason="bad value")
    return _per_block(c, "block_out_channels", boc, len(boc))


# ---- the shared layers of diffusers' models ----------------------------------------------------

class _Layers:
    """Emits diffusers' layers (ResnetBlock2D, Attention, Transformer2DModel, ...) into builder `b`
    from component `c`'s tensors."""

    def __init__(self, b: GraphBuilder, c: Component):
        self.b, self.c = b, c

    def linear(self, x: str, p: str, bias: bool = True) -> str:
        """A torch Linear `p` (with its bias unless `bias` is false)."""
        return linear(self.b, x, p, self.c.t(p + ".weight"), self.c.t(p + ".bias") if bias else None)

    def conv(self, x: str, p: str, stride: int = 1, pads: list[int] | None = None) -> str:
        w = self.c.t(p + ".weight")
        if w.ndim != 4:
            raise make_error(FormatError, f"{self.c.sub}: '{p}.weight' has shape {list(w.shape)}, a Conv2d weight "
                             "[out, in, kh, kw] expected", section="safetensors", key=f"{self.c.sub}/{p}.weight")
        return conv2d(self.b, x, p, w, self.c.t(p + ".bias"), stride, pads)

    def group_norm(self, x: str, p: str, groups: int, eps: float) -> str:
        return group_norm(self.b, x, p, self.c.t(p + ".weight"), self.c.t(p + ".bias"), groups, eps)

    def layer_norm(self, x: str, p: str, eps: float) -> str:
        return layer_norm(self.b, x, p, self.c.t(p + ".weight"), self.c.t(p + ".bias"), eps)

    def silu(self, x: str, name: str) -> str:
        return self.b.node("silu", [x], name=name)

    def resnet(self, x: str, p: str, temb_act: str | None, groups: int, eps: float, out_scale: float = 1.0) -> str:
        """ResnetBlock2D (time_embedding_norm "default"): norm1, silu, conv1 (+ time_emb_proj of the
        activated embedding, per channel), norm2, silu, conv2, + the input (conv_shortcut when the
        channels change), / output_scale_factor."""
        b = self.b
        h = self.conv(self.silu(self.group_norm(x, p + ".norm1", groups, eps), p + ".act1"), p + ".conv1")
        if temb_act is not None:
            t = self.linear(temb_act, p + ".time_emb_proj")
            h = add(b, h, b.node("unsqueeze", [t], name=p + ".temb4", axes=[2, 3]), p + ".temb_add")
        h = self.conv(self.silu(self.group_norm(h, p + ".norm2", groups, eps), p + ".act2"), p + ".conv2")
        w1 = self.c.shape(p + ".conv1.weight")
        if self.c.has(p + ".conv_shortcut.weight") or w1[0] != w1[1]:  # in != out channels: the 1x1 conv
            x = self.conv(x, p + ".conv_shortcut")
        out = b.node("add", [x, h], name=p + ".out")
        if out_scale != 1.0:
            out = b.node("binary", [out, b.const([out_scale])], name=p + ".rescale", fn="div")
        return out

    def attn(self, x: str, ctx: str, p: str, heads: int, qkv_bias: bool) -> str:
        """diffusers' Attention (to_q / to_k / to_v, biased when `qkv_bias`; to_out.0) over x [B, T, C],
        keys from ctx."""
        inner = self.c.shape(p + ".to_q.weight")[0]
        if inner % heads:
            raise make_error(InvalidConfig, f"{self.c.sub}: {p} has {inner} channels, not a multiple of its "
                             f"{heads} heads", field=f"{self.c.sub}.{p}", reason="heads")
        hd = inner // heads
        q, k, v = (self.linear(t, f"{p}.to_{w}", qkv_bias) for t, w in ((x, "q"), (ctx, "k"), (ctx, "v")))
        o = attention(self.b, q, k, v, heads, hd, hd ** -0.5, name=p + ".attention")
        return self.linear(o, p + ".to_out.0")

    def spatial_attn(self, x: str, p: str, groups: int, eps: float) -> str:
        """The VAE's mid-block Attention over x [B, C, H, W]: group_norm, the H*W positions as a
        sequence, one head of C (attention_head_dim = C), + the input."""
        b = self.b
        h = self.group_norm(x, p + ".group_norm", groups, eps)
        h = b.node("reshape", [h], name=p + ".seq", shape=[0, 0, -1])
        h = b.node("transpose", [h], name=p + ".btc", perm=[0, 2, 1])
        heads = 1  # AutoencoderKL's Encoder / Decoder: attention_head_dim = the channels
        h = self.attn(h, h, p, heads, qkv_bias=True)
        h = b.node("transpose", [h], name=p + ".bct", perm=[0, 2, 1])
        h = b.node("reshape_to", [h, b.node("shape", [x], name=p + ".dims")], name=p + ".image")
        return b.node("add", [h, x], name=p + ".out")

    def transformer2d(self, x: str, p: str, ehs: str, heads: int, n_layers: int, groups: int,
                      linear_proj: bool) -> str:
        """Transformer2DModel (continuous input, layer_norm blocks): group_norm (eps 1e-6), proj_in
        (1x1 conv, or Linear after the reshape), BasicTransformerBlocks, proj_out, + the input."""
        b = self.b
        h = self.group_norm(x, p + ".norm", groups, 1e-6)
        inner = self.c.shape(p + ".proj_in.weight")[0]
        if not linear_proj:
            h = self.conv(h, p + ".proj_in")
        h = b.node("reshape", [h], name=p + ".seq", shape=[0, 0, -1])
        h = b.node("transpose", [h], name=p + ".btc", perm=[0, 2, 1])          # [B, H*W, C]
        if linear_proj:
            h = self.linear(h, p + ".proj_in")
        for k in range(n_layers):
            h = self.basic_block(h, f"{p}.transformer_blocks.{k}", ehs, heads)
        if linear_proj:
            h = self.linear(h, p + ".proj_out")
        h = b.node("transpose", [h], name=p + ".bct", perm=[0, 2, 1])          # [B, inner, H*W]
        dims = b.node("concat", [b.node("shape", [x], name=p + ".n", range=[0, 1]), b.const([inner], "i64"),
                                 b.node("shape", [x], name=p + ".hw", range=[2, 4])], name=p + ".dims", axis=0)
        h = b.node("reshape_to", [h, dims], name=p + ".image")
        if not linear_proj:
            h = self.conv(h, p + ".proj_out")
        return b.node("add", [h, x], name=p + ".out")

    def basic_block(self, h: str, p: str, ehs: str, heads: int) -> str:
        """BasicTransformerBlock: self-attention, cross-attention over ehs, GEGLU feed forward, each
        after a LayerNorm (eps 1e-5) and added to the stream."""
        b = self.b
        n = self.layer_norm(h, p + ".norm1", 1e-5)
        h = b.node("add", [h, self.attn(n, n, p + ".attn1", heads, qkv_bias=False)], name=p + ".res1")
        n = self.layer_norm(h, p + ".norm2", 1e-5)
        h = b.node("add", [h, self.attn(n, ehs, p + ".attn2", heads, qkv_bias=False)], name=p + ".res2")
        n = self.layer_norm(h, p + ".norm3", 1e-5)
        return b.node("add", [h, self.geglu_ff(n, p + ".ff")], name=p + ".res3")

    def geglu_ff(self, x: str, p: str) -> str:
        """FeedForward with GEGLU: proj [2I, D] -> hidden (rows :I) * gelu(gate (rows I:)), net.2."""
        w = self.c.t(p + ".net.0.proj.weight")
        bias = self.c.t(p + ".net.0.proj.bias")
        inner = w.shape[0] // 2
        hid = linear(self.b, x, p + ".net.0.proj.hidden", w[:inner], bias[:inner])
        gate = linear(self.b, x, p + ".net.0.proj.gate", w[inner:], bias[inner:])
        g = self.b.node("geglu", [gate, hid], name=p + ".geglu", gelu_erf=True)
        return self.linear(g, p + ".net.2")


# ---- CLIP text encoder -------------------------------------------------------------------------

def text_encoder_graph(c: Component) -> tuple[dict, dict[str, np.ndarray]]:
    """CLIPTextModel -> last_hidden_state: token + position embeddings, pre-norm layers with causal
    self-attention (masked_attention over a [T, T] slice of a causal mask), the MLP (quick_gelu or
    gelu), final_layer_norm."""
    n_layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    eps = c.float("layer_norm_eps")
    act = c.expect("hidden_act", ("quick_gelu", "gelu", "gelu_new"), "quick_gelu")
    b = GraphBuilder()
    L = _Layers(b, c)
    # transformers < 5 saves CLIPTextModel's tensors under "text_model.", 5.x without the prefix
    p = "text_model." if c.has("text_model.embeddings.token_embedding.weight") else ""
    ids = b.input("input_ids", "i64", ["batch", "seq"])
    table = c.t(f"{p}embeddings.token_embedding.weight")
    pos_table = c.t(f"{p}embeddings.position_embedding.weight")
    D, P = table.shape[1], pos_table.shape[0]
    if D % heads:
        raise make_error(InvalidConfig, f"text_encoder: hidden size {D} is not a multiple of num_attention_heads "
                         f"{heads}", field="text_encoder.num_attention_heads", reason="heads")
    hd = D // heads
    h = b.node("gather", [b.weight(f"{p}embeddings.token_embedding.weight", table), ids], name="token_embedding")
    T = b.node("shape", [ids], name="seq_len", range=[1, 2])
    zero = b.const([0], "i64")
    pos = b.node("slice_dyn", [b.weight(f"{p}embeddings.position_embedding.weight", pos_table), zero, T, zero],
                 name="position_embedding")
    h = add(b, h, pos, "embeddings")
    causal = np.triu(np.full((P, P), np.finfo(np.float32).min, np.float32), 1)
    mask = b.node("slice_dyn", [b.weight("causal_mask", causal), b.const([0, 0], "i64"),
                                b.node("concat", [T, T], name="seq_seq", axis=0), b.const([0, 1], "i64")],
                  name="mask")
    for i in range(n_layers):
        lp = f"{p}encoder.layers.{i}"
        n = L.layer_norm(h, lp + ".layer_norm1", eps)
        q, k, v = (L.linear(n, f"{lp}.self_attn.{w}_proj") for w in "qkv")
        a = masked_attention(b, q, k, v, mask, heads, hd, hd ** -0.5, name=lp + ".self_attn")
        h = b.node("add", [h, L.linear(a, lp + ".self_attn.out_proj")], name=lp + ".res1")
        n = L.layer_norm(h, lp + ".layer_norm2", eps)
        m = L.linear(n, lp + ".mlp.fc1")
        if act == "quick_gelu":  # x * sigmoid(1.702 x)
            s = b.node("sigmoid", [b.node("binary", [m, b.const([1.702])], name=lp + ".mlp.qg", fn="mul")],
                       name=lp + ".mlp.sig")
            m = b.node("binary", [m, s], name=lp + ".mlp.act", fn="mul")
        else:
            m = b.node("gelu" if act == "gelu" else "gelu_tanh", [m], name=lp + ".mlp.act")
        h = b.node("add", [h, L.linear(m, lp + ".mlp.fc2")], name=lp + ".res2")
    h = L.layer_norm(h, f"{p}final_layer_norm", eps)
    b.output("last_hidden_state", h, ["batch", "seq", D])
    return b.build()


# ---- UNet --------------------------------------------------------------------------------------

def timestep_embedding(b: GraphBuilder, t: str, dim: int, flip_sin_to_cos: bool, freq_shift: float) -> str:
    """diffusers' Timesteps: t [B] -> [B, dim], sin and cos of t * exp(-ln(10000) k / (dim/2 - shift)),
    k < dim/2 ([cos, sin] when flip_sin_to_cos)."""
    half = dim // 2
    exponent = np.float32(-math.log(10000)) * np.arange(half, dtype=np.float32)
    freqs = np.exp(exponent / np.float32(half - freq_shift)).astype(np.float32)
    arg = b.node("binary", [b.node("unsqueeze", [t], name="time_proj.t", axes=[1]), b.const(freqs)],
                 name="time_proj.arg", fn="mul")
    sin = b.node("unary", [arg], name="time_proj.sin", fn="sin")
    cos = b.node("unary", [arg], name="time_proj.cos", fn="cos")
    return b.node("concat", [cos, sin] if flip_sin_to_cos else [sin, cos], name="time_proj", axis=-1)


_DOWN = ("CrossAttnDownBlock2D", "DownBlock2D")
_UP = ("CrossAttnUpBlock2D", "UpBlock2D")


def unet_graph(c: Component) -> tuple[dict, dict[str, np.ndarray]]:
    """UNet2DConditionModel (SD 1.x / 2.x layout): time embedding, conv_in, down blocks (their outputs
    kept for the skips), the cross-attention mid block, up blocks (each resnet reads the skip
    concatenated on the channels), group_norm, silu, conv_out."""
    downs, ups = c.cfg("down_block_types"), c.cfg("up_block_types")
    boc = _block_channels(c)
    for key, types, allowed in (("down_block_types", downs, _DOWN), ("up_block_types", ups, _UP)):
        if not isinstance(types, list) or len(types) != len(boc) or any(t not in allowed for t in types):
            raise make_error(InvalidConfig, f"unet/config.json: {key} = {types!r} (one of {', '.join(allowed)} per "
                             f"block, {len(boc)} blocks)", field=f"unet.{key}", reason="unsupported block")
    n = len(boc)
    for key, allowed, default in (("time_embedding_type", ("positional",), "positional"),
                                  ("resnet_time_scale_shift", ("default",), "default"),
                                  ("act_fn", ("silu",), "silu"), ("class_embed_type", (None,), None),
                                  ("addition_embed_type", (None,), None), ("encoder_hid_dim", (None,), None),
                                  ("center_input_sample", (False,), False), ("dual_cross_attention", (False,), False),
                                  ("only_cross_attention", (False,), False),
                                  ("mid_block_type", ("UNetMidBlock2DCrossAttn",), "UNetMidBlock2DCrossAttn"),
                                  ("conv_in_kernel", (3,), 3), ("conv_out_kernel", (3,), 3),
                                  ("time_cond_proj_dim", (None,), None), ("attention_type", ("default",), "default")):
        c.expect(key, allowed, default)
    groups, eps = c.int("norm_num_groups"), c.float("norm_eps")
    layers = _per_block(c, "layers_per_block", c.cfg("layers_per_block"), n)
    heads = _per_block(c, "attention_head_dim", c.cfg("num_attention_heads", None) or c.cfg("attention_head_dim"), n)
    tlayers = _per_block(c, "transformer_layers_per_block", c.cfg("transformer_layers_per_block", 1), n)
    linear_proj = bool(c.cfg("use_linear_projection", False))
    down_pad = c.int("downsample_padding", 1)
    mid_scale = c.float("mid_block_scale_factor", 1)
    cross = c.int("cross_attention_dim")
    in_ch, out_ch = c.int("in_channels"), c.int("out_channels")

    b = GraphBuilder()
    L = _Layers(b, c)
    sample = b.input("sample", "f32", ["batch", in_ch, "height", "width"])
    t = b.input("timestep", "f32", ["batch"])
    ehs = b.input("encoder_hidden_states", "f32", ["batch", "seq", cross])

    temb = timestep_embedding(b, t, int(boc[0]), bool(c.cfg("flip_sin_to_cos")), c.float("freq_shift"))
    temb = L.linear(L.silu(L.linear(temb, "time_embedding.linear_1"), "time_embedding.act"), "time_embedding.linear_2")
    temb_act = L.silu(temb, "temb_act")  # every resnet's nonlinearity(temb), computed once

    h = L.conv(sample, "conv_in")
    skips = [h]
    for i, kind in enumerate(downs):
        p = f"down_blocks.{i}"
        for j in range(layers[i]):
            h = L.resnet(h, f"{p}.resnets.{j}", temb_act, groups, eps)
            if kind == "CrossAttnDownBlock2D":
                h = L.transformer2d(h, f"{p}.attentions.{j}", ehs, heads[i], tlayers[i], groups, linear_proj)
            skips.append(h)
        if i < n - 1:
            h = L.conv(h, f"{p}.downsamplers.0.conv", stride=2, pads=[down_pad] * 4)
            skips.append(h)

    h = L.resnet(h, "mid_block.resnets.0", temb_act, groups, eps, mid_scale)
    h = L.transformer2d(h, "mid_block.attentions.0", ehs, heads[-1], tlayers[-1], groups, linear_proj)
    h = L.resnet(h, "mid_block.resnets.1", temb_act, groups, eps, mid_scale)

    r_layers, r_heads, r_tlayers = layers[::-1], heads[::-1], tlayers[::-1]
    rev_t = c.cfg("reverse_transformer_layers_per_block", None)
    if rev_t is not None:
        r_tlayers = [int(x[0]) if isinstance(x, list) else int(x) for x in rev_t]
    for i, kind in enumerate(ups):
        p = f"up_blocks.{i}"
        for j in range(r_layers[i] + 1):
            h = b.node("concat", [h, skips.pop()], name=f"{p}.skip{j}", axis=1)
            h = L.resnet(h, f"{p}.resnets.{j}", temb_act, groups, eps)
            if kind == "CrossAttnUpBlock2D":
                h = L.transformer2d(h, f"{p}.attentions.{j}", ehs, r_heads[i], r_tlayers[i], groups, linear_proj)
        if i < n - 1:  # to the size of the skip read next (2x, or what an odd size went down from), as diffusers
            h = L.conv(resize_nearest_like(b, h, skips[-1], f"{p}.upsample"), f"{p}.upsamplers.0.conv")

    h = L.silu(L.group_norm(h, "conv_norm_out", groups, eps), "conv_act")
    h = L.conv(h, "conv_out")
    b.output("out_sample", h, ["batch", out_ch, "height", "width"])
    return b.build()


# ---- VAE ---------------------------------------------------------------------------------------

def _vae_mid(L: _Layers, h: str, p: str, groups: int) -> str:
    """UNetMidBlock2D of the VAE: resnet, attention (unless mid_block_add_attention is false), resnet."""
    h = L.resnet(h, p + ".resnets.0", None, groups, 1e-6)
    if L.c.cfg("mid_block_add_attention", True):
        h = L.spatial_attn(h, p + ".attentions.0", groups, 1e-6)
    return L.resnet(h, p + ".resnets.1", None, groups, 1e-6)


def _vae_check(c: Component) -> tuple[int, int, int]:
    boc = _block_channels(c)
    c.expect("act_fn", ("silu",), "silu")
    c.expect("norm_type", ("group",), "group")
    return len(boc), c.int("layers_per_block"), c.int("norm_num_groups")


def vae_decoder_graph(c: Component) -> tuple[dict, dict[str, np.ndarray]]:
    """AutoencoderKL.decode: post_quant_conv, decoder (conv_in, mid block, up blocks of
    layers_per_block + 1 resnets with nearest 2x upsampling, group_norm, silu, conv_out)."""
    n, layers, groups = _vae_check(c)
    for t in c.cfg("up_block_types"):
        if t != "UpDecoderBlock2D":
            raise make_error(InvalidConfig, f"vae/config.json: up block {t!r} (UpDecoderBlock2D expected)",
                             field="vae.up_block_types", reason="unsupported block")
    lat = c.int("latent_channels")
    b = GraphBuilder()
    L = _Layers(b, c)
    h = b.input("latent_sample", "f32", ["batch", lat, "height", "width"])
    if c.cfg("use_post_quant_conv", True):
        h = L.conv(h, "post_quant_conv")
    h = L.conv(h, "decoder.conv_in")
    h = _vae_mid(L, h, "decoder.mid_block", groups)
    for i in range(n):
        p = f"decoder.up_blocks.{i}"
        for j in range(layers + 1):
            h = L.resnet(h, f"{p}.resnets.{j}", None, groups, 1e-6)
        if i < n - 1:
            h = L.conv(upsample_nearest2x(b, h, f"{p}.upsample"), f"{p}.upsamplers.0.conv")
    h = L.conv(L.silu(L.group_norm(h, "decoder.conv_norm_out", groups, 1e-6), "decoder.conv_act"), "decoder.conv_out")
    b.output("sample", h, ["batch", c.int("out_channels"), "image_height", "image_width"])
    return b.build()


def vae_encoder_graph(c: Component) -> tuple[dict, dict[str, np.ndarray]]:
    """AutoencoderKL.encode: encoder (conv_in, down blocks whose downsampler pads right and bottom by
    one and convolves with stride 2, mid block, group_norm, silu, conv_out), quant_conv, the moments
    split into mean and logvar (clamped to [-30, 20] as DiagonalGaussianDistribution does)."""
    n, layers, groups = _vae_check(c)
    for t in c.cfg("down_block_types"):
        if t != "DownEncoderBlock2D":
            raise make_error(InvalidConfig, f"vae/config.json: down block {t!r} (DownEncoderBlock2D expected)",
                             field="vae.down_block_types", reason="unsupported block")
    lat = c.int("latent_channels")
    b = GraphBuilder()
    L = _Layers(b, c)
    h = b.input("sample", "f32", ["batch", c.int("in_channels"), "image_height", "image_width"])
    h = L.conv(h, "encoder.conv_in")
    for i in range(n):
        p = f"encoder.down_blocks.{i}"
        for j in range(layers):
            h = L.resnet(h, f"{p}.resnets.{j}", None, groups, 1e-6)
        if i < n - 1:
            h = L.conv(h, f"{p}.downsamplers.0.conv", stride=2, pads=[0, 0, 1, 1])
    h = _vae_mid(L, h, "encoder.mid_block", groups)
    h = L.conv(L.silu(L.group_norm(h, "encoder.conv_norm_out", groups, 1e-6), "encoder.conv_act"), "encoder.conv_out")
    if c.cfg("use_quant_conv", True):
        h = L.conv(h, "quant_conv")
    mean = b.node("slice", [h], name="mean_", axis=1, range=[0, lat, 1])
    logvar = b.node("slice", [h], name="logvar_", axis=1, range=[lat, 2 * lat, 1])
    logvar = b.node("unary", [logvar], name="logvar_clamp", fn="clip", alpha=-30.0, beta=20.0)
    b.output("mean", mean, ["batch", lat, "height", "width"])
    b.output("logvar", logvar, ["batch", lat, "height", "width"])
    return b.build()


# ---- tokenizer ---------------------------------------------------------------------------------

def _token_text(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def clip_tokenizer(root: str) -> tuple[str, dict]:
    """The tokenizer subfolder as an HF tokenizer.json (its own when saved, else built from vocab.json
    and merges.txt as CLIP's fast tokenizer is) and its config {bos/eos/pad_token_id, model_max_length}."""
    d = os.path.join(root, "tokenizer")
    if not os.path.isdir(d):
        raise make_error(FormatError, f"{root}: the diffusers folder has no subfolder 'tokenizer'", section="source",
                         key="tokenizer")
    tc_path = os.path.join(d, "tokenizer_config.json")
    tc = _read_json(tc_path, "tokenizer/tokenizer_config.json") if os.path.isfile(tc_path) else {}
    tj_path = os.path.join(d, "tokenizer.json")
    if os.path.isfile(tj_path):
        with open(tj_path, encoding="utf-8") as f:
            text = f.read()
    else:
        vp, mp = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
        for path in (vp, mp):
            if not os.path.isfile(path):
                raise make_error(FormatError, f"{d}: neither tokenizer.json nor {os.path.basename(path)}",
                                 section="source", key=f"tokenizer/{os.path.basename(path)}")
        vocab = _read_json(vp, "tokenizer/vocab.json")
        with open(mp, encoding="utf-8") as f:
            lines = f.read().split("\n")
        # merges.txt: a "#version" first line, then one merge per line; CLIP's file lists more than it uses:
        # CLIPTokenizer keeps lines 1 .. 49152 - 256 - 2 of it
        merges = [ln for ln in lines[1:49152 - 256 - 2 + 1] if ln.strip()]
        unk = _token_text(tc.get("unk_token")) or "<|endoftext|>"
        bos = _token_text(tc.get("bos_token")) or "<|startoftext|>"
        eos = _token_text(tc.get("eos_token")) or "<|endoftext|>"
        for tok in (unk, bos, eos):
            if tok not in vocab:
                raise make_error(TokenizerError, f"tokenizer/vocab.json has no {tok!r}")
        specials = sorted({unk, bos, eos}, key=lambda s: vocab[s])
        tj = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": True, "special": True} for s in specials],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
                {"type": "Lowercase"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|"
                                                       r"[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"},
                 "behavior": "Removed", "invert": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
            "post_processor": {"type": "RobertaProcessing", "sep": [eos, vocab[eos]], "cls": [bos, vocab[bos]],
                               "trim_offsets": False, "add_prefix_space": False},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "</w>", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges},
        }
        text = json.dumps(tj, ensure_ascii=False)
    try:
        from tokenizers import Tokenizer as _HFTokenizer

        tok = _HFTokenizer.from_str(text)
    except Exception as e:  # the tokenizers library's own error types
        raise make_error(TokenizerError, f"tokenizer/: the CLIP tokenizer does not load: {e}") from None

    def tid(key: str, fallback: str) -> int:
        s = _token_text(tc.get(key)) or fallback
        i = tok.token_to_id(s)
        if i is None:
            raise make_error(TokenizerError, f"tokenizer/: {key} {s!r} is not in the vocabulary")
        return int(i)

    eos = tid("eos_token", "<|endoftext|>")
    conf = {"bos_token_id": tid("bos_token", "<|startoftext|>"), "eos_token_id": eos,
            "pad_token_id": tid("pad_token", "<|endoftext|>") if tc.get("pad_token") else eos,
            "model_max_length": _max_length(tc)}
    return text, conf


def _max_length(tc: dict) -> int:
    """tokenizer_config.json's model_max_length (77 for CLIP; transformers writes a huge number when unset)."""
    v = tc.get("model_max_length", 77)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1 << 20:
        return 77
    return int(v)


# ---- the import --------------------------------------------------------------------------------

def _model_index(root: str) -> dict:
    path = os.path.join(root, "model_index.json")
    idx = _read_json(path, "model_index.json")
    if not isinstance(idx, dict):
        raise make_error(InvalidConfig, "model_index.json is not a JSON object", field="model_index.json",
                         reason="not an object")
    for comp, classes in _CLASSES.items():
        entry = idx.get(comp)
        if not (isinstance(entry, list) and len(entry) == 2 and entry[1]):
            raise make_error(InvalidConfig, f"model_index.json has no component '{comp}' (a [library, class] pair)",
                             field=f"model_index.{comp}", reason="missing")
        if classes is not None and entry[1] not in classes:
            raise make_error(InvalidConfig, f"model_index.json: {comp} is a {entry[1]} (the importer reads "
                             f"{' or '.join(classes)})", field=f"model_index.{comp}", reason="unsupported class")
    return idx


def diffusers_stages(root: str, quantize: str | None = None
                     ) -> tuple[dict, dict[str, dict], list[tuple[str, str, list[int], Any]], str]:
    """(config, {stage: graph}, tensor records, tokenizer.json text) of the pipeline folder `root`."""
    if quantize is not None and quantize.lower() not in QUANTIZE_TYPES:
        raise make_error(InvalidConfig, f"--quantize {quantize!r} is not available (choices: {', '.join(QUANTIZE_TYPES)})",
                         field="quantize", reason="unknown type")
    idx = _model_index(root)
    te = Component(root, "text_encoder")
    unet = Component(root, "unet")
    vae = Component(root, "vae")
    sched = Component(root, "scheduler", "scheduler_config.json", weights=False)
    tok_json, tok_conf = clip_tokenizer(root)
    emitted = {"text_encoder": (te, text_encoder_graph(te), None),
               "unet": (unet, unet_graph(unet), quantize),
               "vae_decoder": (vae, vae_decoder_graph(vae), None),
               "vae_encoder": (vae, vae_encoder_graph(vae), None)}
    graphs: dict[str, dict] = {}
    records: list = []
    for stage, (_c, (graph, weights), q) in emitted.items():
        records.extend((f"{stage}.{n}", enc, shape, data) for n, enc, shape, data in weight_records(graph, weights, q))
        graphs[stage], _ = stage_graph(graph, {}, stage)
    boc = vae.cfg("block_out_channels")
    if isinstance(unet.cfg("sample_size"), list):  # [h, w]: the height
        unet.config["sample_size"] = unet.config["sample_size"][0]
    sample_size = unet.int("sample_size")
    cross = unet.int("cross_attention_dim")
    hidden = te.int("hidden_size")
    if cross != hidden:
        raise make_error(InvalidConfig, f"unet cross_attention_dim {cross} != text_encoder hidden_size {hidden}",
                         field="unet.cross_attention_dim", reason="does not match the text encoder")
    config = {
        "model_type": STAGES_MODEL_TYPE,
        "stages": {"pipeline": "diffusion", "names": list(graphs), "sources": {"text_encoder": "text_encoder", "unet": "unet",
                                                                "vae_decoder": "vae", "vae_encoder": "vae"}},
        "diffusion": {"vae_scaling_factor": vae.float("scaling_factor"),
                      "vae_scale_factor": 2 ** (len(boc) - 1),
                      "latent_channels": vae.int("latent_channels"),
                      "sample_size": sample_size,
                      # the tokenizer's length, at most the text encoder's positions
                      "max_text_length": min(tok_conf["model_max_length"], te.int("max_position_embeddings")),
                      "pad_token_id": tok_conf["pad_token_id"],
                      "scheduler": json.dumps(sched.config),
                      "source": {"pipeline_class": str(idx.get("_class_name", "")),
                                 "diffusers_version": str(idx.get("_diffusers_version", ""))}},
        "tokenizer": {k: tok_conf[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }
    if quantize:
        config["stages"]["quantize"] = quantize.lower()
    return config, graphs, records, tok_json


def import_diffusers(src: str, out: str, *, quantize: str | None = None, progress: bool = True) -> None:
    """Writes `out`, a "graph-stages" `.model` with the stages text_encoder, unet, vae_decoder and
    vae_encoder and the CLIP tokenizer, from the diffusers folder `src`; nothing is written when the
    import fails."""
    root = os.fspath(src)
    config, graphs, records, tok_json = diffusers_stages(root, quantize)
    name = os.path.basename(os.path.normpath(root))
    write_import(out, records, name=name, config=config, stages=graphs, tokenizer_json=tok_json, progress=progress)


__all__ = ["import_diffusers", "diffusers_stages", "Component", "text_encoder_graph", "unet_graph",
           "vae_decoder_graph", "vae_encoder_graph", "clip_tokenizer", "timestep_embedding"]
