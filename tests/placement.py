"""Where the ops of a model ran, from `model.dispatch_records` (docs/runtime.md, "Dispatch").

A cross-backend comparison proves nothing if the model under test silently ran
on the CPU (CPU compared with CPU passes): every test that runs a whole model on
another backend calls `assert_ran_on(model, backend)` after its forwards.
"""
from __future__ import annotations


def wgpu_skip_reason() -> str | None:
    """None when a wgpu+rs adapter starts here (lavapipe counts), else why not (a skip reason)."""
    from cyb_llm import _core

    try:
        _core.wgpu_info(True)
        return None
    except Exception as e:  # no library or no adapter
        return f"no wgpu+rs adapter: {e}"


def assert_ran_on(model, backend: str, what: str = "") -> None:
    """Every op dispatched so far ran on `backend`, none as a fallback (the backends under test
    claim every op of the decoder models: docs/runtime.md, "Backends")."""
    recs = model.dispatch_records
    assert recs, f"{what}: no dispatch records, nothing ran"
    off = sorted({(r["label"], r["op"], r["backend"] + (" (fallback)" if r["fallback"] else ""))
                  for r in recs if r["backend"] != backend or r["fallback"]})
    assert not off, f"{what}: {len(off)} op(s) did not run on {backend}: {off[:8]}"
