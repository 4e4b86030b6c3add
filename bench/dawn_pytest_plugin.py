"""pytest plugin: the op matrix's wgpu+rs row (tests/test_ops.py) run on webgpu:dawn.

    python -m pytest -p dawn_pytest_plugin tests/test_ops.py -k wgpu     (bench/ on PYTHONPATH)

The same backend code runs on Dawn's WebGPU procedures instead of wgpu-native's (docs/webgpu-dawn.md),
so the matrix, its tolerances and its expected declines (tests/data/expected_declines.json) apply
unchanged: this plugin hands Dawn's procedures over before collection (the process's device is then
Dawn's), and `_core.run_op(..., "wgpu+rs")` runs on "webgpu:dawn", reporting back under the row's
name. Tests that load whole models by backend name (their dispatch records would name webgpu:dawn)
are skipped here; bench/dawn_check.py compares whole models. bench/dawn_check.py uses this plugin.
"""
from __future__ import annotations

import pytest

WGPU, DAWN = "wgpu+rs", "webgpu:dawn"


def pytest_configure(config):
    from cyb_llm import _core, webgpu_dawn

    webgpu_dawn.attach()
    run_op, last = _core.run_op, _core.last_run_op_backend

    def run_op_on_dawn(*args, **kwargs):
        args = list(args)
        if kwargs.get("backend") == WGPU:
            kwargs["backend"] = DAWN
        elif len(args) >= 6 and args[5] == WGPU:
            args[5] = DAWN
        return run_op(*args, **kwargs)

    def last_run_op_backend():
        ran = last()
        return WGPU if ran == DAWN else ran

    _core.run_op = run_op_on_dawn
    _core.last_run_op_backend = last_run_op_backend


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="loads a model by backend name: bench/dawn_check.py compares whole models on Dawn")
    for item in items:
        if "test_l2_normalize_in_a_graph" in item.nodeid:
            item.add_marker(skip)


def pytest_report_header(config):
    from cyb_llm import _core

    i = _core.wgpu_info(True)
    return f"wgpu+rs row on webgpu:dawn: {i['adapter']} ({i['backend_type']}, impl {i['impl']})"
