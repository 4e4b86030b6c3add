"""DiffusionModel: the `diffusion` pipeline's class (docs/diffusion.md). A model_type "graph-stages"
file with `[stages] pipeline = "diffusion"` (the contract: stages text_encoder, unet, vae_decoder and
optionally vae_encoder; the CLIP tokenizer; a `[diffusion]` table), each stage a named-array graph
loaded with cyb_llm.named_arrays.load_stage on the same backend and threads; the UNet is the
primary native model.

    m = cyb_llm.load("sd.model")                          # a DiffusionModel
    img = m.generate_image("a photo of a cat", seed=1)    # uint8 [H, W, 3]
    m.last_stats.as_dict()                                # per-stage timings, the seed

The loop is diffusers' StableDiffusionPipeline's: the prompt and the negative prompt ("" when
none) tokenized and padded to max_text_length, encoded; classifier-free guidance (guidance_scale >
1) runs both halves in one UNet call of batch 2; the scheduler of that name built from the file's
scheduler config (cyb_llm.diffusion.schedulers); the latents decoded by the VAE after dividing by
vae_scaling_factor; the image (x / 2 + 0.5) clipped to [0, 1]. img2img (`image=`, `strength`)
encodes the image through vae_encoder (a draw from its Gaussian, times vae_scaling_factor), noises
it to the step `int(steps * strength)` from the end and runs the rest, as
StableDiffusionImg2ImgPipeline.

The random numbers (the seed rule): diffusers draws from torch's generator, which this package does
not import; here one `numpy.random.default_rng(seed)` stream gives, in this order, the VAE encoder's
draw (img2img), the initial latent noise (standard normal, [1, latent_channels, h, w], float32),
then the per-step noise of the schedulers that take one (Euler ancestral, LCM). `latents=` (the
initial noise, unscaled, as diffusers' `latents=`), `noise=` (per-step) and `image_noise=` (the
encoder's draw) replace the draws, for exact comparisons with another implementation.

Nothing here imports torch, diffusers or onnxruntime.
"""
from __future__ import annotations

import json
import math
import secrets
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import FormatError, InvalidConfig
from ..named_arrays import NamedArrayModel, load_stage, stage_names
from ..pipelines import STAGES_MODEL_TYPE
from . import schedulers as _schedulers

#: the stages a diffusion file must hold, and the optional one (img2img)
REQUIRED_STAGES = ("text_encoder", "unet", "vae_decoder")
OPTIONAL_STAGES = ("vae_encoder",)
#: the contract's inputs and outputs of each stage (docs/diffusion.md)
STAGE_IO = {
    "text_encoder": (("input_ids",), ("last_hidden_state",)),
    "unet": (("sample", "timestep", "encoder_hidden_states"), ("out_sample",)),
    "vae_decoder": (("latent_sample",), ("sample",)),
    "vae_encoder": (("sample",), ("mean", "logvar")),
}
_CONFIG_KEYS = {"vae_scaling_factor": float, "vae_scale_factor": int, "latent_channels": int, "sample_size": int,
                "max_text_length": int, "pad_token_id": int, "scheduler": str}
#: image sides must be multiples of this (diffusers' pipelines check the same)
SIZE_MULTIPLE = 8
OUTPUT_TYPES = ("np", "pil", "float")


@dataclass
class ImageStats:
    """Timings of one generate_image call (milliseconds) and what it ran with."""

    seed: int | None = None            # the seed of the numpy stream (drawn when none was given)
    scheduler: str = ""
    steps: int = 0                     # denoising steps run (img2img: int(steps * strength))
    guidance_scale: float = 0.0
    height: int = 0
    width: int = 0
    prompt_tokens: int = 0             # the prompt's tokens, BOS and EOS included, before truncation
    truncated_tokens: int = 0          # tokens cut off at max_text_length
    text_encoder_ms: float = 0.0
    text_encoder_released_bytes: int = 0  # its weights' pages handed back after the prompt (release_memory)
    unet_ms: float = 0.0               # every UNet call
    unet_calls: int = 0                # one per step (batch 2 with guidance, else 1)
    scheduler_ms: float = 0.0          # the scheduler's steps, guidance and the noise draws
    vae_encoder_ms: float = 0.0
    vae_decoder_ms: float = 0.0
    total_ms: float = 0.0
    load_ms: float | None = None       # the model's load time
    backend: str = ""
    per_step_ms: list[float] = field(default_factory=list)   # each UNet call

    @property
    def unet_steps_per_s(self) -> float:
        return 1000.0 * self.unet_calls / self.unet_ms if self.unet_ms > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unet_steps_per_s"] = self.unet_steps_per_s
        return d


class DiffusionModel(NamedArrayModel):
    """Text to image (and image to image) over a diffusion stages file (module docstring)."""

    kind = "diffusion"

    def __init__(self, path: Any, backend: str | None = None, precise: bool = False, threads: int | None = None,
                 exec_path: str | None = None, fuse: bool = True, max_memory: int | None = None,
                 n_ctx: int | None = None):
        # the other stages load with the options of the UNet's native load (_setup)
        self._stage_options = {"precise": bool(precise), "fuse": bool(fuse), "max_memory": max_memory}
        super().__init__(path, backend=backend, precise=precise, threads=threads, exec_path=exec_path, fuse=fuse,
                         max_memory=max_memory, n_ctx=n_ctx)

    def _native_stage(self, mf: Any) -> str:
        if mf.config.get("model_type") != STAGES_MODEL_TYPE:
            raise InvalidConfig(field="model_type", reason=(
                f"a diffusion model is a {STAGES_MODEL_TYPE!r} file of stages (text_encoder, unet, vae_decoder[, "
                f"vae_encoder]); this one is {mf.config.get('model_type')!r}: import the stages together "
                "(cyb-llm import --stage unet=unet.onnx --stage ... --pipeline diffusion, docs/diffusion.md)"))
        return "unet"

    def _setup(self, **options: Any) -> None:
        super()._setup(**options)
        names = stage_names(self.file)
        missing = [s for s in REQUIRED_STAGES if s not in names]
        if missing:
            raise InvalidConfig(field="stages.names", reason=(
                f"a diffusion model needs the stages {', '.join(REQUIRED_STAGES)} (and vae_encoder for img2img); "
                f"this file has {', '.join(names)}, missing {', '.join(missing)}"))
        self.diffusion: dict[str, Any] = self._diffusion_config()
        self.scheduler_config: dict[str, Any] = self.diffusion["scheduler"]
        opts = getattr(self, "_stage_options", {"precise": self.precise, "fuse": True, "max_memory": None})
        #: the stages' named-array models; "unet" is this object itself
        self.stages: dict[str, NamedArrayModel] = {"unet": self}
        for s in [n for n in names if n in STAGE_IO and n != "unet"]:
            self.stages[s] = load_stage(self.file, s, backend=self.backend, threads=self.threads, **opts)
        for s, m in self.stages.items():
            _check_io(s, m)
        if "tokenizer" not in self.file.sections:
            raise FormatError("tokenizer", "", "a diffusion model needs its CLIP tokenizer (tokenizer.json) in the "
                                               "file's tokenizer section")
        #: the last generate_image call's timings (ImageStats)
        self.last_stats: ImageStats | None = None
        #: the steps the running (or last) generate_image call runs: what a callback's progress counts to
        self.last_steps: int = 0

    def _diffusion_config(self) -> dict[str, Any]:
        table = self.config.get("diffusion")
        if not isinstance(table, dict):
            raise InvalidConfig(field="diffusion", reason="a diffusion model's config has a [diffusion] table "
                                                          "(docs/diffusion.md: vae_scaling_factor, ...)")
        out: dict[str, Any] = {}
        for key, typ in _CONFIG_KEYS.items():
            v = table.get(key)
            ok = isinstance(v, typ) and not isinstance(v, bool) or (typ is float and isinstance(v, int)
                                                                   and not isinstance(v, bool))
            if not ok or (typ is not str and not (math.isfinite(v) and v > 0 or key == "pad_token_id" and v >= 0)):
                raise InvalidConfig(field=f"diffusion.{key}", reason=f"must be a {'positive ' if typ is not str else ''}"
                                                                     f"{typ.__name__}, got {v!r}")
            out[key] = typ(v)
        try:
            sched = json.loads(out["scheduler"])
        except ValueError as e:
            raise InvalidConfig(field="diffusion.scheduler", reason=f"is not JSON ({e})") from None
        if not isinstance(sched, dict):
            raise InvalidConfig(field="diffusion.scheduler", reason="must be a JSON object (scheduler_config.json)")
        out["scheduler"] = sched
        return out

    # --- the stages' records -----------------------------------------------------------------------
    @property
    def dispatch_records(self) -> list[dict]:
        """Per-op dispatch decisions of every stage (label, op, backend, fallback, count, total_ms),
        each with its "stage"."""
        out = []
        for s, m in self.stages.items():
            recs = m._native.dispatch_records()
            out.extend({**r, "stage": s} for r in recs)
        return out

    def clear_dispatch_records(self) -> None:
        for m in self.stages.values():
            m._native.clear_dispatch_records()

    def set_profiling(self, on: bool = True) -> None:
        for m in self.stages.values():
            m._native.set_profiling(bool(on))

    def _on_close(self) -> None:
        for s, m in list(getattr(self, "stages", {}).items()):
            if m is not self:
                m.close()
        self.stages = {}

    # --- sizes -----------------------------------------------------------------------------------
    @property
    def default_size(self) -> tuple[int, int]:
        """(height, width) generated when none is given: the UNet's sample_size times the VAE's scale."""
        side = self.diffusion["sample_size"] * self.diffusion["vae_scale_factor"]
        return side, side

    @property
    def schedulers(self) -> list[str]:
        """The scheduler names generate_image takes."""
        return list(_schedulers.NAMES)

    # --- text ------------------------------------------------------------------------------------
    def encode_prompt(self, prompts: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """(text embeddings f32 [n, max_text_length, hidden], the prompts' token counts before
        truncation): each prompt tokenized with BOS and EOS, truncated to max_text_length (its
        last token kept the EOS, as CLIP's tokenizer truncates) and padded with pad_token_id."""
        L = self.diffusion["max_text_length"]
        pad = self.diffusion["pad_token_id"]
        rows, counts = [], []
        for p in prompts:
            ids = self.tokenizer.encode(p, add_special_tokens=True)
            counts.append(len(ids))
            if len(ids) > L:
                ids = ids[:L - 1] + ids[-1:]
            rows.append(ids + [pad] * (L - len(ids)))
        ids = np.asarray(rows, dtype=np.int64)
        out = self.stages["text_encoder"].run({"input_ids": ids})["last_hidden_state"]
        return np.asarray(out, dtype=np.float32), counts

    # --- generation ------------------------------------------------------------------------------
    def generate_image(self, prompt: str, negative_prompt: str | None = None, steps: int = 20,
                       guidance_scale: float = 7.5, height: int | None = None, width: int | None = None,
                       seed: int | None = None, scheduler: str = "euler", latents: Any = None, image: Any = None,
                       strength: float = 0.8, callback: Callable[[int, Any, np.ndarray], Any] | None = None,
                       output_type: str = "np", noise: Any = None, image_noise: Any = None) -> Any:
        """One image for `prompt` (module docstring).

        negative_prompt: what guidance steers away from (None: the empty prompt, as diffusers).
        steps: denoising steps (img2img runs int(steps * strength) of them).
        guidance_scale: classifier-free guidance; <= 1 runs the UNet on the prompt alone (batch 1).
        height, width: the image's size, multiples of 8 (None: the image's for img2img, else
            sample_size x vae_scale_factor, 512 for SD 1.5).
        seed: the numpy stream's seed (None: a fresh one, reported in last_stats.seed).
        scheduler: ddim, euler, euler_a, dpmpp_2m, dpmpp_2m_karras, lcm (or a diffusers class name).
        latents: the initial noise (f32 [1, latent_channels, h, w], standard normal, unscaled) in place
            of the seed's draw; with `image=` it is the noise added to the encoded image.
        image: img2img's start (uint8 or float [0, 1] array [H, W, 3], or a PIL image).
        strength: how much of the schedule img2img runs (0 < strength <= 1).
        callback(step, t, latents): after each step (latents: the scheduler's sample; do not modify it).
        output_type: "np" (uint8 [H, W, 3]), "pil" (a PIL image), "float" (float32 [H, W, 3] in [0, 1]).
        noise: the per-step noise of Euler ancestral and LCM: a sequence of arrays (one per step run) or
            noise(step, t, shape) -> array.
        image_noise: the VAE encoder's standard-normal draw (img2img) in place of the seed's.
        """
        t_all = time.perf_counter()
        if not isinstance(prompt, str):
            raise InvalidConfig(field="prompt", reason=f"must be a str, got {type(prompt).__name__}")
        if negative_prompt is not None and not isinstance(negative_prompt, str):
            raise InvalidConfig(field="negative_prompt", reason=f"must be a str or None, got "
                                                                f"{type(negative_prompt).__name__}")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise InvalidConfig(field="steps", reason=f"must be an integer >= 1, got {steps!r}")
        g = _finite("guidance_scale", guidance_scale)
        if output_type not in OUTPUT_TYPES:
            raise InvalidConfig(field="output_type", reason=f"must be one of {', '.join(OUTPUT_TYPES)}, got "
                                                            f"{output_type!r}")
        if callback is not None and not callable(callback):
            raise InvalidConfig(field="callback", reason="must be callable(step, t, latents)")
        init = None
        if image is not None:
            if "vae_encoder" not in self.stages:
                raise InvalidConfig(field="image", reason="img2img needs the vae_encoder stage, which this model "
                                                          "does not have")
            init = _image_array(image)
            if height is None and width is None:
                height, width = init.shape[:2]
            strength = _finite("strength", strength)
            if not 0 < strength <= 1:
                raise InvalidConfig(field="strength", reason=f"must be in (0, 1], got {strength!r}")
        dh, dw = self.default_size
        height = dh if height is None else height
        width = dw if width is None else width
        h, w = self._latent_size(height, width)
        if init is not None and init.shape[:2] != (height, width):
            raise InvalidConfig(field="image", reason=f"is {init.shape[1]}x{init.shape[0]} (WxH), the image to "
                                                      f"generate {width}x{height}: resize it or give that size")
        if seed is None:
            seed = secrets.randbits(63)
        elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 63:
            raise InvalidConfig(field="seed", reason=f"must be an integer in [0, 2^63), got {seed!r}")
        sch = _schedulers.scheduler_by_name(self.scheduler_config, scheduler)
        shape = (1, self.diffusion["latent_channels"], h, w)
        sch.set_timesteps(int(steps))
        start = 0
        if init is not None:
            run_steps = min(int(steps * strength), int(steps))
            if run_steps < 1:
                raise InvalidConfig(field="strength", reason=f"steps x strength = {steps} x {strength} runs no "
                                                             "step: raise either")
            start = len(sch.timesteps) - run_steps
        stats = ImageStats(seed=int(seed), scheduler=str(scheduler), guidance_scale=g, height=int(height),
                           width=int(width), load_ms=self.timings.get("load_ms"), backend=self.backend)
        rng = np.random.default_rng(int(seed))

        # the text
        t0 = time.perf_counter()
        cfg = g > 1.0
        texts = ([negative_prompt or ""] if cfg else []) + [prompt]
        emb, counts = self.encode_prompt(texts)
        # each stage's kept buffers go as the next one runs; the text encoder's weights too (their pages
        # fault in again from the file at the next generation's prompt: docs/diffusion.md "Memory")
        stats.text_encoder_released_bytes = self.stages["text_encoder"].release_memory(weights=True)
        stats.text_encoder_ms = (time.perf_counter() - t0) * 1000.0
        stats.prompt_tokens = counts[-1]
        stats.truncated_tokens = max(0, counts[-1] - self.diffusion["max_text_length"])
        if stats.truncated_tokens:
            warnings.warn(f"the prompt has {counts[-1]} tokens; the text encoder takes "
                          f"{self.diffusion['max_text_length']}: {stats.truncated_tokens} were cut off",
                          stacklevel=2)

        # the start
        if init is not None:
            t0 = time.perf_counter()
            x = (init.transpose(2, 0, 1)[None] * np.float32(2) - np.float32(1)).astype(np.float32)
            enc = self.stages["vae_encoder"].run({"sample": np.ascontiguousarray(x)})
            mean = np.asarray(enc["mean"], np.float32)
            logvar = np.clip(np.asarray(enc["logvar"], np.float32), -30.0, 20.0)
            self.stages["vae_encoder"].release_memory()
            eps = _given("image_noise", image_noise, mean.shape) if image_noise is not None else \
                rng.standard_normal(mean.shape, dtype=np.float32)
            init_latents = (mean + np.exp(np.float32(0.5) * logvar) * eps) * np.float32(self.diffusion["vae_scaling_factor"])
            stats.vae_encoder_ms = (time.perf_counter() - t0) * 1000.0
            if init_latents.shape != shape:
                raise InvalidConfig(field="image", reason=f"the VAE encoder gave latents {list(init_latents.shape)}, "
                                                          f"the UNet takes {list(shape)}")
            n0 = _given("latents", latents, shape) if latents is not None else \
                rng.standard_normal(shape, dtype=np.float32)
            x = sch.add_noise(init_latents, n0, start)
        else:
            x0 = _given("latents", latents, shape) if latents is not None else \
                rng.standard_normal(shape, dtype=np.float32)
            x = (x0 * np.float32(sch.init_noise_sigma)).astype(np.float32)

        # the loop
        takes_noise = isinstance(sch, (_schedulers.EulerAncestralScheduler, _schedulers.LCMScheduler))
        unet_ms = sched_ms = 0.0
        timesteps = sch.timesteps[start:]
        stats.steps = self.last_steps = len(timesteps)
        for i, t in enumerate(timesteps):
            ts = time.perf_counter()
            xin = sch.scale_model_input(x, t)
            feed = np.concatenate([xin, xin]) if cfg else xin
            tt = np.full(feed.shape[0], float(t), dtype=np.float32)
            tu = time.perf_counter()
            out = self.run({"sample": np.ascontiguousarray(feed, dtype=np.float32), "timestep": tt,
                            "encoder_hidden_states": emb})["out_sample"]
            du = (time.perf_counter() - tu) * 1000.0
            unet_ms += du
            stats.per_step_ms.append(du)
            out = np.asarray(out, np.float32)
            if cfg:
                uncond, text = out[:1], out[1:]
                eps_pred = uncond + np.float32(g) * (text - uncond)
            else:
                eps_pred = out
            if takes_noise:
                if noise is None:
                    step_noise = rng.standard_normal(shape, dtype=np.float32)
                else:
                    step_noise = _step_noise(noise, i, t, shape)
                x = sch.step(eps_pred, t, x, noise=step_noise).prev_sample
            else:
                x = sch.step(eps_pred, t, x).prev_sample
            sched_ms += (time.perf_counter() - ts) * 1000.0 - du
            if callback is not None:
                callback(i, t, x)
        stats.unet_ms, stats.unet_calls, stats.scheduler_ms = unet_ms, len(timesteps), sched_ms

        # the image (the UNet's pooled buffers and kernel scratch go first: only the running stage's
        # frames are held, docs/diffusion.md "Memory")
        t0 = time.perf_counter()
        self.release_memory()
        dec = self.stages["vae_decoder"].run(
            {"latent_sample": np.ascontiguousarray(x / np.float32(self.diffusion["vae_scaling_factor"]), np.float32)})
        img = np.asarray(dec["sample"], np.float32)[0]
        self.stages["vae_decoder"].release_memory()
        stats.vae_decoder_ms = (time.perf_counter() - t0) * 1000.0
        img = np.clip(img / np.float32(2) + np.float32(0.5), 0, 1).transpose(1, 2, 0)
        stats.total_ms = (time.perf_counter() - t_all) * 1000.0
        self.last_stats = stats
        self.timings.update({k: getattr(stats, k) for k in ("text_encoder_ms", "unet_ms", "scheduler_ms",
                                                            "vae_encoder_ms", "vae_decoder_ms", "total_ms")})
        if output_type == "float":
            return np.ascontiguousarray(img)
        u8 = to_uint8(img)
        if output_type == "pil":
            from PIL import Image

            return Image.fromarray(u8)
        return u8

    def _latent_size(self, height: Any, width: Any) -> tuple[int, int]:
        f = self.diffusion["vae_scale_factor"]
        for name, v in (("height", height), ("width", width)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0 or v % SIZE_MULTIPLE or v % f:
                raise InvalidConfig(field=name, reason=f"must be a positive multiple of {max(SIZE_MULTIPLE, f)}, "
                                                       f"got {v!r}")
            if v > 16384:
                raise InvalidConfig(field=name, reason=f"must be at most 16384, got {v}")
        h, w = int(height) // f, int(width) // f
        fixed = self.inputs[0].shape  # the UNet's sample [batch, C, h, w]: ints where the export fixed them
        if len(fixed) == 4 and ((isinstance(fixed[2], int) and fixed[2] != h) or (isinstance(fixed[3], int)
                                                                                 and fixed[3] != w)):
            raise InvalidConfig(field="height" if isinstance(fixed[2], int) and fixed[2] != h else "width", reason=(
                f"this model's UNet was exported for latents {fixed[3]}x{fixed[2]}, images "
                f"{fixed[3] * f}x{fixed[2] * f} (WxH); {width}x{height} needs another export"))
        return h, w


def parse_size(text: Any) -> tuple[int, int]:
    """(width, height) of "WxH" ("512x512", as OpenAI's `size`); InvalidConfig(field="size") otherwise."""
    parts = text.lower().split("x") if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InvalidConfig(field="size", reason=f"must be WIDTHxHEIGHT such as 512x512, got {text!r}")
    return int(parts[0]), int(parts[1])


def to_uint8(img: np.ndarray) -> np.ndarray:
    """[0, 1] float image -> uint8, as diffusers' numpy_to_pil: (x * 255).round()."""
    return np.ascontiguousarray((np.asarray(img, np.float32) * np.float32(255)).round().astype(np.uint8))


def _finite(field: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(float(v)):
        raise InvalidConfig(field=field, reason=f"must be a finite number, got {v!r}")
    return float(v)


def _given(field: str, v: Any, shape: tuple) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    if a.shape != tuple(shape):
        raise InvalidConfig(field=field, reason=f"must have shape {list(shape)}, got {list(a.shape)}")
    if not np.isfinite(a).all():
        raise InvalidConfig(field=field, reason="holds NaN or infinity")
    return np.ascontiguousarray(a)


def _step_noise(noise: Any, i: int, t: Any, shape: tuple) -> np.ndarray:
    if callable(noise):
        return _given("noise", noise(i, t, shape), shape)
    if isinstance(noise, (str, bytes)) or not hasattr(noise, "__len__") or len(noise) <= i:
        raise InvalidConfig(field="noise", reason=f"must give an array for each step (step {i} has none): a "
                                                  "sequence of arrays or noise(step, t, shape)")
    return _given("noise", noise[i], shape)


def _image_array(image: Any) -> np.ndarray:
    """img2img's start as float32 [H, W, 3] in [0, 1]."""
    if hasattr(image, "convert") and hasattr(image, "size") and not isinstance(image, np.ndarray):
        image = np.asarray(image.convert("RGB"))
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[2] != 3 or a.size == 0:
        raise InvalidConfig(field="image", reason=f"must be an RGB image [H, W, 3] (or a PIL image), got shape "
                                                  f"{list(a.shape)}")
    if a.dtype == np.uint8:
        return a.astype(np.float32) / np.float32(255)
    if a.dtype.kind != "f":
        raise InvalidConfig(field="image", reason=f"must be uint8 or float in [0, 1], got {a.dtype}")
    a = a.astype(np.float32)
    if not np.isfinite(a).all() or a.min() < 0 or a.max() > 1:
        raise InvalidConfig(field="image", reason="a float image must hold values in [0, 1]")
    return a


def _check_io(stage: str, m: NamedArrayModel) -> None:
    ins, outs = STAGE_IO[stage]
    have_in = {i.name for i in m.inputs}
    have_out = {o.name for o in m.outputs}
    if not set(ins) <= have_in or not set(outs) <= have_out:
        raise InvalidConfig(field=f"stages.{stage}", reason=(
            f"the {stage} stage takes {', '.join(ins)} and gives {', '.join(outs)} (docs/diffusion.md); this "
            f"one takes {', '.join(sorted(have_in))} and gives {', '.join(sorted(have_out))}"))


__all__ = ["DiffusionModel", "ImageStats", "to_uint8", "parse_size", "REQUIRED_STAGES", "STAGE_IO"]
