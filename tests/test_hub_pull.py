"""`cyb-llm pull hf://...`, `list`, `rm` against a stand-in Hub on loopback (tests/hf_standin.py):
pull, an interrupted download resumed, a second pull from the HF cache, listing and removal;
running a .gguf directly imports one copy keyed by content."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hf_standin import StandInHub

REF = "hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q4_1.gguf"


def _cli(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "cyb_llm.cli", *args], env=env, capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    if check:
        assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ)
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        e.pop(k, None)
    e.update(CYB_LLM_CACHE=str(tmp_path / "cyb"), HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    if e.get("PYTHONPATH"):
        e["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in e["PYTHONPATH"].split(os.pathsep) if p)
    return e


def test_pull_resume_cache_list_rm(env, real_source):
    gguf = real_source("smollm2")
    size = os.path.getsize(gguf)
    repo = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    name = "smollm2-135m-instruct-q4_1.gguf"
    with StandInHub({repo: {name: gguf}}, cut_first_get_at=size // 3) as hub:
        env["HF_ENDPOINT"] = hub.url
        out = _cli(env, "pull", REF).stdout.strip().splitlines()[-1]
        assert out.endswith(".model") and os.path.isfile(out)
        # the first body GET was cut at a third; the download resumed from what had reached the disk
        gets = hub.body_gets(name)
        starts = [int(r[6:].split("-")[0]) for r in gets[1:] if r and r.startswith("bytes=")]
        assert gets[0] is None and starts and 0 < starts[0] <= size // 3, gets
        # the GGUF is in the shared HF cache, once, and byte-identical
        blobs = [os.path.join(d, f) for d, _, fs in os.walk(env["HF_HOME"]) for f in fs if "blobs" in d]
        assert len(blobs) == 1 and os.path.getsize(blobs[0]) == size
        assert hub.sha256(blobs[0]) == hub.sha256(gguf)
        assert not [f for d, _, fs in os.walk(env["CYB_LLM_CACHE"]) for f in fs if f.endswith(".gguf")]

        # second pull: from the cache (no body download), same .model
        n_gets = len(hub.body_gets(name))
        again = _cli(env, "pull", REF).stdout.strip().splitlines()[-1]
        assert again == out and len(hub.body_gets(name)) == n_gets

        # repository without a file name: the one .gguf it holds
        assert _cli(env, "pull", f"hf://{repo}").stdout.strip().splitlines()[-1] == out

        # run by the reference
        r = _cli(env, "run", REF, "What is the capital of France?", "--max-tokens", "12", "-q")
        assert "Paris" in r.stdout

    listing = _cli(env, "list").stdout
    assert REF in listing and "llama" in listing and "q4_1" in listing
    removed = _cli(env, "rm", REF).stdout
    assert "removed" in removed and not os.path.exists(out)
    assert REF not in _cli(env, "list").stdout
    r = _cli(env, "rm", REF, check=False)
    assert r.returncode == 1 and "FetchError" in r.stderr


def test_pull_errors_are_clean(env, real_source):
    with StandInHub({"org/two": {"a.gguf": real_source("smollm2"), "b.gguf": real_source("smollm2")}}) as hub:
        env["HF_ENDPOINT"] = hub.url
        r = _cli(env, "pull", "hf://org/two", check=False)
        assert r.returncode == 1 and "several .gguf files" in r.stderr and "hf://org/two/a.gguf" in r.stderr
        r = _cli(env, "pull", "hf://org/two/missing.gguf", check=False)
        assert r.returncode == 1 and "FetchError" in r.stderr
        r = _cli(env, "pull", "hf://justone", check=False)
        assert r.returncode == 1 and "hf://ORG/REPO" in r.stderr


def test_gguf_import_is_keyed_by_content(env, real_source, tmp_path):
    a = tmp_path / "a" / "m.gguf"
    b = tmp_path / "b" / "m.gguf"
    for p in (a, b):
        p.parent.mkdir()
        shutil.copyfile(real_source("smollm2"), p)
    r1 = _cli(env, "run", str(a), "Hi", "--max-tokens", "2", "-q")
    assert "imported" in r1.stderr and "->" in r1.stderr
    os.utime(b, (1, 1))  # another path and mtime, the same bytes
    r2 = _cli(env, "run", str(b), "Hi", "--max-tokens", "2", "-q")
    assert "imported" not in r2.stderr
    models = [f for f in os.listdir(os.path.join(env["CYB_LLM_CACHE"], "imported")) if f.endswith(".model")]
    assert len(models) == 1
