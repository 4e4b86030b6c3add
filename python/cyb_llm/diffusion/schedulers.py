"""Noise schedulers for diffusion sampling, on numpy.

DDIM, Euler, Euler ancestral, DPM-Solver++ 2M (optionally on Karras sigmas) and LCM, configured
with the keys a diffusers ``scheduler_config.json`` uses and stepping with the same math, so a
sampling loop driven by these gives the latents the diffusers scheduler of the same name gives
for the same model outputs (tests/test_diffusion_schedulers.py compares them step by step).

The arithmetic is float32 where the reference's is (betas, cumulative alphas, sigmas, the
per-step coefficients) and float64 where it is (timestep interpolation, Karras ramps), in the
same order of operations, so results agree to float32 rounding.

Usage::

    sch = scheduler_from_config(json.load(open("scheduler_config.json")))   # or EulerScheduler({...})
    sch.set_timesteps(20)
    x = noise * sch.init_noise_sigma
    for t in sch.timesteps:
        eps = unet(sch.scale_model_input(x, t), t)
        x = sch.step(eps, t, x).prev_sample

Schedulers that draw fresh noise each step (Euler ancestral, LCM, DDIM with ``eta > 0``) take
``noise=`` (the exact standard-normal array to use) or ``generator=`` (a numpy Generator) on
:meth:`Scheduler.step`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from ..errors import InvalidConfig

__all__ = [
    "StepOutput", "Scheduler", "DDIMScheduler", "EulerScheduler", "EulerAncestralScheduler",
    "DPMSolverMultistepScheduler", "LCMScheduler", "scheduler_from_config", "SCHEDULERS", "NAMES",
    "scheduler_by_name",
]

F32 = np.float32


@dataclass
class StepOutput:
    """One step's result: the next sample and the model's estimate of the clean sample
    (for LCM, ``denoised`` is the consistency output, which is the final image at the last step)."""
    prev_sample: np.ndarray
    pred_original_sample: np.ndarray | None = None
    denoised: np.ndarray | None = None


# ---------------------------------------------------------------------------------------------
# schedule helpers (float32 where the reference computes in float32)


def _linspace_f32(start: float, end: float, n: int) -> np.ndarray:
    """Evenly spaced float32 values as torch's float32 linspace gives them: float32 ends and
    step, each value start + step * i (first half) or end - step * (n - 1 - i) (second half)
    evaluated with one rounding to float32 (exact in float64, then rounded)."""
    s, e = F32(start), F32(end)
    if n == 1:
        return np.array([s], dtype=F32)
    step = float((e - s) / F32(n - 1))
    half = n // 2
    i = np.arange(n, dtype=np.float64)
    out = np.empty(n, dtype=np.float64)
    out[:half] = float(s) + step * i[:half]
    out[half:] = float(e) - step * (n - 1 - i[half:])
    return out.astype(F32)


def _cosine_betas(n: int, max_beta: float = 0.999) -> np.ndarray:
    """squaredcos_cap_v2: betas from alpha_bar(t) = cos((t + 0.008) / 1.008 * pi / 2)^2."""
    def abar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1 - abar((i + 1) / n) / abar(i / n), max_beta) for i in range(n)], dtype=F32)


def _sigma_to_t(sigma: np.ndarray, log_sigmas: np.ndarray) -> np.ndarray:
    """Fractional training timestep of each sigma: linear interpolation in log-sigma between the
    two neighbouring training sigmas (``log_sigmas`` ascending with t), clipped to the table."""
    sigma = np.asarray(sigma, dtype=np.float64)
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    n = log_sigmas.shape[0]
    low_idx = np.searchsorted(log_sigmas.astype(np.float64), log_sigma.ravel(), side="right") - 1
    low_idx = np.clip(low_idx, 0, n - 2)
    high_idx = low_idx + 1
    low, high = log_sigmas[low_idx], log_sigmas[high_idx]  # float32, as the table
    w = (low - log_sigma.ravel()) / (low - high)
    w = np.clip(w, 0, 1)
    t = (1 - w) * low_idx + w * high_idx
    return t.reshape(sigma.shape)


def _karras(sigma_min: float, sigma_max: float, n: int, rho: float = 7.0) -> np.ndarray:
    """Karras et al. (2022) sigmas: evenly spaced in sigma^(1/rho) from sigma_max down to sigma_min."""
    ramp = np.linspace(0, 1, n)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (hi + ramp * (lo - hi)) ** rho


def _sqrt(x: Any) -> Any:
    return np.sqrt(x)


def _log32(x: np.float32) -> np.float32:
    """log of a float32 scalar, correctly rounded (float64, then rounded; numpy's float32 log
    is up to an ulp off, torch's scalar log is not)."""
    return F32(np.log(np.float64(x)))


def _exp32(x: np.float32) -> np.float32:
    """exp of a float32 scalar, correctly rounded (as _log32)."""
    return F32(np.exp(np.float64(x)))


# ---------------------------------------------------------------------------------------------
# config


_BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")
_SPACINGS = ("leading", "trailing", "linspace")


def _bad(field: str, reason: str) -> InvalidConfig:
    return InvalidConfig(field=field, reason=reason)


class Scheduler:
    """Base of the schedulers: config handling, the training noise schedule and the step counter.

    ``config`` is a mapping of diffusers scheduler-config keys; keys starting with ``_``
    (``_class_name``, ``_diffusers_version``) and keys another scheduler class uses are ignored,
    as diffusers' ``from_config`` ignores them. Every known key is checked; a bad value or an
    option this implementation does not have raises :class:`~cyb_llm.errors.InvalidConfig`
    naming the key.
    """

    #: the diffusers class this one matches
    diffusers_class: ClassVar[str] = ""
    #: the diffusers defaults of this class's config keys
    defaults: ClassVar[dict[str, Any]] = {}
    #: prediction types this scheduler steps
    prediction_types: ClassVar[tuple[str, ...]] = ("epsilon", "v_prediction", "sample")
    #: config keys accepted only at one value (options not implemented here)
    fixed: ClassVar[dict[str, Any]] = {"rescale_betas_zero_snr": False, "thresholding": False}

    def __init__(self, config: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        cfg = dict(self.defaults)
        unknown = sorted(k for k in overrides if k not in cfg)
        if unknown:  # a keyword given here is meant for this class: a typo must not pass silently
            raise _bad(unknown[0], f"is not a config key of {type(self).__name__} (its keys: {', '.join(cfg)})")
        if config is not None and not isinstance(config, Mapping):
            raise _bad("config", f"must be a mapping of scheduler config keys, got {type(config).__name__}")
        given = dict(config or {})
        given.update(overrides)
        for k, v in given.items():
            if k in cfg:
                cfg[k] = v
        self.config: dict[str, Any] = cfg
        self.ignored_keys = sorted(k for k in given if k not in cfg)
        self._validate()
        self._init_schedule()
        self.num_inference_steps: int | None = None
        self.timesteps: np.ndarray = np.arange(self.config["num_train_timesteps"])[::-1].copy()
        self.step_index: int | None = None

    # -- config checks

    def _validate(self) -> None:
        c = self.config
        for k, want in self.fixed.items():
            if k in c and c[k] != want:
                raise _bad(k, f"only {want!r} is implemented for {type(self).__name__}, got {c[k]!r}")
        self._check_int("num_train_timesteps", lo=2)
        if "steps_offset" in c:
            self._check_int("steps_offset", lo=0)
        for k in ("beta_start", "beta_end"):
            v = c[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < 1:
                raise _bad(k, f"must be a number in [0, 1), got {v!r}")
        self._check_choice("beta_schedule", _BETA_SCHEDULES)
        self._check_choice("prediction_type", self.prediction_types)
        if "timestep_spacing" in c:
            self._check_choice("timestep_spacing", _SPACINGS)
        tb = c.get("trained_betas")
        if tb is not None:
            arr = np.asarray(tb, dtype=np.float64)
            if arr.shape != (c["num_train_timesteps"],) or not np.all((arr > 0) & (arr < 1)):
                raise _bad("trained_betas", f"must be {c['num_train_timesteps']} values in (0, 1)")
        for k, v in c.items():
            if isinstance(self.defaults.get(k), bool) and not isinstance(v, (bool, np.bool_, type(None))):
                raise _bad(k, f"must be true or false, got {v!r}")

    def _check_int(self, key: str, lo: int) -> None:
        v = self.config[key]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise _bad(key, f"must be an integer >= {lo}, got {v!r}")

    def _check_choice(self, key: str, choices: tuple[str, ...]) -> None:
        v = self.config[key]
        if v not in choices:
            raise _bad(key, f"must be one of {', '.join(choices)}; got {v!r}")

    # -- training schedule

    def _init_schedule(self) -> None:
        c = self.config
        n = c["num_train_timesteps"]
        if c.get("trained_betas") is not None:
            betas = np.asarray(c["trained_betas"], dtype=F32)
        elif c["beta_schedule"] == "linear":
            betas = _linspace_f32(c["beta_start"], c["beta_end"], n)
        elif c["beta_schedule"] == "scaled_linear":
            b = _linspace_f32(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, n)
            betas = b * b
        else:
            betas = _cosine_betas(n)
        self.betas = betas
        self.alphas = (F32(1.0) - betas).astype(F32)
        # the running product in float64, each value rounded to float32 (torch's CPU cumprod)
        self.alphas_cumprod = np.cumprod(self.alphas.astype(np.float64)).astype(F32)

    def _train_sigmas(self) -> np.ndarray:
        """sqrt((1 - alpha_bar) / alpha_bar) per training timestep, float32, ascending with t."""
        ac = self.alphas_cumprod
        return _sqrt((F32(1) - ac) / ac).astype(F32)

    def _spaced_timesteps(self, n: int, spacing: str) -> np.ndarray:
        """The inference timesteps (descending, float64 before any rounding) of the three spacings."""
        N = self.config["num_train_timesteps"]
        if spacing == "linspace":
            return np.linspace(0, N - 1, n)[::-1].copy()
        if spacing == "leading":
            ratio = N // n
            return (np.arange(0, n) * ratio).round()[::-1].copy() + self.config.get("steps_offset", 0)
        ratio = N / n
        return np.round(np.arange(N, 0, -ratio)) - 1

    def _check_steps(self, n: Any) -> int:
        N = self.config["num_train_timesteps"]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= N:
            raise _bad("num_inference_steps", f"must be an integer in [1, {N}], got {n!r}")
        return int(n)

    # -- the loop interface

    init_noise_sigma: float = 1.0

    def set_timesteps(self, num_inference_steps: int) -> None:
        raise NotImplementedError

    def scale_model_input(self, sample: np.ndarray, timestep: Any = None) -> np.ndarray:
        """The model's input at the current step (the sample itself unless the scheduler scales)."""
        return sample

    def add_noise(self, original: np.ndarray, noise: np.ndarray, index: int) -> np.ndarray:
        """``original`` noised to the level of step ``index`` of the schedule, as img2img starts
        there (diffusers' ``set_begin_index(index)`` then ``add_noise``): sqrt(alpha_bar_t) x +
        sqrt(1 - alpha_bar_t) noise at t = timesteps[index]. Sets the step counter to ``index``."""
        self._check_index(index)
        a = self.alphas_cumprod[int(self.timesteps[index])]
        out = _sqrt(a) * np.asarray(original, dtype=F32) + _sqrt(F32(1) - a) * np.asarray(noise, dtype=F32)
        self.step_index = index
        return out.astype(F32, copy=False)

    def _check_index(self, index: Any) -> None:
        if self.num_inference_steps is None:
            raise _bad("num_inference_steps", "call set_timesteps before add_noise")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.timesteps):
            raise _bad("index", f"must be a step index in [0, {len(self.timesteps)}), got {index!r}")

    def _begin_step(self, timestep: Any) -> int:
        if self.num_inference_steps is None:
            raise _bad("num_inference_steps", "call set_timesteps before step")
        if self.step_index is None:
            self.step_index = 0
        i = self.step_index
        if i >= len(self.timesteps):
            raise _bad("timestep", f"all {len(self.timesteps)} steps were already taken; call set_timesteps again")
        if timestep is not None and float(np.asarray(timestep)) != float(self.timesteps[i]):
            raise _bad("timestep", f"step {i} is at timestep {self.timesteps[i]}, got {timestep}")
        return i

    @staticmethod
    def _noise(noise: np.ndarray | None, generator: np.random.Generator | None, like: np.ndarray) -> np.ndarray:
        if noise is not None:
            noise = np.asarray(noise, dtype=F32)
            if noise.shape != like.shape:
                raise _bad("noise", f"shape {list(noise.shape)} differs from the sample's {list(like.shape)}")
            return noise
        g = generator if generator is not None else np.random.default_rng()
        return g.standard_normal(like.shape, dtype=F32)

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray, **kw: Any) -> StepOutput:
        raise NotImplementedError

    @staticmethod
    def _pair(model_output: np.ndarray, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mo = np.asarray(model_output, dtype=F32)
        x = np.asarray(sample, dtype=F32)
        if mo.shape != x.shape:
            raise _bad("model_output", f"shape {list(mo.shape)} differs from the sample's {list(x.shape)}")
        return mo, x


_COMMON = {
    "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
    "trained_betas": None, "prediction_type": "epsilon", "steps_offset": 0, "rescale_betas_zero_snr": False,
}


# ---------------------------------------------------------------------------------------------
# DDIM


class DDIMScheduler(Scheduler):
    """DDIM (Song et al. 2020): deterministic at ``eta = 0``; ``eta > 0`` adds noise each step."""

    diffusers_class = "DDIMScheduler"
    defaults = {**_COMMON, "clip_sample": True, "set_alpha_to_one": True, "thresholding": False,
                "dynamic_thresholding_ratio": 0.995, "clip_sample_range": 1.0, "sample_max_value": 1.0,
                "timestep_spacing": "leading"}

    def _init_schedule(self) -> None:
        super()._init_schedule()
        self.final_alpha_cumprod = F32(1.0) if self.config["set_alpha_to_one"] else self.alphas_cumprod[0]

    def set_timesteps(self, num_inference_steps: int) -> None:
        n = self._check_steps(num_inference_steps)
        self.num_inference_steps = n
        ts = self._spaced_timesteps(n, self.config["timestep_spacing"]).round().astype(np.int64)
        if ts.max() >= self.config["num_train_timesteps"]:
            raise _bad("steps_offset", f"{self.config['steps_offset']} puts timestep {ts.max()} past the "
                       f"{self.config['num_train_timesteps']} training timesteps at {n} steps")
        self.timesteps = ts
        self.step_index = None

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray, eta: float = 0.0,
             use_clipped_model_output: bool = False, noise: np.ndarray | None = None,
             generator: np.random.Generator | None = None) -> StepOutput:
        i = self._begin_step(timestep)
        mo, x = self._pair(model_output, sample)
        c = self.config
        t = int(self.timesteps[i])
        prev_t = t - c["num_train_timesteps"] // self.num_inference_steps
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod
        b_t = F32(1) - a_t
        pt = c["prediction_type"]
        if pt == "epsilon":
            x0 = (x - _sqrt(b_t) * mo) / _sqrt(a_t)
            eps = mo
        elif pt == "sample":
            x0 = mo
            eps = (x - _sqrt(a_t) * x0) / _sqrt(b_t)
        else:
            x0 = _sqrt(a_t) * x - _sqrt(b_t) * mo
            eps = _sqrt(a_t) * mo + _sqrt(b_t) * x
        if c["clip_sample"]:
            r = F32(c["clip_sample_range"])
            x0 = np.clip(x0, -r, r)
        b_prev = F32(1) - a_prev
        variance = (b_prev / b_t) * (F32(1) - a_t / a_prev)
        std = F32(eta) * _sqrt(variance)
        if use_clipped_model_output:
            eps = (x - _sqrt(a_t) * x0) / _sqrt(b_t)
        direction = _sqrt(F32(1) - a_prev - std ** 2) * eps
        prev = _sqrt(a_prev) * x0 + direction
        if eta > 0:
            prev = prev + std * self._noise(noise, generator, x)
        self.step_index = i + 1
        return StepOutput(prev.astype(F32, copy=False), x0)


# ---------------------------------------------------------------------------------------------
# Euler (Karras et al. 2022, Algorithm 2 without churn) and Euler ancestral


class _SigmaScheduler(Scheduler):
    """Shared by the k-diffusion style schedulers: samples live at sigma scale."""

    sigmas: np.ndarray

    @property
    def init_noise_sigma(self) -> float:  # type: ignore[override]
        m = self.sigmas.max()
        if self.config["timestep_spacing"] in ("linspace", "trailing"):
            return float(m)
        return float(_sqrt(m * m + F32(1)))

    def scale_model_input(self, sample: np.ndarray, timestep: Any = None) -> np.ndarray:
        """sample / sqrt(sigma^2 + 1) at the current step."""
        i = 0 if self.step_index is None else self.step_index
        if self.num_inference_steps is None:
            raise _bad("num_inference_steps", "call set_timesteps before scale_model_input")
        sigma = self.sigmas[min(i, len(self.sigmas) - 1)]
        return (np.asarray(sample, dtype=F32) / _sqrt(sigma * sigma + F32(1))).astype(F32, copy=False)

    def add_noise(self, original: np.ndarray, noise: np.ndarray, index: int) -> np.ndarray:
        """original + sigma noise at step ``index`` (diffusers' add_noise after set_begin_index)."""
        self._check_index(index)
        out = np.asarray(original, dtype=F32) + np.asarray(noise, dtype=F32) * self.sigmas[index]
        self.step_index = index
        return out.astype(F32, copy=False)

    def _x0(self, mo: np.ndarray, x: np.ndarray, sigma: np.float32) -> np.ndarray:
        pt = self.config["prediction_type"]
        if pt == "epsilon":
            return x - sigma * mo
        if pt == "v_prediction":
            s2 = sigma * sigma + F32(1)
            return mo * (-sigma / _sqrt(s2)) + x / s2
        return mo


class EulerScheduler(_SigmaScheduler):
    """Euler's method on the probability-flow ODE in sigma (diffusers' EulerDiscreteScheduler)."""

    diffusers_class = "EulerDiscreteScheduler"
    defaults = {**_COMMON, "interpolation_type": "linear", "use_karras_sigmas": False,
                "use_exponential_sigmas": False, "use_beta_sigmas": False, "sigma_min": None,
                "sigma_max": None, "timestep_spacing": "linspace", "timestep_type": "discrete",
                "final_sigmas_type": "zero"}
    fixed = {"rescale_betas_zero_snr": False, "interpolation_type": "linear", "use_exponential_sigmas": False,
             "use_beta_sigmas": False, "timestep_type": "discrete"}

    def _validate(self) -> None:
        super()._validate()
        self._check_choice("final_sigmas_type", ("zero", "sigma_min"))
        for k in ("sigma_min", "sigma_max"):
            v = self.config[k]
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
                raise _bad(k, f"must be a positive number or null, got {v!r}")

    def _init_schedule(self) -> None:
        super()._init_schedule()
        self.sigmas = np.concatenate([self._train_sigmas()[::-1], [F32(0)]]).astype(F32)

    def set_timesteps(self, num_inference_steps: int) -> None:
        n = self._check_steps(num_inference_steps)
        c = self.config
        self.num_inference_steps = n
        timesteps = self._spaced_timesteps(n, c["timestep_spacing"])
        if c["timestep_spacing"] != "linspace":
            timesteps = timesteps.astype(F32)
        else:
            timesteps = np.linspace(0, c["num_train_timesteps"] - 1, n, dtype=F32)[::-1].copy()
        train = self._train_sigmas()
        log_sigmas = np.log(train)
        sigmas = np.interp(timesteps, np.arange(len(train)), train)
        if c["use_karras_sigmas"]:
            smin = c["sigma_min"] if c["sigma_min"] is not None else float(sigmas[-1])
            smax = c["sigma_max"] if c["sigma_max"] is not None else float(sigmas[0])
            sigmas = _karras(smin, smax, n)
            timesteps = _sigma_to_t(sigmas, log_sigmas)
        last = F32(0) if c["final_sigmas_type"] == "zero" else train[0]
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = np.asarray(timesteps).astype(F32)
        self.step_index = None

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray) -> StepOutput:
        i = self._begin_step(timestep)
        mo, x = self._pair(model_output, sample)
        sigma = self.sigmas[i]
        x0 = self._x0(mo, x, sigma)
        derivative = (x - x0) / sigma
        dt = self.sigmas[i + 1] - sigma
        prev = x + derivative * dt
        self.step_index = i + 1
        return StepOutput(prev.astype(F32, copy=False), x0)


class EulerAncestralScheduler(_SigmaScheduler):
    """Euler ancestral: an Euler step down to sigma_down, then fresh noise of std sigma_up."""

    diffusers_class = "EulerAncestralDiscreteScheduler"
    defaults = {**_COMMON, "timestep_spacing": "linspace"}
    prediction_types = ("epsilon", "v_prediction")

    def _init_schedule(self) -> None:
        super()._init_schedule()
        self.sigmas = np.concatenate([self._train_sigmas()[::-1], [F32(0)]]).astype(F32)

    def set_timesteps(self, num_inference_steps: int) -> None:
        n = self._check_steps(num_inference_steps)
        c = self.config
        self.num_inference_steps = n
        if c["timestep_spacing"] == "linspace":
            timesteps = np.linspace(0, c["num_train_timesteps"] - 1, n, dtype=F32)[::-1].copy()
        else:
            timesteps = self._spaced_timesteps(n, c["timestep_spacing"]).astype(F32)
        train = self._train_sigmas()
        sigmas = np.interp(timesteps, np.arange(len(train)), train)
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(F32)
        self.timesteps = timesteps
        self.step_index = None

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray,
             noise: np.ndarray | None = None, generator: np.random.Generator | None = None) -> StepOutput:
        """``noise``: the standard-normal draw of this step (else one from ``generator``)."""
        i = self._begin_step(timestep)
        mo, x = self._pair(model_output, sample)
        sigma = self.sigmas[i]
        x0 = self._x0(mo, x, sigma)
        s_from, s_to = self.sigmas[i], self.sigmas[i + 1]
        sigma_up = _sqrt(s_to ** 2 * (s_from ** 2 - s_to ** 2) / s_from ** 2)
        sigma_down = _sqrt(s_to ** 2 - sigma_up ** 2)
        derivative = (x - x0) / sigma
        dt = sigma_down - sigma
        prev = x + derivative * dt
        prev = prev + self._noise(noise, generator, x) * sigma_up
        self.step_index = i + 1
        return StepOutput(prev.astype(F32, copy=False), x0)


# ---------------------------------------------------------------------------------------------
# DPM-Solver++ (Lu et al. 2022), multistep, orders 1 and 2


class DPMSolverMultistepScheduler(Scheduler):
    """DPM-Solver++ 2M: the data-prediction multistep solver in log-SNR; ``use_karras_sigmas``
    spaces the steps on Karras sigmas ("DPM++ 2M Karras")."""

    diffusers_class = "DPMSolverMultistepScheduler"
    defaults = {**_COMMON, "solver_order": 2, "thresholding": False, "dynamic_thresholding_ratio": 0.995,
                "sample_max_value": 1.0, "algorithm_type": "dpmsolver++", "solver_type": "midpoint",
                "lower_order_final": True, "euler_at_final": False, "use_karras_sigmas": False,
                "use_exponential_sigmas": False, "use_beta_sigmas": False, "use_lu_lambdas": False,
                "use_flow_sigmas": False, "flow_shift": 1.0, "final_sigmas_type": "zero",
                "lambda_min_clipped": -float("inf"), "variance_type": None, "timestep_spacing": "linspace",
                "use_dynamic_shifting": False, "time_shift_type": "exponential"}
    fixed = {"rescale_betas_zero_snr": False, "thresholding": False, "algorithm_type": "dpmsolver++",
             "use_exponential_sigmas": False, "use_beta_sigmas": False, "use_lu_lambdas": False,
             "use_flow_sigmas": False, "variance_type": None, "use_dynamic_shifting": False}

    def _validate(self) -> None:
        super()._validate()
        c = self.config
        if c["solver_order"] not in (1, 2) or isinstance(c["solver_order"], bool):
            raise _bad("solver_order", f"1 and 2 are implemented, got {c['solver_order']!r}")
        self._check_choice("solver_type", ("midpoint", "heun"))
        self._check_choice("final_sigmas_type", ("zero", "sigma_min"))
        v = c["lambda_min_clipped"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise _bad("lambda_min_clipped", f"must be a number, got {v!r}")

    def _init_schedule(self) -> None:
        super()._init_schedule()
        ac = self.alphas_cumprod
        with np.errstate(divide="ignore"):
            self.lambda_t = (np.log(_sqrt(ac)) - np.log(_sqrt(F32(1) - ac))).astype(F32)
        self.sigmas = self._train_sigmas()

    def set_timesteps(self, num_inference_steps: int) -> None:
        n = self._check_steps(num_inference_steps)
        c = self.config
        N = c["num_train_timesteps"]
        clipped = int(np.searchsorted(self.lambda_t[::-1], F32(c["lambda_min_clipped"]), side="left"))
        last = N - clipped
        sp = c["timestep_spacing"]
        if sp == "linspace":
            ts = np.linspace(0, last - 1, n + 1).round()[::-1][:-1].copy().astype(np.int64)
        elif sp == "leading":
            ratio = last // (n + 1)
            ts = (np.arange(0, n + 1) * ratio).round()[::-1][:-1].copy().astype(np.int64) + c["steps_offset"]
        else:
            ts = np.arange(last, 0, -N / n).round().astype(np.int64) - 1
        train = self._train_sigmas()
        log_sigmas = np.log(train)
        if c["use_karras_sigmas"]:
            desc = train[::-1].copy()
            sigmas = _karras(desc[-1].item(), desc[0].item(), n)
            ts = _sigma_to_t(sigmas, log_sigmas)
            if c["beta_schedule"] != "squaredcos_cap_v2":
                ts = ts.round()
        else:
            sigmas = np.interp(ts, np.arange(len(train)), train)
        last_sigma = F32(0) if c["final_sigmas_type"] == "zero" else train[0]
        self.sigmas = np.concatenate([sigmas, [last_sigma]]).astype(F32)
        self.timesteps = np.asarray(ts).astype(np.int64)
        self.num_inference_steps = len(self.timesteps)
        self.model_outputs: list[np.ndarray | None] = [None] * c["solver_order"]
        self.lower_order_nums = 0
        self.step_index = None

    @staticmethod
    def _alpha_sigma(sigma: np.float32) -> tuple[np.float32, np.float32]:
        alpha = F32(1) / _sqrt(sigma * sigma + F32(1))
        return alpha, sigma * alpha

    def add_noise(self, original: np.ndarray, noise: np.ndarray, index: int) -> np.ndarray:
        """alpha_t x + sigma_t noise at the sigma of step ``index`` (diffusers' add_noise after
        set_begin_index)."""
        self._check_index(index)
        alpha, sigma = self._alpha_sigma(self.sigmas[index])
        out = alpha * np.asarray(original, dtype=F32) + sigma * np.asarray(noise, dtype=F32)
        self.step_index = index
        return out.astype(F32, copy=False)

    def _convert(self, mo: np.ndarray, x: np.ndarray, i: int) -> np.ndarray:
        pt = self.config["prediction_type"]
        if pt == "sample":
            return mo
        alpha_t, sigma_t = self._alpha_sigma(self.sigmas[i])
        if pt == "epsilon":
            return (x - sigma_t * mo) / alpha_t
        return alpha_t * x - sigma_t * mo

    def _lambda(self, sigma: np.float32) -> tuple[np.float32, np.float32, np.float32]:
        alpha, s = self._alpha_sigma(sigma)
        with np.errstate(divide="ignore"):
            return alpha, s, _log32(alpha) - _log32(s)

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray) -> StepOutput:
        i = self._begin_step(timestep)
        mo, x = self._pair(model_output, sample)
        c = self.config
        n = len(self.timesteps)
        lower_final = i == n - 1 and (c["euler_at_final"] or (c["lower_order_final"] and n < 15)
                                      or c["final_sigmas_type"] == "zero")
        x0 = self._convert(mo, x, i)
        self.model_outputs = self.model_outputs[1:] + [x0]
        # a zero step (the Karras ramp ending on sigma_min, then sigma_min again) makes h = 0 and
        # r0 = inf, so D1 = 0: the step returns the sample, as the reference's float math does
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if c["solver_order"] == 1 or self.lower_order_nums < 1 or lower_final:
                a_t, s_t, l_t = self._lambda(self.sigmas[i + 1])
                _, s_s, l_s = self._lambda(self.sigmas[i])
                h = l_t - l_s
                prev = s_t / s_s * x - a_t * (_exp32(-h) - F32(1)) * x0
            else:
                a_t, s_t, l_t = self._lambda(self.sigmas[i + 1])
                _, s_s0, l_s0 = self._lambda(self.sigmas[i])
                _, _, l_s1 = self._lambda(self.sigmas[i - 1])
                m0, m1 = self.model_outputs[-1], self.model_outputs[-2]
                h, h_0 = l_t - l_s0, l_s0 - l_s1
                r0 = h_0 / h
                d0, d1 = m0, (F32(1) / r0) * (m0 - m1)
                em1 = _exp32(-h) - F32(1)
                if c["solver_type"] == "midpoint":
                    prev = s_t / s_s0 * x - a_t * em1 * d0 - F32(0.5) * (a_t * em1) * d1
                else:
                    prev = s_t / s_s0 * x - a_t * em1 * d0 + a_t * (em1 / h + F32(1)) * d1
        if self.lower_order_nums < c["solver_order"]:
            self.lower_order_nums += 1
        self.step_index = i + 1
        return StepOutput(prev.astype(F32, copy=False), x0)


# ---------------------------------------------------------------------------------------------
# LCM (Luo et al. 2023)


class LCMScheduler(Scheduler):
    """Latent consistency model sampling: each step maps to the clean estimate through the
    consistency boundary scalings, then re-noises it to the next timestep (fresh noise)."""

    diffusers_class = "LCMScheduler"
    defaults = {**_COMMON, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
                "original_inference_steps": 50, "clip_sample": False, "clip_sample_range": 1.0,
                "set_alpha_to_one": True, "thresholding": False, "dynamic_thresholding_ratio": 0.995,
                "sample_max_value": 1.0, "timestep_spacing": "leading", "timestep_scaling": 10.0}

    def _validate(self) -> None:
        super()._validate()
        self._check_int("original_inference_steps", lo=1)
        if self.config["original_inference_steps"] > self.config["num_train_timesteps"]:
            raise _bad("original_inference_steps", "cannot exceed num_train_timesteps")
        v = self.config["timestep_scaling"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise _bad("timestep_scaling", f"must be a positive number, got {v!r}")

    def _init_schedule(self) -> None:
        super()._init_schedule()
        self.final_alpha_cumprod = F32(1.0) if self.config["set_alpha_to_one"] else self.alphas_cumprod[0]

    def set_timesteps(self, num_inference_steps: int, original_inference_steps: int | None = None,
                      strength: float = 1.0) -> None:
        n = self._check_steps(num_inference_steps)
        c = self.config
        orig = c["original_inference_steps"] if original_inference_steps is None else original_inference_steps
        if isinstance(orig, bool) or not isinstance(orig, (int, np.integer)) or not 1 <= orig <= c["num_train_timesteps"]:
            raise _bad("original_inference_steps", f"must be an integer in [1, {c['num_train_timesteps']}], got {orig!r}")
        if not 0 < strength <= 1:
            raise _bad("strength", f"must be in (0, 1], got {strength!r}")
        k = c["num_train_timesteps"] // orig
        origin = np.arange(1, int(orig * strength) + 1) * k - 1
        if n > orig or len(origin) // n < 1:
            raise _bad("num_inference_steps", f"{n} steps need original_inference_steps x strength >= {n} "
                       f"(have {orig} x {strength})")
        origin = origin[::-1].copy()
        idx = np.floor(np.linspace(0, len(origin), num=n, endpoint=False)).astype(np.int64)
        self.num_inference_steps = n
        self.timesteps = origin[idx].astype(np.int64)
        self.step_index = None

    def step(self, model_output: np.ndarray, timestep: Any, sample: np.ndarray,
             noise: np.ndarray | None = None, generator: np.random.Generator | None = None) -> StepOutput:
        """``noise``: the standard-normal draw that re-noises to the next timestep (unused at the
        last step), else one from ``generator``."""
        i = self._begin_step(timestep)
        mo, x = self._pair(model_output, sample)
        c = self.config
        t = int(self.timesteps[i])
        prev_t = int(self.timesteps[i + 1]) if i + 1 < len(self.timesteps) else t
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod
        b_t, b_prev = F32(1) - a_t, F32(1) - a_prev
        st = F32(t) * F32(c["timestep_scaling"])
        c_skip = F32(0.25) / (st * st + F32(0.25))
        c_out = st / _sqrt(st * st + F32(0.25))
        pt = c["prediction_type"]
        if pt == "epsilon":
            x0 = (x - _sqrt(b_t) * mo) / _sqrt(a_t)
        elif pt == "sample":
            x0 = mo
        else:
            x0 = _sqrt(a_t) * x - _sqrt(b_t) * mo
        if c["clip_sample"]:
            r = F32(c["clip_sample_range"])
            x0 = np.clip(x0, -r, r)
        denoised = c_out * x0 + c_skip * x
        if i != self.num_inference_steps - 1:
            prev = _sqrt(a_prev) * denoised + _sqrt(b_prev) * self._noise(noise, generator, x)
        else:
            prev = denoised
        self.step_index = i + 1
        return StepOutput(prev.astype(F32, copy=False), x0, denoised.astype(F32, copy=False))


SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.diffusers_class: cls
    for cls in (DDIMScheduler, EulerScheduler, EulerAncestralScheduler, DPMSolverMultistepScheduler, LCMScheduler)
}


def scheduler_from_config(config: Mapping[str, Any], kind: str | None = None, **overrides: Any) -> Scheduler:
    """A scheduler from a diffusers scheduler config. ``kind`` (a diffusers class name such as
    ``"EulerDiscreteScheduler"``) picks the class; without it the config's ``_class_name`` does.
    Keys the chosen class does not use are ignored, as diffusers' ``from_config`` ignores them,
    so one model's config can drive any of the schedulers."""
    if not isinstance(config, Mapping):
        raise _bad("config", f"must be a mapping of scheduler config keys, got {type(config).__name__}")
    name = kind if kind is not None else config.get("_class_name")
    if name not in SCHEDULERS:
        raise _bad("_class_name" if kind is None else "kind",
                   f"{name!r} is not one of {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](config, **overrides)


#: the pipeline's scheduler names (DiffusionModel.generate_image(scheduler=), `cyb-llm imagine
#: --scheduler`): the class and the config keys set over the model's scheduler config
NAMES: dict[str, tuple[str, dict[str, Any]]] = {
    "ddim": ("DDIMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {}),
    "dpmpp_2m_karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    "lcm": ("LCMScheduler", {}),
}


def scheduler_by_name(config: Mapping[str, Any], name: Any) -> Scheduler:
    """The scheduler called ``name`` (a key of NAMES, or a diffusers class name of SCHEDULERS) over
    a model's scheduler config; InvalidConfig(field="scheduler") naming the choices otherwise."""
    if isinstance(name, str) and name in NAMES:
        kind, overrides = NAMES[name]
        return scheduler_from_config(config, kind, **overrides)
    if isinstance(name, str) and name in SCHEDULERS:
        return scheduler_from_config(config, name)
    raise _bad("scheduler", f"unknown scheduler {name!r}: one of {', '.join(NAMES)} (or a diffusers class name: "
               f"{', '.join(SCHEDULERS)})")
