"""The native pipeline registry (csrc/runtime/pipelines.h): one row per kind of model, asked in
order by Model::load; `_core.pipeline_of` is what python/cyb_llm routes by."""
from __future__ import annotations

import pytest

from cyb_llm import _core, errors
from cyb_llm.format import ModelFile


def test_rows_and_routing():
    kinds = [k for k, _ in _core.pipelines()]
    assert kinds == ["encoder", "speech", "graph", "text"]  # the catch-all (text: decoders and graphs) last
    assert _core.pipeline_of("whisper") == "speech"
    assert _core.pipeline_of("onnx-graph") == "graph"
    assert _core.pipeline_of("bert") == "encoder"
    for t in ("llama", "qwen2", "no-such-family"):
        assert _core.pipeline_of(t) == "text"


def test_curated_only_pipelines_refuse_the_graph_path(tmp_path):
    pytest.importorskip("torch")
    from encoder_fixtures import import_encoder

    path = import_encoder(tmp_path)
    with pytest.raises(errors.InvalidConfig, match="encoder models run only the curated path"):
        _core.load(ModelFile(path)._native, exec_path="graph")
    with pytest.raises(errors.BackendInit, match="nox"):
        _core.load(ModelFile(path)._native, backend="nox")


def test_named_array_entry_point_of_a_token_model_is_a_clear_error(tmp_path):
    import numpy as np
    from graph_util import write_tiny

    m = _core.load(ModelFile(write_tiny(tmp_path / "dec.model", model_type="llama"))._native, backend="cpu")
    with pytest.raises(errors.InvalidConfig, match="no named-array entry point"):
        m.run({"x": np.ones(3, np.float32)})
