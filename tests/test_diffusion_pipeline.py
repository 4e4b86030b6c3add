"""The diffusion pipeline (docs/diffusion.md) against diffusers: a tiny random Stable Diffusion
(tests/sd_tiny.py: diffusers' UNet2DConditionModel and AutoencoderKL, transformers' CLIPTextModel,
a tiny CLIP tokenizer) imported through the ONNX route and through the diffusers-folder importer,
then DiffusionModel.generate_image and
diffusers' StableDiffusionPipeline / StableDiffusionImg2ImgPipeline run with the same prompt,
latents and per-step noise, every scheduler, with and without guidance; each stage on its own too."""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")
pytest.importorskip("onnx")

import cyb_llm  # noqa: E402
from cyb_llm.diffusion.model import DiffusionModel  # noqa: E402
from cyb_llm.errors import InvalidConfig  # noqa: E402
from tolerances import tolerance  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sd_tiny  # noqa: E402

PROMPT = "a photo of a red cat on the hill"
NEGATIVE = "blurry ugly painting"
STEPS = 4
#: our scheduler name -> (diffusers class, from_config overrides)
SCHEDULERS = {
    "ddim": ("DDIMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {}),
    "dpmpp_2m_karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    "lcm": ("LCMScheduler", {}),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sd_tiny.make_model(str(tmp_path_factory.mktemp("sd")))


@pytest.fixture(scope="module")
def model(tiny):
    return cyb_llm.load(tiny[0], threads=2)


@pytest.fixture(scope="module")
def routes(tiny, model, tmp_path_factory):
    """The same modules through both importers: {"onnx": ..., "folder": ...} (the folder's saved
    scheduler config spells out PNDM's timestep_spacing "leading", so the two files' schedules differ
    where a scheduler's own default is another spacing: each is compared with diffusers on its own
    config)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = sd_tiny.make_folder_model(str(tmp_path_factory.mktemp("sd-folder")), tiny[1])
    return {"onnx": model, "folder": cyb_llm.load(folder, threads=2)}


def _pipe(sd, scheduler: str, img2img: bool = False, config: dict | None = None):
    from diffusers import StableDiffusionImg2ImgPipeline, StableDiffusionPipeline

    cls_name, over = SCHEDULERS[scheduler]
    sch = getattr(diffusers, cls_name).from_config(config or sd_tiny.SCHEDULER_CONFIG, **over)
    cls = StableDiffusionImg2ImgPipeline if img2img else StableDiffusionPipeline
    p = cls(vae=sd.vae, text_encoder=sd.text_encoder, tokenizer=sd.tokenizer, unet=sd.unet, scheduler=sch,
            safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    p.set_progress_bar_config(disable=True)
    return p


@contextlib.contextmanager
def _fed_noise(arrays):
    """diffusers' draws (torch's generator through randn_tensor) replaced by `arrays`, in order:
    the VAE encoder's sample, the img2img start noise, each scheduler step's noise."""
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as i2i
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
    import diffusers.schedulers.scheduling_lcm as lcm

    it = iter(arrays)

    def randn(shape, **_kw):
        a = np.asarray(next(it), np.float32)
        assert tuple(a.shape) == tuple(shape), (a.shape, shape)
        return torch.from_numpy(a.copy())

    mods = (vae_mod, i2i, ea, lcm)
    saved = [m.randn_tensor for m in mods]
    for m in mods:
        m.randn_tensor = randn
    try:
        yield
    finally:
        for m, f in zip(mods, saved):
            m.randn_tensor = f


def _ref_image(sd, scheduler, guidance, latents, step_noise, negative=NEGATIVE, config=None, height=32, width=32):
    p = _pipe(sd, scheduler, config=config)
    with torch.no_grad(), _fed_noise(step_noise):
        out = p(PROMPT, negative_prompt=negative if guidance > 1 else None, num_inference_steps=STEPS,
                guidance_scale=guidance, height=height, width=width, latents=torch.from_numpy(latents.copy()),
                output_type="np")
    return out.images[0]


# the default tier compares the folder route (the importer users run); the same comparisons over the
# ONNX route are in tests/slow/test_diffusion_routes.py (the default tier's time budget)
@pytest.mark.parametrize("route", ["folder"])
@pytest.mark.parametrize("guidance", [7.5, 1.0])
@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_image_matches_diffusers(tiny, routes, scheduler, guidance, route):
    _, sd = tiny
    model = routes[route]
    rng = np.random.default_rng(7)
    shape = (1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE)
    latents = rng.standard_normal(shape, dtype=np.float32)
    step_noise = [rng.standard_normal(shape, dtype=np.float32) for _ in range(STEPS)]
    want = _ref_image(sd, scheduler, guidance, latents, step_noise, config=model.scheduler_config)
    got = model.generate_image(PROMPT, negative_prompt=NEGATIVE, steps=STEPS, guidance_scale=guidance, height=32,
                               width=32, scheduler=scheduler, latents=latents, noise=step_noise, output_type="float")
    assert got.shape == want.shape == (32, 32, 3)
    err = float(np.abs(got - want).max())
    assert err <= tolerance("diffusion-vs-diffusers"), (scheduler, guidance, err)
    st = model.last_stats
    assert st.unet_calls == STEPS and st.steps == STEPS and st.scheduler == scheduler
    # not a flat picture: the bound is small against what the image holds
    assert float(np.ptp(want)) > tolerance("diffusion-image-spread")


@pytest.mark.parametrize("scheduler", ["euler_a", "dpmpp_2m_karras"])
def test_image_on_wgpu_matches_diffusers(tiny, routes, scheduler):
    """The stages on wgpu+rs (lavapipe where no GPU): every stage on that backend, the schedulers on
    the host as on the cpu; the image against diffusers as on the cpu (the folder route's file)."""
    from placement import wgpu_skip_reason

    reason = wgpu_skip_reason()
    if reason:
        pytest.skip(reason)
    _, sd = tiny
    model = cyb_llm.load(routes["folder"].path, backend="wgpu+rs", threads=2)
    assert {m.backend for m in model.stages.values()} == {"wgpu+rs"}
    rng = np.random.default_rng(9)
    shape = (1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE)
    latents = rng.standard_normal(shape, dtype=np.float32)
    step_noise = [rng.standard_normal(shape, dtype=np.float32) for _ in range(STEPS)]
    want = _ref_image(sd, scheduler, 7.5, latents, step_noise, config=model.scheduler_config)
    got = model.generate_image(PROMPT, negative_prompt=NEGATIVE, steps=STEPS, guidance_scale=7.5, scheduler=scheduler,
                               latents=latents, noise=step_noise, output_type="float")
    assert float(np.abs(got - want).max()) <= tolerance("diffusion-vs-diffusers")
    assert any(r["backend"] == "wgpu+rs" and r["count"] and r["stage"] == "unet" for r in model.dispatch_records)


def test_other_sizes_through_the_folder_route(tiny, routes):
    """The folder importer's UNet and VAE take any size (multiples of 8): a 48x32 image with guidance."""
    _, sd = tiny
    model = routes["folder"]
    rng = np.random.default_rng(8)
    shape = (1, 4, 16, 24)
    latents = rng.standard_normal(shape, dtype=np.float32)
    step_noise = [rng.standard_normal(shape, dtype=np.float32) for _ in range(STEPS)]
    want = _ref_image(sd, "euler_a", 6.0, latents, step_noise, config=model.scheduler_config, height=32, width=48)
    got = model.generate_image(PROMPT, negative_prompt=NEGATIVE, steps=STEPS, guidance_scale=6.0, height=32, width=48,
                               scheduler="euler_a", latents=latents, noise=step_noise, output_type="float")
    assert got.shape == want.shape == (32, 48, 3)
    assert float(np.abs(got - want).max()) <= tolerance("diffusion-vs-diffusers")


def test_seeded_runs_repeat_and_differ(model):
    a = model.generate_image(PROMPT, steps=2, seed=3, scheduler="euler_a")
    b = model.generate_image(PROMPT, steps=2, seed=3, scheduler="euler_a")
    c = model.generate_image(PROMPT, steps=2, seed=4, scheduler="euler_a")
    assert a.dtype == np.uint8 and a.shape == (32, 32, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert model.last_stats.seed == 4


def test_seed_rule_is_numpy_default_rng(model):
    """The documented seed rule: default_rng(seed) draws the latents, then each step's noise."""
    shape = (1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE)
    rng = np.random.default_rng(11)
    latents = rng.standard_normal(shape, dtype=np.float32)
    noise = [rng.standard_normal(shape, dtype=np.float32) for _ in range(3)]
    a = model.generate_image(PROMPT, steps=3, seed=11, scheduler="euler_a", output_type="float")
    b = model.generate_image(PROMPT, steps=3, seed=99, scheduler="euler_a", latents=latents, noise=noise,
                             output_type="float")
    assert np.array_equal(a, b)


@pytest.mark.parametrize("route", ["onnx", "folder"])
def test_img2img_matches_diffusers(tiny, routes, route):
    from PIL import Image

    _, sd = tiny
    model = routes[route]
    rng = np.random.default_rng(5)
    shape = (1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE)
    init = Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    enc_noise = rng.standard_normal(shape, dtype=np.float32)
    start_noise = rng.standard_normal(shape, dtype=np.float32)
    steps, strength = 8, 0.6  # int(8 * 0.6) = 4 steps run
    for scheduler in ("euler_a", "dpmpp_2m"):
        step_noise = [rng.standard_normal(shape, dtype=np.float32) for _ in range(4)]
        p = _pipe(sd, scheduler, img2img=True, config=model.scheduler_config)
        with torch.no_grad(), _fed_noise([enc_noise, start_noise] + step_noise):
            want = p(PROMPT, image=init, strength=strength, num_inference_steps=steps, guidance_scale=5.0,
                     negative_prompt=NEGATIVE, output_type="np").images[0]
        got = model.generate_image(PROMPT, negative_prompt=NEGATIVE, image=init, strength=strength, steps=steps,
                                   guidance_scale=5.0, scheduler=scheduler, latents=start_noise, noise=step_noise,
                                   image_noise=enc_noise, output_type="float")
        assert model.last_stats.steps == 4 and model.last_stats.vae_encoder_ms > 0
        err = float(np.abs(got - want).max())
        assert err <= tolerance("diffusion-vs-diffusers"), (scheduler, err)


def test_stages_alone_match_diffusers(tiny, model):
    """The text encoder's embeddings, one UNet call and the VAE decode, each against the torch module."""
    _, sd = tiny
    ids = sd.tokenizer([PROMPT, ""], padding="max_length", max_length=sd_tiny.MAX_TEXT_LENGTH,
                       truncation=True, return_tensors="pt").input_ids
    emb, counts = model.encode_prompt([PROMPT, ""])
    with torch.no_grad():
        want = sd.text_encoder(ids)[0].numpy()
    assert counts[1] == 2 and float(np.abs(emb - want).max()) <= tolerance("diffusion-stage-vs-diffusers")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE), dtype=np.float32)
    t = np.array([901.0, 901.0], np.float32)
    got = model.run({"sample": x, "timestep": t, "encoder_hidden_states": emb})["out_sample"]
    with torch.no_grad():
        want = sd.unet(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(emb)).sample.numpy()
    assert float(np.abs(got - want).max()) <= tolerance("diffusion-stage-vs-diffusers") * max(1.0, np.abs(want).max())
    z = rng.standard_normal((1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE), dtype=np.float32)
    got = model.stages["vae_decoder"].run({"latent_sample": z})["sample"]
    with torch.no_grad():
        want = sd.vae.decode(torch.from_numpy(z)).sample.numpy()
    assert float(np.abs(got - want).max()) <= tolerance("diffusion-stage-vs-diffusers") * max(1.0, np.abs(want).max())


def test_long_prompt_is_truncated_as_clip(tiny, model):
    _, sd = tiny
    long = " ".join(["cat"] * 40)
    with pytest.warns(UserWarning, match="cut off"):
        img = model.generate_image(long, steps=1, seed=0, guidance_scale=1.0)
    assert img.shape == (32, 32, 3)
    assert model.last_stats.prompt_tokens == 42 and model.last_stats.truncated_tokens == 42 - sd_tiny.MAX_TEXT_LENGTH
    emb, _ = model.encode_prompt([long])
    ids = sd.tokenizer([long], padding="max_length", max_length=sd_tiny.MAX_TEXT_LENGTH, truncation=True,
                       return_tensors="pt").input_ids
    with torch.no_grad():
        want = sd.text_encoder(ids)[0].numpy()
    assert float(np.abs(emb - want).max()) <= tolerance("diffusion-stage-vs-diffusers")


def test_callback_timings_and_records(model):
    seen = []
    model.clear_dispatch_records()
    model.generate_image(PROMPT, steps=3, seed=1, callback=lambda i, t, x: seen.append((i, float(t), x.shape)))
    assert [s[0] for s in seen] == [0, 1, 2] and seen[0][2] == (1, 4, sd_tiny.SAMPLE_SIZE, sd_tiny.SAMPLE_SIZE)
    assert seen[0][1] > seen[-1][1]
    st = model.last_stats.as_dict()
    for k in ("text_encoder_ms", "unet_ms", "vae_decoder_ms", "total_ms"):
        assert st[k] > 0 and model.timings[k] == st[k]
    assert st["unet_calls"] == 3 and len(st["per_step_ms"]) == 3 and st["unet_steps_per_s"] > 0
    stages = {r["stage"] for r in model.dispatch_records if r["count"]}
    assert stages == {"text_encoder", "unet", "vae_decoder"}  # no image: the encoder did not run


def test_close_closes_the_stages(tiny):
    m = cyb_llm.load(tiny[0], threads=1)
    assert m.info["kind"] == "diffusion" and m.memory["weights"] > 0
    stage = m.stages["vae_decoder"]
    m.close()
    assert m.closed and stage.closed
    with pytest.raises(InvalidConfig, match="closed"):
        m.generate_image(PROMPT, steps=1)


def test_pil_output(model):
    from PIL import Image

    img = model.generate_image(PROMPT, steps=1, seed=1, output_type="pil")
    assert isinstance(img, Image.Image) and img.size == (32, 32) and img.mode == "RGB"
    assert np.array_equal(np.asarray(img), model.generate_image(PROMPT, steps=1, seed=1))


@pytest.mark.parametrize("kw, field", [
    ({"steps": 0}, "steps"),
    ({"guidance_scale": float("nan")}, "guidance_scale"),
    ({"height": 36}, "height"),
    ({"width": 30}, "width"),
    ({"height": 64}, "height"),          # the export fixed the size: 32x32 only
    ({"scheduler": "heun"}, "scheduler"),
    ({"seed": -1}, "seed"),
    ({"output_type": "jpg"}, "output_type"),
    ({"latents": np.zeros((1, 4, 8, 8), np.float32)}, "latents"),
    ({"scheduler": "euler_a", "noise": [np.zeros((1, 4, 16, 16), np.float32)]}, "noise"),
    ({"image": np.zeros((32, 32, 3), np.uint8), "strength": 0.0}, "strength"),
    ({"image": np.zeros((32, 32), np.uint8)}, "image"),
    ({"image": np.zeros((32, 32, 3), np.uint8), "steps": 2, "strength": 0.2}, "strength"),
])
def test_bad_arguments(model, kw, field):
    args = {"steps": 2, "seed": 0, **kw}
    with pytest.raises(InvalidConfig) as e:
        model.generate_image(PROMPT, **args)
    assert e.value.fields["field"] == field, e.value


def test_empty_prompt_is_unconditional(model):
    """Documented: an empty prompt generates (the text half is the empty prompt's embedding)."""
    img = model.generate_image("", steps=1, seed=0)
    assert img.shape == (32, 32, 3)


def test_files_that_are_not_diffusion_models(tiny, tmp_path):
    """A stages file for the diffusion pipeline without its stages, and a file of another pipeline
    given to the class: InvalidConfig naming what is wrong."""
    import onnx
    from onnx import TensorProto, helper

    from cyb_llm.convert.onnx_graph import import_onnx_stages

    g = helper.make_graph([helper.make_node("Relu", ["sample"], ["out_sample"])], "g",
                          [helper.make_tensor_value_info("sample", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("out_sample", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "u.onnx"))
    out = str(tmp_path / "unet-only.model")
    import_onnx_stages({"unet": str(tmp_path / "u.onnx")}, out, pipeline="diffusion", progress=False,
                       extra_config=sd_tiny.diffusion_config(tiny[1]))
    with pytest.raises(InvalidConfig, match="missing text_encoder, vae_decoder") as e:
        cyb_llm.load(out)
    assert e.value.fields["field"] == "stages.names"
    other = str(tmp_path / "graph.model")
    import_onnx_stages({"unet": str(tmp_path / "u.onnx")}, other, pipeline="graph", progress=False)
    with pytest.raises(InvalidConfig, match="DiffusionModel does not load it"):
        DiffusionModel(other)
    assert type(cyb_llm.load(tiny[0], threads=1)) is DiffusionModel


# --- the CLI and the server ----------------------------------------------------------------------

def test_imagine_writes_the_png(tiny, model, tmp_path, capsys):
    from PIL import Image

    from cyb_llm.cli import main

    out = tmp_path / "cat.png"
    assert main(["imagine", tiny[0], PROMPT, "-o", str(out), "--steps", "3", "--seed", "12", "--scheduler", "dpmpp_2m",
                 "--guidance", "5", "--negative-prompt", NEGATIVE, "--size", "32x32", "--threads", "2"]) == 0
    err = capsys.readouterr().err
    assert "seed 12" in err and "3 steps (dpmpp_2m, guidance 5)" in err
    want = model.generate_image(PROMPT, negative_prompt=NEGATIVE, steps=3, seed=12, scheduler="dpmpp_2m",
                                guidance_scale=5)
    assert np.array_equal(np.asarray(Image.open(out)), want)


def test_imagine_prints_a_fresh_seed_and_progress(tiny, tmp_path):
    import subprocess

    from serve_proc import child_env

    out = tmp_path / "a.png"
    proc = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "imagine", tiny[0], PROMPT, "-o", str(out),
                           "--steps", "2"], capture_output=True, text=True, env=child_env(CYB_LLM_PROGRESS="1"),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "step 1/2" in proc.stderr and "step 2/2" in proc.stderr
    seed = int(proc.stderr.split("seed ")[1].split()[0])
    from PIL import Image

    m = cyb_llm.load(tiny[0], threads=1)
    assert np.array_equal(np.asarray(Image.open(out)), m.generate_image(PROMPT, steps=2, seed=seed))


@pytest.mark.parametrize("args, msg", [
    (["--steps", "0"], "'steps': must be an integer >= 1"),
    (["--size", "30x32"], "'width': must be a positive multiple of 8"),
    (["--scheduler", "heun"], "unknown scheduler 'heun'"),
    (["--guidance", "nan"], "'guidance_scale': must be a finite number"),
    (["-o", "x.jpg"], "the image is written as a .png file"),
])
def test_imagine_errors(tiny, tmp_path, capsys, args, msg):
    from cyb_llm.cli import main

    out = ["-o", str(tmp_path / "x.png")] if "-o" not in args else []
    assert main(["imagine", tiny[0], PROMPT] + out + args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: InvalidConfig") and msg in err and not (tmp_path / "x.png").exists()


def test_imagine_refuses_other_models(tmp_path, capsys, tiny):
    from cyb_llm.cli import main

    assert main(["speak", tiny[0], "hello", "-o", str(tmp_path / "x.wav")]) == 1
    assert "diffusion models go to cyb-llm imagine, serve" in capsys.readouterr().err


@pytest.fixture(scope="module")
def client(model):
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from test_serve import serving

    with serving({"tiny-sd": model}) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120), url


def _png(b64: str) -> np.ndarray:
    import base64
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))))


def test_images_generate_through_the_client(client, model):
    c, _ = client
    r = c.images.generate(model="tiny-sd", prompt=PROMPT, n=2, size="32x32", response_format="b64_json",
                          extra_body={"seed": 21, "steps": 3, "scheduler": "euler_a"})
    assert len(r.data) == 2 and [d.model_extra["seed"] for d in r.data] == [21, 22]
    for i, d in enumerate(r.data):
        assert np.array_equal(_png(d.b64_json), model.generate_image(PROMPT, steps=3, seed=21 + i, scheduler="euler_a"))
    assert not np.array_equal(_png(r.data[0].b64_json), _png(r.data[1].b64_json))


@pytest.mark.parametrize("kw, param", [
    ({"n": 100}, "n"),
    ({"n": 0}, "n"),
    ({"response_format": "url"}, "response_format"),
    ({"size": "30x30"}, "size"),
    ({"size": "big"}, "size"),
    ({"extra_body": {"steps": 0}}, "steps"),
    ({"extra_body": {"guidance_scale": "high"}}, "guidance_scale"),
    ({"extra_body": {"seed": -3}}, "seed"),
    ({"extra_body": {"scheduler": "heun"}}, "scheduler"),
    ({"prompt": " "}, "prompt"),
])
def test_images_bad_requests(client, kw, param):
    openai = pytest.importorskip("openai")
    c, _ = client
    args = {"model": "tiny-sd", "prompt": PROMPT, **kw}
    with pytest.raises(openai.BadRequestError) as e:
        c.images.generate(**args)
    assert e.value.status_code == 400 and e.value.body["param"] == param, e.value.body
    assert e.value.body["type"] == "invalid_request_error" and e.value.body["message"]


def test_images_url_format_says_why(client):
    import httpx

    _, url = client
    r = httpx.post(url + "/v1/images/generations", json={"model": "tiny-sd", "prompt": PROMPT, "response_format": "url"})
    assert r.status_code == 400 and "b64_json" in r.json()["error"]["message"]


def test_cli_import_of_onnx_stages(tiny, model, tmp_path):
    """`cyb-llm import --stage ... --pipeline diffusion --tokenizer --config-json`: the same model as
    import_onnx_stages (the ONNX route of docs/diffusion.md)."""
    import json

    from cyb_llm.cli import main

    path, sd = tiny
    onnx_dir = os.path.join(os.path.dirname(path), "onnx")
    (tmp_path / "tokenizer.json").write_text(sd.tokenizer.backend_tokenizer.to_str())
    (tmp_path / "diffusion.json").write_text(json.dumps(sd_tiny.diffusion_config(sd)))
    out = str(tmp_path / "cli.model")
    stages = [f"--stage={s}={os.path.join(onnx_dir, s + '.onnx')}" for s in
              ("text_encoder", "unet", "vae_decoder", "vae_encoder")]
    assert main(["import", *stages, "--pipeline", "diffusion", "--tokenizer", str(tmp_path / "tokenizer.json"),
                 "--config-json", str(tmp_path / "diffusion.json"), "-o", out]) == 0
    m = cyb_llm.load(out, threads=2)
    assert np.array_equal(m.generate_image(PROMPT, steps=2, seed=3), model.generate_image(PROMPT, steps=2, seed=3))
    (tmp_path / "bad.json").write_text("[1]")
    assert main(["import", *stages, "--pipeline", "diffusion", "--config-json", str(tmp_path / "bad.json"),
                 "-o", str(tmp_path / "bad.model")]) == 1
