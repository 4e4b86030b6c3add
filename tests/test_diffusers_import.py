"""The diffusers-folder importer (python/cyb_llm/convert/diffusers.py, docs/diffusion.md "Importing a
diffusers folder"): a tiny random Stable Diffusion pipeline built here from configs with diffusers
and transformers (the oracles; the importer never imports them), saved with save_pretrained,
imported with `cyb-llm import`'s import_model, each stage run on our runtime against the module it
came from: the text encoder's last_hidden_state, one UNet call (batch 2 as classifier-free guidance
runs it, several timesteps), the VAE decode and encode, all within `diffusers-import` of max |ref|;
the tokenizer's ids against CLIPTokenizer's; the f16 folder variant; hostile folders."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

import cyb_llm  # noqa: E402
from cyb_llm.convert import detect_source, import_model  # noqa: E402
from cyb_llm.errors import FormatError, InvalidConfig, MissingTensor  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402
from cyb_llm.named_arrays import load_stage  # noqa: E402
from cyb_llm.tokenizer import tokenizer_from_modelfile  # noqa: E402
from tolerances import tolerance  # noqa: E402

PROMPTS = ["a photo of the cat", "The  Cat and the dog!", "photo 42, a cat's hat", ""]


def _vocab() -> tuple[dict, list[str]]:
    """A tiny CLIP BPE vocabulary: the 256 byte characters (alone and word-final), a few merges, the
    two special tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    chars = [chr(c) for c in cs]
    merges = ["t h", "th e</w>", "a n", "an d</w>", "c a", "ca t</w>", "o n", "p h", "ph o", "pho t", "phot o</w>",
              "h a", "ha t</w>", "o f</w>", "d o", "do g</w>"]
    vocab = chars + [c + "</w>" for c in chars]
    for m in merges:
        if m.replace(" ", "") not in vocab:
            vocab.append(m.replace(" ", ""))
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(vocab)}, merges


def _build(folder: str, dtype=torch.float32) -> None:
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    vocab, merges = _vocab()
    tdir = os.path.join(folder, "tokenizer_src")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(tdir, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = CLIPTokenizer(vocab=os.path.join(tdir, "vocab.json"), merges=os.path.join(tdir, "merges.txt"),
                        model_max_length=77)
    te = CLIPTextModel(CLIPTextConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=77, bos_token_id=len(vocab) - 2,
                                      eos_token_id=len(vocab) - 1, pad_token_id=1, layer_norm_eps=1e-5))
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=2, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                                attention_head_dim=(2, 4), norm_num_groups=32)
    vae = AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        latent_channels=4, norm_num_groups=32, layers_per_block=1, sample_size=16)
    with torch.no_grad():  # random weights everywhere, not the zero init of some layers (conv_out, ...)
        for m in (unet, vae, te):
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    pipe = diffusers.StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                             scheduler=DDIMScheduler(), safety_checker=None, feature_extractor=None,
                                             requires_safety_checker=False)
    pipe.to(dtype)
    pipe.save_pretrained(folder)
    shutil.rmtree(tdir)


@pytest.fixture(scope="module")
def sd(tmp_path_factory):
    """(folder, imported .model, the pipeline loaded back by diffusers in f32)."""
    folder = str(tmp_path_factory.mktemp("tiny_sd") / "pipe")
    _build(folder)
    out = os.path.join(os.path.dirname(folder), "sd.model")
    import_model(folder, out, progress=False)
    pipe = diffusers.StableDiffusionPipeline.from_pretrained(folder, safety_checker=None, requires_safety_checker=False)
    return folder, out, pipe


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {"ids": torch.randint(0, 520, (2, 9), generator=g),
            "latent": torch.randn(2, 4, 8, 8, generator=g),
            "ehs": torch.randn(2, 9, 32, generator=g),
            "image": torch.rand(2, 3, 16, 16, generator=g) * 2 - 1}


TIMESTEPS = ([999.0, 999.0], [1.0, 500.0], [0.0, 37.5])


def check_stages(path: str, pipe, backend: str = "cpu", timesteps=TIMESTEPS) -> dict[str, float]:
    """Each stage of `path` vs `pipe`'s module on the same inputs: the relative max error per stage."""
    x = _inputs()
    errs = {}
    with torch.no_grad():
        ref = pipe.text_encoder(x["ids"]).last_hidden_state.numpy()
        ours = load_stage(path, "text_encoder", backend=backend).run({"input_ids": x["ids"].numpy()})
        errs["text_encoder"] = _rel(ours["last_hidden_state"], ref)
        unet = load_stage(path, "unet", backend=backend)
        for t in timesteps:
            ts = torch.tensor(t)
            ref = pipe.unet(x["latent"], ts, encoder_hidden_states=x["ehs"]).sample.numpy()
            ours = unet.run({"sample": x["latent"].numpy(), "timestep": ts.numpy(),
                             "encoder_hidden_states": x["ehs"].numpy()})["out_sample"]
            errs[f"unet t={t}"] = _rel(ours, ref)
        ref = pipe.vae.decode(x["latent"]).sample.numpy()
        ours = load_stage(path, "vae_decoder", backend=backend).run({"latent_sample": x["latent"].numpy()})["sample"]
        errs["vae_decoder"] = _rel(ours, ref)
        dist = pipe.vae.encode(x["image"]).latent_dist
        ours = load_stage(path, "vae_encoder", backend=backend).run({"sample": x["image"].numpy()})
        errs["vae_encoder mean"] = _rel(ours["mean"], dist.mean.numpy())
        errs["vae_encoder logvar"] = _rel(ours["logvar"], dist.logvar.numpy())
    return errs


def test_stages_match_diffusers(sd):
    folder, path, pipe = sd
    errs = check_stages(path, pipe)
    print("max error / max |ref|:", {k: f"{v:.1e}" for k, v in errs.items()})
    bad = {k: v for k, v in errs.items() if not v <= tolerance("diffusers-import")}
    assert not bad, bad


def test_stages_on_wgpu(sd):
    """The same stages on wgpu+rs (lavapipe in CI), one UNet call: every f32 op on the GPU; the
    size arithmetic (shape, concat of dims, constant_of_shape, the resize indices), the embeddings'
    gather and slice_dyn, the upsamplers' gather / expand fall back to the cpu (dispatch records)."""
    from placement import wgpu_skip_reason

    reason = wgpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    folder, path, pipe = sd
    errs = check_stages(path, pipe, backend="wgpu+rs", timesteps=TIMESTEPS[1:2])
    print("wgpu+rs max error / max |ref|:", {k: f"{v:.1e}" for k, v in errs.items()})
    bad = {k: v for k, v in errs.items() if not v <= tolerance("diffusers-import")}
    assert not bad, bad


def test_file_contract(sd):
    folder, path, pipe = sd
    mf = ModelFile(path)
    cfg = mf.config
    assert cfg["model_type"] == "graph-stages"
    assert cfg["stages"]["pipeline"] == "diffusion"
    assert cfg["stages"]["names"] == ["text_encoder", "unet", "vae_decoder", "vae_encoder"]
    d = cfg["diffusion"]
    assert d["vae_scaling_factor"] == pipe.vae.config.scaling_factor
    assert d["vae_scale_factor"] == 2 and d["latent_channels"] == 4 and d["sample_size"] == 8
    assert d["max_text_length"] == 77 and d["pad_token_id"] == pipe.tokenizer.pad_token_id
    assert json.loads(d["scheduler"]) == json.load(open(os.path.join(folder, "scheduler", "scheduler_config.json")))
    assert detect_source(folder) == "diffusers"


def test_tokenizer_ids(sd, tmp_path):
    folder, path, pipe = sd
    ours = tokenizer_from_modelfile(ModelFile(path))
    for p in PROMPTS:
        assert ours.encode(p) == pipe.tokenizer(p).input_ids, p
    # a folder saved with vocab.json + merges.txt only: the tokenizer.json is built by the importer
    from cyb_llm.convert.diffusers import clip_tokenizer

    only = tmp_path / "pipe"
    shutil.copytree(os.path.join(folder, "tokenizer"), only / "tokenizer")
    vocab, merges = _vocab()
    (only / "tokenizer" / "tokenizer.json").unlink()
    (only / "tokenizer" / "vocab.json").write_text(json.dumps(vocab))
    (only / "tokenizer" / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    text, conf = clip_tokenizer(str(only))
    built = cyb_llm.tokenizer.Tokenizer.from_json(text, conf)
    for p in PROMPTS:
        assert built.encode(p) == pipe.tokenizer(p).input_ids, p


def test_f16_folder(sd, tmp_path):
    """An f16 folder: its matmul and conv weights stay f16 in the file (two bytes a value; the file
    smaller than the f32 folder's), the norm and embedding weights are widened to f32; the stages match diffusers run in
    f32 on the same (f16-rounded) weights, on the cpu and on wgpu+rs (its f16 conv kernels)."""
    from placement import wgpu_skip_reason

    folder16 = str(tmp_path / "pipe16")
    _build(folder16, torch.float16)
    out = str(tmp_path / "sd16.model")
    import_model(folder16, out, progress=False)
    mf = ModelFile(out)
    encs = {n: t.encoding for n, t in mf.tensors.items()}
    assert encs["unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight"] == "f16"
    assert encs["text_encoder.encoder.layers.0.mlp.fc1.weight"] == "f16"
    convs = [n for n in encs if n.endswith(("conv_in.weight", "conv1.weight", "conv2.weight", "conv_out.weight",
                                            "conv_shortcut.weight", "downsamplers.0.conv.weight",
                                            "upsamplers.0.conv.weight", "quant_conv.weight"))]
    assert len(convs) > 20 and all(encs[n] == "f16" for n in convs), {n: encs[n] for n in convs}
    assert encs["unet.conv_in.bias"] == "f32" and encs["unet.conv_norm_out.weight"] == "f32"
    assert encs["text_encoder.embeddings.token_embedding.weight"] == "f32"
    assert all(mf.tensor_bytes(n).nbytes == 2 * int(np.prod(mf.tensors[n].shape)) for n in convs)
    assert mf.weights_size < ModelFile(sd[1]).weights_size
    pipe = diffusers.StableDiffusionPipeline.from_pretrained(folder16, safety_checker=None,
                                                             requires_safety_checker=False).to(torch.float32)
    errs = check_stages(out, pipe, timesteps=TIMESTEPS[:1])
    if wgpu_skip_reason() is None:
        errs.update({f"wgpu+rs {k}": v for k, v in check_stages(out, pipe, backend="wgpu+rs",
                                                                timesteps=TIMESTEPS[1:2]).items()})
        dec = load_stage(out, "vae_decoder", backend="wgpu+rs")
        dec.run({"latent_sample": _inputs()["latent"].numpy()})
        convs = [r for r in dec.dispatch_records if r["op"] == "conv"]
        assert convs and all(r["backend"] == "wgpu+rs" and not r["fallback"] for r in convs), convs
    print("max error / max |ref|:", {k: f"{v:.1e}" for k, v in errs.items()})
    bad = {k: v for k, v in errs.items() if not v <= tolerance("diffusers-import")}
    assert not bad, bad


def test_quantized_unet(sd, tmp_path):
    """--quantize q8_0: the UNet's matmul weights in blocks, the other stages as they were."""
    folder, path, pipe = sd
    out = str(tmp_path / "q8.model")
    import_model(folder, out, quantize="q8_0", progress=False)
    mf = ModelFile(out)
    assert mf.config["stages"]["quantize"] == "q8_0"
    encs = {n: t.encoding for n, t in mf.tensors.items()}
    assert encs["unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight"] == "q8_0"
    assert encs["unet.time_embedding.linear_1.weight"] == "q8_0"
    assert encs["unet.conv_in.weight"] == "f32"
    assert encs["text_encoder.encoder.layers.0.mlp.fc1.weight"] == "f32"
    x = _inputs()
    unet = load_stage(out, "unet")
    ours = unet.run({"sample": x["latent"].numpy(), "timestep": np.array([10.0, 500.0], np.float32),
                     "encoder_hidden_states": x["ehs"].numpy()})["out_sample"]
    with torch.no_grad():
        ref = pipe.unet(x["latent"], torch.tensor([10.0, 500.0]), encoder_hidden_states=x["ehs"]).sample.numpy()
    assert ours.shape == ref.shape and np.isfinite(ours).all()


def _copy(folder: str, tmp_path) -> str:
    dst = str(tmp_path / "hostile")
    shutil.copytree(folder, dst)
    return dst


def _edit_json(path: str, fn) -> None:
    with open(path) as f:
        obj = json.load(f)
    fn(obj)
    with open(path, "w") as f:
        json.dump(obj, f)


def _drop_tensor(path: str, name: str) -> None:
    from safetensors.numpy import load_file, save_file

    ts = load_file(path)
    del ts[name]
    save_file(ts, path)


def test_hostile_folders(sd, tmp_path):
    """A missing subfolder, config key or tensor, or an unsupported block: a clear error naming it,
    and no output file."""
    folder, path, pipe = sd
    out = str(tmp_path / "x.model")
    cases = [
        (lambda d: shutil.rmtree(os.path.join(d, "vae")), FormatError, "'vae'"),
        (lambda d: os.unlink(os.path.join(d, "unet", "config.json")), FormatError, "unet"),
        (lambda d: _edit_json(os.path.join(d, "unet", "config.json"), lambda c: c.pop("block_out_channels")),
         InvalidConfig, "block_out_channels"),
        (lambda d: _edit_json(os.path.join(d, "text_encoder", "config.json"), lambda c: c.pop("num_hidden_layers")),
         InvalidConfig, "num_hidden_layers"),
        (lambda d: _edit_json(os.path.join(d, "unet", "config.json"),
                              lambda c: c.update(down_block_types=["SimpleCrossAttnDownBlock2D", "DownBlock2D"])),
         InvalidConfig, "SimpleCrossAttnDownBlock2D"),
        (lambda d: _edit_json(os.path.join(d, "unet", "config.json"), lambda c: c.update(addition_embed_type="text")),
         InvalidConfig, "addition_embed_type"),
        (lambda d: _edit_json(os.path.join(d, "vae", "config.json"), lambda c: c.update(norm_num_groups="32")),
         InvalidConfig, "norm_num_groups"),
        (lambda d: _edit_json(os.path.join(d, "unet", "config.json"), lambda c: c.update(block_out_channels=[])),
         InvalidConfig, "block_out_channels"),
        (lambda d: _edit_json(os.path.join(d, "model_index.json"), lambda c: c.pop("text_encoder")),
         InvalidConfig, "text_encoder"),
        (lambda d: _drop_tensor(os.path.join(d, "unet", "diffusion_pytorch_model.safetensors"),
                                "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight"),
         MissingTensor, "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight"),
        (lambda d: _drop_tensor(os.path.join(d, "vae", "diffusion_pytorch_model.safetensors"),
                                "decoder.mid_block.attentions.0.to_q.bias"),
         MissingTensor, "decoder.mid_block.attentions.0.to_q.bias"),
        (lambda d: os.unlink(os.path.join(d, "tokenizer", "tokenizer.json")), FormatError, "vocab.json"),
    ]
    for k, (spoil, err, named) in enumerate(cases):
        d = _copy(folder, tmp_path / str(k))
        spoil(d)
        with pytest.raises(err) as e:
            import_model(d, out, progress=False)
        assert named in str(e.value), (k, str(e.value))
        assert not os.path.exists(out)


def test_unet_linear_projection(tmp_path):
    """An SD 2.x-style UNet (use_linear_projection, one int of heads, cross-attention up and down blocks,
    a mid-block scale factor, 77 tokens) on non-square latents of an odd width (13 goes down to 7 and is
    upsampled back to 13, not 14, as diffusers does): the emitted graph against diffusers."""
    from diffusers import UNet2DConditionModel

    from cyb_llm.convert.diffusers import Component, unet_graph
    from cyb_llm.convert.onnx_graph import stage_graph, weight_records
    from cyb_llm.writer import write_model

    torch.manual_seed(1)
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=1, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("CrossAttnDownBlock2D",) * 2,
                                up_block_types=("CrossAttnUpBlock2D",) * 2, cross_attention_dim=24,
                                attention_head_dim=8, use_linear_projection=True, flip_sin_to_cos=False,
                                freq_shift=1, mid_block_scale_factor=1.5, norm_num_groups=16, norm_eps=1e-6)
    with torch.no_grad():
        for p in unet.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    unet.save_pretrained(str(tmp_path / "unet"))
    graph, weights = unet_graph(Component(str(tmp_path), "unet"))
    recs = [(f"unet.{n}", e, s, d) for n, e, s, d in weight_records(graph, weights, None)]
    path = str(tmp_path / "u.model")
    write_model(path, name="u", config={"model_type": "graph-stages", "stages": {"pipeline": "diffusion",
                                                                                "names": ["unet"]}},
                stages={"unet": stage_graph(graph, {}, "unet")[0]}, tensors=recs)
    g = torch.Generator().manual_seed(2)
    sample, ehs = torch.randn(2, 4, 8, 13, generator=g), torch.randn(2, 77, 24, generator=g)
    ts = torch.tensor([3.0, 801.0])
    with torch.no_grad():
        ref = unet(sample, ts, encoder_hidden_states=ehs).sample.numpy()
    ours = load_stage(path, "unet").run({"sample": sample.numpy(), "timestep": ts.numpy(),
                                         "encoder_hidden_states": ehs.numpy()})["out_sample"]
    assert _rel(ours, ref) <= tolerance("diffusers-import"), _rel(ours, ref)


def test_import_options_refused(sd, tmp_path):
    """--graph (curated decoder families) and --pipeline other than diffusion do not apply."""
    folder, path, pipe = sd
    for kw, field in (({"graph": True}, "graph"), ({"pipeline": "tts"}, "pipeline")):
        with pytest.raises(InvalidConfig) as e:
            import_model(folder, str(tmp_path / "x.model"), progress=False, **kw)
        assert e.value.field == field
    with pytest.raises(InvalidConfig) as e:
        import_model(folder, str(tmp_path / "x.model"), progress=False, quantize="q3_zz")
    assert e.value.field == "quantize"
    assert not os.path.exists(tmp_path / "x.model")


def test_wrong_tensor_shape(sd, tmp_path):
    """A tensor of the wrong shape imports (the graph takes shapes at run time) and the stage's first
    run names the node that reads it."""
    from safetensors.numpy import load_file, save_file

    from cyb_llm.errors import ShapeMismatch

    folder, path, pipe = sd
    d = _copy(folder, tmp_path)
    st = os.path.join(d, "unet", "diffusion_pytorch_model.safetensors")
    ts = load_file(st)
    name = "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight"
    ts[name] = ts[name][:, :16].copy()
    save_file(ts, st)
    out = str(tmp_path / "bad.model")
    import_model(d, out, progress=False)
    x = _inputs()
    with pytest.raises(ShapeMismatch) as e:
        load_stage(out, "unet").run({"sample": x["latent"].numpy(), "timestep": np.ones(2, np.float32),
                                     "encoder_hidden_states": x["ehs"].numpy()})
    assert name.rsplit(".", 1)[0] in str(e.value)
