"""A tiny random Stable Diffusion pipeline for the tests and the bench (tests/test_diffusion_pipeline.py,
bench/bench_diffusion.py): diffusers' UNet2DConditionModel, AutoencoderKL and transformers'
CLIPTextModel built from small configs with seeded random weights, a tiny CLIP BPE tokenizer
written here, and the `.model` made through the ONNX route (docs/diffusion.md "Importing your own
ONNX stages"): each stage exported with torch.onnx.export under the contract's input and output
names, then cyb_llm.convert.onnx_graph.import_onnx_stages with the tokenizer and the
[diffusion] config. torch, diffusers and transformers are test dependencies only."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

SCHEDULER_CONFIG = {  # SD 1.5's scheduler_config.json (a PNDMScheduler there; our schedulers read its keys)
    "_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
    "clip_sample": False, "num_train_timesteps": 1000, "prediction_type": "epsilon", "set_alpha_to_one": False,
    "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None,
}
MAX_TEXT_LENGTH = 16   # the tiny tokenizer's model_max_length (77 for SD's CLIP)
SAMPLE_SIZE = 16       # latents 16x16 -> images 32x32 (vae_scale_factor 2)

_WORDS = ["a", "photo", "of", "cat", "dog", "red", "blue", "house", "on", "the", "hill", "blurry", "ugly",
          "painting", "an", "astronaut", "riding", "horse"]


@dataclass
class TinySD:
    """The torch modules, the tokenizer and the diffusers pipeline pieces."""

    unet: Any
    vae: Any
    text_encoder: Any
    tokenizer: Any


def _tokenizer() -> Any:
    """A CLIP BPE tokenizer over a small vocabulary: the 256 byte characters (alone and with the
    end-of-word mark), merges spelling out each word of _WORDS, and the two special tokens."""
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = list(bytes_to_unicode().values())
    vocab: list[str] = chars + [c + "</w>" for c in chars]
    merges: list[tuple[str, str]] = []
    for w in _WORDS:
        parts = list(w[:-1]) + [w[-1] + "</w>"]
        while len(parts) > 1:
            a, b = parts[0], parts[1]
            merges.append((a, b))
            if a + b not in vocab:
                vocab.append(a + b)
            parts = [a + b] + parts[2:]
    merges = list(dict.fromkeys(merges))
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, model_max_length=MAX_TEXT_LENGTH)


def build(folder: str, seed: int = 0) -> TinySD:
    """The tiny pipeline's modules (f32, eval mode), seeded."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tok = _tokenizer()
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=SAMPLE_SIZE, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=4, norm_num_groups=4)
    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        latent_channels=4, norm_num_groups=4, sample_size=2 * SAMPLE_SIZE)
    te = CLIPTextModel(CLIPTextConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
        vocab_size=len(tok), max_position_embeddings=MAX_TEXT_LENGTH, layer_norm_eps=1e-5,
        attn_implementation="eager"))  # eager: its mask folds to a constant at the fixed length
    # random weights of a size that moves the outputs (the default init leaves some near zero)
    with torch.no_grad():
        for mod in (unet, vae):
            for name, p in mod.named_parameters():
                if name.endswith("weight") and p.ndim >= 2:
                    p.normal_(0, 1.0 / max(1.0, float(p[0].numel())) ** 0.5)
                elif name.endswith("bias"):
                    p.normal_(0, 0.05)
    return TinySD(unet.eval(), vae.eval(), te.eval(), tok)


def export_onnx(sd: TinySD, folder: str) -> dict[str, str]:
    """Each stage as an .onnx file with the contract's inputs and outputs (docs/diffusion.md), the
    batch dynamic and the sizes fixed (the importer takes a Resize only over dims known at import,
    and CLIP's causal mask folds only at a fixed sequence length)."""
    import torch

    class Unet(torch.nn.Module):
        def __init__(self, unet):
            super().__init__()
            self.unet = unet

        def forward(self, sample, timestep, encoder_hidden_states):
            return self.unet(sample, timestep, encoder_hidden_states, return_dict=False)[0]

    class TextEncoder(torch.nn.Module):
        def __init__(self, te):
            super().__init__()
            self.te = te

        def forward(self, input_ids):
            return self.te(input_ids, return_dict=False)[0]

    class Decoder(torch.nn.Module):
        def __init__(self, vae):
            super().__init__()
            self.vae = vae

        def forward(self, latent_sample):
            return self.vae.decode(latent_sample, return_dict=False)[0]

    class Encoder(torch.nn.Module):
        def __init__(self, vae):
            super().__init__()
            self.vae = vae

        def forward(self, sample):
            moments = self.vae.quant_conv(self.vae.encoder(sample))
            mean, logvar = torch.chunk(moments, 2, dim=1)
            return mean, torch.clamp(logvar, -30.0, 20.0)

    os.makedirs(folder, exist_ok=True)
    c, s, hid = 4, SAMPLE_SIZE, 32
    specs = {
        "text_encoder": (TextEncoder(sd.text_encoder), (torch.zeros(2, MAX_TEXT_LENGTH, dtype=torch.int64),),
                         ["input_ids"], ["last_hidden_state"], {"input_ids": {0: "batch"},  # seq fixed: the causal mask folds
                                                                 "last_hidden_state": {0: "batch"}}),
        "unet": (Unet(sd.unet), (torch.randn(2, c, s, s), torch.tensor([10.0, 10.0]), torch.randn(2, MAX_TEXT_LENGTH, hid)),
                 ["sample", "timestep", "encoder_hidden_states"], ["out_sample"],
                 {"sample": {0: "batch"}, "timestep": {0: "batch"}, "encoder_hidden_states": {0: "batch"},
                  "out_sample": {0: "batch"}}),
        "vae_decoder": (Decoder(sd.vae), (torch.randn(1, c, s, s),), ["latent_sample"], ["sample"],
                        {"latent_sample": {0: "batch"}, "sample": {0: "batch"}}),
        "vae_encoder": (Encoder(sd.vae), (torch.randn(1, 3, 2 * s, 2 * s),), ["sample"], ["mean", "logvar"],
                        {"sample": {0: "batch"}, "mean": {0: "batch"}, "logvar": {0: "batch"}}),
    }
    paths = {}
    for stage, (mod, args, ins, outs, dyn) in specs.items():
        p = os.path.join(folder, f"{stage}.onnx")
        with torch.no_grad():
            torch.onnx.export(mod, args, p, input_names=ins, output_names=outs, dynamic_axes=dyn, opset_version=17,
                              dynamo=False)
        paths[stage] = p
    return paths


def diffusion_config(sd: TinySD) -> dict:
    """The [diffusion] table of the contract for the tiny pipeline."""
    return {"diffusion": {
        "vae_scaling_factor": float(sd.vae.config.scaling_factor),
        "vae_scale_factor": 2 ** (len(sd.vae.config.block_out_channels) - 1),
        "latent_channels": int(sd.vae.config.latent_channels),
        "sample_size": int(sd.unet.config.sample_size),
        "max_text_length": int(sd.tokenizer.model_max_length),
        "pad_token_id": int(sd.tokenizer.pad_token_id),
        "scheduler": json.dumps(SCHEDULER_CONFIG),
    }}


def make_model(folder: str, seed: int = 0) -> tuple[str, TinySD]:
    """(path of the tiny .model, the torch modules it was made from)."""
    from cyb_llm.convert.onnx_graph import import_onnx_stages

    sd = build(folder, seed)
    paths = export_onnx(sd, os.path.join(folder, "onnx"))
    out = os.path.join(folder, "tiny-sd.model")
    import_onnx_stages(paths, out, pipeline="diffusion", progress=False, extra_config=diffusion_config(sd),
                       tokenizer_json=sd.tokenizer.backend_tokenizer.to_str())
    return out, sd


def save_folder(sd: TinySD, folder: str) -> str:
    """The tiny pipeline saved as a diffusers folder (model_index.json, safetensors), SD 1.5's
    scheduler config; returns its path."""
    from diffusers import PNDMScheduler, StableDiffusionPipeline

    pipe = StableDiffusionPipeline(vae=sd.vae, text_encoder=sd.text_encoder, tokenizer=sd.tokenizer, unet=sd.unet,
                                   scheduler=PNDMScheduler.from_config(SCHEDULER_CONFIG), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(folder)
    return folder


def make_folder_model(folder: str, sd: TinySD) -> str:
    """The same modules through the diffusers-folder importer (`cyb-llm import FOLDER`): the .model's path."""
    from cyb_llm.convert import import_model

    src = save_folder(sd, os.path.join(folder, "pipeline"))
    out = os.path.join(folder, "tiny-sd-folder.model")
    import_model(src, out, progress=False)
    return out
