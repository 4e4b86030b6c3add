"""espeak-ng for the TTS frontend: the build that piper-tts ships, reached without importing piper.

piper-tts (the `tts` extra) carries espeak-ng 1.52.0.1 (its own fork, with
`espeak_TextToPhonemesWithTerminator`) compiled into a small CPython extension,
`piper/espeakbridge` (.so / .pyd, abi3), next to its `piper/espeak-ng-data`. Using that very
binary and data is what makes the phoneme ids equal to Piper's (docs/tts.md, "espeak-ng
access", has the comparison with the other builds). `import piper...` would run
piper/__init__.py, which imports onnxruntime, so this module only *locates* the package
(`importlib.util.find_spec` of a top-level name does not execute it) and loads the extension
file directly with the import machinery, under its own name, outside sys.modules.

The bridge holds espeak-ng's global state; every call goes through one lock (as Piper's does).
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import threading
from types import ModuleType

from ..errors import BackendInit, InvalidConfig

INSTALL = "pip install 'cyb_llm[tts]'"
#: The piper-tts releases whose Python frontend this package follows (piper/phonemize_espeak.py,
#: piper/voice.py): the extra pins the same range.
PIPER_MIN, PIPER_BELOW = (1, 8), (1, 9)

_lock = threading.Lock()
_bridge: ModuleType | None = None


def _missing(reason: str) -> InvalidConfig:
    return InvalidConfig(field="piper-tts", reason=f"{reason}; the TTS frontend runs espeak-ng from "
                                                   f"piper-tts 1.8: {INSTALL}")


def piper_dir() -> str:
    """The folder of the installed piper package, checked for the bridge's version; piper is not imported."""
    try:
        version = importlib.metadata.version("piper-tts")
    except importlib.metadata.PackageNotFoundError:
        raise _missing("piper-tts is not installed") from None
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None or not (PIPER_MIN <= (int(m[1]), int(m[2])) < PIPER_BELOW):
        raise _missing(f"piper-tts {version} is installed, this frontend follows 1.8.x")
    spec = importlib.util.find_spec("piper")  # a top-level name: located, not executed
    if spec is None or not spec.submodule_search_locations:
        raise _missing("the piper package of piper-tts cannot be found")
    return list(spec.submodule_search_locations)[0]


def _bridge_path(folder: str) -> str:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "espeakbridge" + suffix)
        if os.path.isfile(path):
            return path
    raise _missing(f"piper-tts has no espeakbridge extension in {folder}")


def _load() -> ModuleType:
    """The bridge module, initialized with piper's espeak-ng data (once per process). Caller holds _lock."""
    global _bridge
    if _bridge is not None:
        return _bridge
    folder = piper_dir()
    data = os.path.join(folder, "espeak-ng-data")
    if not os.path.isdir(data):
        raise _missing(f"piper-tts has no espeak-ng-data folder in {folder}")
    path = _bridge_path(folder)
    # The extension's init function is PyInit_espeakbridge: the module name must end in "espeakbridge".
    loader = importlib.machinery.ExtensionFileLoader("espeakbridge", path)
    spec = importlib.util.spec_from_file_location("espeakbridge", path, loader=loader)
    if spec is None:
        raise _missing(f"cannot load {path}")
    try:
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except ImportError as e:
        raise BackendInit(backend="espeak-ng", reason=f"loading {path}: {e}") from None
    for fn in ("initialize", "set_voice", "get_phonemes"):
        if not callable(getattr(mod, fn, None)):
            raise _missing(f"{path} has no {fn}()")
    try:
        mod.initialize(data)
    except RuntimeError as e:
        raise BackendInit(backend="espeak-ng", reason=f"{e} (data {data})") from None
    _bridge = mod
    return mod


def clauses(voice: str, text: str) -> list[tuple[str, str, bool]]:
    """espeak-ng's clauses of `text` with `voice`: (IPA phonemes, terminator, ends a sentence) each.

    The terminator is one of . ? ! , : ; or "" (espeak-ng's clause types, as piper's bridge
    names them). `text` must not hold NUL or lone surrogates (the caller checks)."""
    with _lock:
        bridge = _load()
        try:
            bridge.set_voice(voice)
        except RuntimeError:
            raise InvalidConfig(field="espeak.voice",
                                reason=f"espeak-ng has no voice {voice!r}") from None
        return bridge.get_phonemes(text)
