"""webgpu:dawn: the wgpu+rs backend (same WGSL kernels, same host code) on Google's Dawn.

The native core never links a WebGPU implementation: it fills one table of procedure pointers by
name at run time. For `backend="webgpu:dawn"` the table comes from Dawn, compiled into the
`wgpudawn` package (a cffi module): this module takes the address of its `wgpuGetProcAddress` and
hands it to `_core.wgpu_use_dawn` before the backend starts. `cyb_llm.load(..., backend=
"webgpu:dawn")` (and `_core.run_op(..., backend="webgpu:dawn")`) call `attach()` themselves.

One WebGPU implementation a process: once Dawn is attached, `wgpu+rs` (wgpu-native) cannot start
in the same process, and the other way round. C and C++ programs (no Python) use wgpu-native.

Before handing the procedures over, `attach()` compares every struct size, field offset and enum
value the backend passes across the table (`_core.wgpu_abi()`, from the wgpu-native header the
core was compiled against) with the wgpudawn module's own (cffi compiled it against Dawn's header),
and refuses on any difference. docs/webgpu-dawn.md has the rest.
"""
from __future__ import annotations

from typing import Any

from . import _core
from .errors import BackendInit

#: The install line a missing package names.
INSTALL = 'pip install "cyb_llm[gpu-dawn]"'
#: The wgpudawn release the backend was written and checked against (pyproject.toml's extra).
TESTED_VERSION = "0.32.0.4"

_attached: dict[str, Any] = {}


def _import() -> tuple[Any, Any, str]:
    """wgpudawn's cffi (ffi, lib) and its version; BackendInit naming the extra when it is missing."""
    try:
        import wgpudawn
        from wgpudawn._lib import ffi, lib
    except ImportError as e:
        raise BackendInit("webgpu:dawn", f"the wgpudawn package is not importable ({e}): {INSTALL} "
                                         "(Python >= 3.11; Linux or Windows)") from None
    return ffi, lib, str(getattr(wgpudawn, "__version__", "?"))


def abi_mismatches(ffi: Any, lib: Any) -> list[str]:
    """Every entry of `_core.wgpu_abi()` that Dawn's module (ffi, lib) gives another value, or
    does not know: ["offsetof WGPULimits.maxBufferSize: core 88, dawn 96", ...]."""
    out = []
    for key, want in sorted(_core.wgpu_abi().items()):
        try:
            if key.startswith("sizeof "):
                got = ffi.sizeof(key[len("sizeof "):])
            elif key.startswith("offsetof "):
                struct, field = key[len("offsetof "):].split(".", 1)
                got = ffi.offsetof(struct, field)
            else:
                got = int(getattr(lib, key))
        except Exception as e:  # cffi raises its own error types for unknown names
            out.append(f"{key}: core {want}, dawn unknown ({type(e).__name__}: {e})")
            continue
        if got != want:
            out.append(f"{key}: core {want}, dawn {got}")
    return out


def available() -> bool:
    """True when wgpudawn imports (whether Dawn then finds an adapter is another matter)."""
    try:
        _import()
        return True
    except BackendInit:
        return False


def attach() -> dict[str, Any]:
    """Hands Dawn's procedures to the native core (once a process; later calls return the same
    facts). Returns {"version": wgpudawn's version, "dawn": Dawn's release, "address": ...}.

    BackendInit when wgpudawn is missing (naming `pip install "cyb_llm[gpu-dawn]"`), when its
    declarations differ from the core's, or when this process already runs wgpu-native."""
    if _attached and _core.wgpu_dawn_handed():
        return {k: v for k, v in _attached.items() if k != "lib"}
    ffi, lib, version = _import()
    bad = abi_mismatches(ffi, lib)
    if bad:
        raise BackendInit("webgpu:dawn", f"wgpudawn {version} declares the WebGPU interface differently from "
                                         f"this build ({len(bad)} differences; tested: wgpudawn {TESTED_VERSION}): "
                                         + "; ".join(bad[:8]))
    address = int(ffi.cast("uintptr_t", ffi.addressof(lib, "wgpuGetProcAddress")))
    _core.wgpu_use_dawn(address)
    try:
        from wgpudawn._lib import dawn_version
    except ImportError:
        dawn_version = "?"
    _attached.update(version=version, dawn=dawn_version, address=address, lib=lib)
    return {k: v for k, v in _attached.items() if k != "lib"}
