"""Hardening of the native runtime against hostile use (docs/errors.md "Guarantees"):
argument validation at the native entry points, the thread clamp, non-regular
files, one owner per conversation, files changed on disk, interruptible long
forwards, the memory budget."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core, errors, hub

from placement import wgpu_skip_reason



@pytest.fixture(scope="module")
def path():
    return hub.fetch("smollm2")


@pytest.fixture(scope="module")
def model(path):
    return cyb_llm.load(path, threads=2)


def _run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this checkout's package (and _core)."""
    env = dict(os.environ)
    # the cyb_llm this test imported (a development checkout's or the installed one)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cyb_llm.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


# ------------------------------------------------------------- 1. arguments ---

@pytest.mark.parametrize("bad", [2**63, -2**63 - 1, 10**30, 0, -1, 2**31, 2**62])
def test_new_conversation_rejects_out_of_range_sizes(model, bad):
    # 2**63 and beyond used to crash the interpreter (SIGSEGV) in the native call.
    with pytest.raises(errors.InvalidConfig) as e:
        model.new_conversation(max_context=bad)
    assert e.value.field == "max_context"
    with pytest.raises(errors.InvalidConfig):
        model._native.new_conversation(bad)


@pytest.mark.parametrize("bad", ["x", "16", 1.5, None, [16]])
def test_new_conversation_rejects_non_integers(model, bad):
    if bad is None:  # the Python method's default
        assert model.new_conversation(None).max_context == min(model.max_position, 4096)
        with pytest.raises(TypeError):
            model._native.new_conversation(bad)
        return
    with pytest.raises(TypeError):
        model.new_conversation(max_context=bad)
    with pytest.raises(TypeError):
        model._native.new_conversation(bad)


def test_new_conversation_accepts_numpy_integers(model):
    c = model.new_conversation(np.int64(32))
    assert c.max_context == 32


def test_threads_are_clamped_and_validated(path):
    # threads=10**6 used to SIGSEGV; threads=1000 on 2 cores made a 3-token forward take minutes.
    cap = _core.max_threads()
    assert 1 <= cap <= 256
    m = cyb_llm.load(path, threads=10**6)
    assert m.threads == cap
    c = m.new_conversation(8)
    assert np.isfinite(c.forward([1, 2, 3])).all()
    assert cyb_llm.load(path, threads=None).threads == min(_core.physical_cores(), cap)
    assert cyb_llm.load(path, threads=1).threads == 1
    for bad in (-1, -2**40):
        with pytest.raises(errors.InvalidConfig) as e:
            cyb_llm.load(path, threads=bad)
        assert e.value.field == "threads"
    with pytest.raises(errors.InvalidConfig):
        cyb_llm.load(path, threads=2**70)
    with pytest.raises(TypeError):
        cyb_llm.load(path, threads="4")


def test_native_load_rejects_bad_argument_types(path):
    mf = cyb_llm.ModelFile(path)
    with pytest.raises(TypeError):
        _core.load(mf._native, "", False, 1.5)
    with pytest.raises(TypeError):
        _core.load(mf._native, "", False, 0, "", True, "lots")
    with pytest.raises(errors.InvalidConfig):
        _core.load(mf._native, "", False, 0, "", True, 0)


# ------------------------------------------------------- 2. non-regular files ---

def test_fifo_is_rejected_without_blocking(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = str(tmp_path / "pipe.model")
    os.mkfifo(fifo)
    # In a child with a timeout: opening a FIFO used to block forever (no writer).
    r = _run_python(f"""
        import cyb_llm
        from cyb_llm import errors
        for f in (lambda: cyb_llm.ModelFile({fifo!r}), lambda: cyb_llm.load({fifo!r})):
            try:
                f()
            except errors.FormatError as e:
                assert "not a regular file" in str(e), e
            else:
                raise SystemExit("no error")
        print("ok")
        """, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("special", ["dir", "/dev/null"])
def test_directories_and_devices_are_format_errors(tmp_path, special):
    p = str(tmp_path) if special == "dir" else special
    if not os.path.exists(p):
        pytest.skip(f"{p} does not exist here")
    with pytest.raises(errors.FormatError):
        cyb_llm.ModelFile(p)


# ------------------------------------------------------- 3. one owner per conversation ---

def _prompt(vocab, n, seed):
    return np.random.default_rng(seed).integers(0, vocab, size=n).astype(np.int32)


def _prefill_decode(conv, ids, steps):
    out = [conv.forward(ids)]
    for _ in range(steps):
        out.append(conv.forward([int(out[-1].argmax())]))
    return np.stack(out)


@pytest.mark.parametrize("backend", ["cpu", "wgpu+rs"])
def test_two_conversations_of_one_model_run_concurrently(path, backend):
    import threading

    if backend == "wgpu+rs" and wgpu_skip_reason():
        pytest.skip(wgpu_skip_reason())
    m = cyb_llm.load(path, backend=backend, threads=2)
    prompts = [_prompt(m.vocab_size, 20, 1), _prompt(m.vocab_size, 13, 2)]
    steps = 6 if backend == "cpu" else 3  # lavapipe runs a forward in software: keep it short
    sequential = [_prefill_decode(m.new_conversation(64), p, steps) for p in prompts]
    for _round in range(2 if backend == "cpu" else 1):
        convs = [m.new_conversation(64) for _ in prompts]
        results: list = [None, None]
        barrier = threading.Barrier(2)

        def work(i):
            barrier.wait()
            results[i] = _prefill_decode(convs[i], prompts[i], steps)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, ref in zip(results, sequential):
            assert np.isfinite(got).all()
            assert np.array_equal(got, ref)  # bit for bit


@pytest.fixture
def chunk_hook():
    """Installs _core's test hook (called between the chunks of a long forward) for one test."""
    calls = []

    def install(fn):
        def hook(done, total):
            calls.append((done, total))
            fn(done, total)
        _core._set_forward_chunk_hook(hook)
    yield install, calls
    _core._set_forward_chunk_hook(None)


def test_same_conversation_from_a_second_thread_is_refused(model, chunk_hook):
    import threading

    install, calls = chunk_hook
    chunk = _core.forward_chunk_tokens()
    n = chunk + 20
    ids = _prompt(model.vocab_size, n, 3)
    ref = model.new_conversation(n + 1).forward(ids)
    c = model.new_conversation(n + 1)
    seen = []

    def second_thread(done, total):
        # The first forward is between its chunks, holding the conversation.
        def use():
            try:
                c.forward([1])
            except Exception as e:  # noqa: BLE001 - recorded and checked below
                seen.append(e)
        t = threading.Thread(target=use)
        t.start()
        t.join()

    install(second_thread)
    got = c.forward(ids)
    assert calls == [(chunk, n)]
    assert len(seen) == 1 and isinstance(seen[0], errors.InvalidConfig), seen
    assert seen[0].field == "conversation" and "another thread" in str(seen[0])
    assert c.position == n
    assert np.array_equal(got, ref)  # the refused call did not disturb the forward
    assert c.forward([1]).shape == (model.vocab_size,)  # and the conversation is free again


# ------------------------------------------------------- 4. the file changes on disk ---

def _tiny_llama(path, max_position=2048, nan_in=None, seed=0, layers=2):
    """A small random llama .model (f32, ~0.2 MB per layer: read into memory at open)."""
    from cyb_llm.format import write_model

    D, H, KV, HD, L, I, V = 64, 4, 2, 16, layers, 128, 300
    rng = np.random.default_rng(seed)
    tensors = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for l in range(L):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                        p + "self_attn.q_proj.weight": (H * HD, D), p + "self_attn.k_proj.weight": (KV * HD, D),
                        p + "self_attn.v_proj.weight": (KV * HD, D), p + "self_attn.o_proj.weight": (D, H * HD),
                        p + "mlp.gate_proj.weight": (I, D), p + "mlp.up_proj.weight": (I, D),
                        p + "mlp.down_proj.weight": (D, I)})
    out = []
    for name, shape in tensors.items():
        a = (1.0 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else 0.05 * rng.standard_normal(shape)
        a = a.astype(np.float32)
        if name == nan_in:
            a.reshape(-1)[0] = np.nan
        out.append((name, "f32", shape, a))
    config = {"model_type": "llama", "architecture": {
        "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
        "num_hidden_layers": L, "intermediate_size": I, "vocab_size": V, "max_position_embeddings": max_position,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True}}
    write_model(path, name="tiny", config=config, tensors=out)
    return str(path)


def test_mapped_file_truncated_or_rewritten_is_a_format_error(path, tmp_path):
    # Large files are mapped: truncating one under a live model used to SIGBUS at the next forward.
    import shutil

    assert os.path.getsize(path) > 64 << 20  # mapped, not read (the threshold of docs/errors.md)
    for change in ("truncate", "rewrite"):
        copy = str(tmp_path / f"{change}.model")
        shutil.copyfile(path, copy)
        m = cyb_llm.load(copy, threads=2)
        c = m.new_conversation(16)
        c.forward([1, 2, 3])
        if change == "truncate":
            os.truncate(copy, os.path.getsize(copy) // 2)
        else:  # same size, bytes overwritten in place: the modification time moves
            st = os.stat(copy)
            with open(copy, "r+b") as f:
                f.seek(st.st_size - 4096)
                f.write(b"\xff" * 4096)
            os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        with pytest.raises(errors.FormatError) as e:
            c.forward([4])
        assert "changed on disk since load" in str(e.value) and copy in str(e.value)
        assert c.position == 3


def test_small_files_are_read_so_changes_on_disk_cannot_reach_them(tmp_path):
    p = _tiny_llama(tmp_path / "tiny.model")
    m = cyb_llm.load(p, threads=1)
    ref = m.new_conversation(16).forward([1, 2, 3])
    os.truncate(p, 100)
    c = m.new_conversation(16)
    assert np.array_equal(c.forward([1, 2, 3]), ref)
    assert np.array_equal(m.file.tensor("model.norm.weight"), m.file.tensor("model.norm.weight"))


@pytest.mark.parametrize("all_logits", [False, True])
def test_non_finite_weights_give_an_error_not_silent_nan(tmp_path, all_logits):
    p = _tiny_llama(tmp_path / "nan.model", nan_in="model.layers.1.mlp.down_proj.weight")
    m = cyb_llm.load(p, threads=1)
    c = m.new_conversation(16)
    with pytest.raises(errors.FormatError) as e:
        c.forward([1, 2, 3], all_logits=all_logits)
    assert "non-finite logits" in str(e.value) and p in str(e.value)
    assert c.position == 0  # the positions of the failed forward are dropped


# ------------------------------------------------------- 5. interrupting a long forward ---

def test_ctrl_c_between_chunks_stops_at_a_chunk_boundary(tmp_path, chunk_hook):
    import signal

    if not hasattr(signal, "raise_signal"):
        pytest.skip("no signal.raise_signal")
    install, calls = chunk_hook
    m = cyb_llm.load(_tiny_llama(tmp_path / "tiny.model"), threads=1)
    chunk = _core.forward_chunk_tokens()
    n = 3 * chunk + 17
    ids = _prompt(m.vocab_size, n, 4)
    ref_last = m.new_conversation(n + 1).forward(ids)
    ref_all = m.new_conversation(n + 1).forward(ids, all_logits=True)

    c = m.new_conversation(n + 1)
    install(lambda done, total: signal.raise_signal(signal.SIGINT) if done == chunk else None)
    # Python's own SIGINT handler, as in an interactive run (a shell starts background jobs with
    # SIGINT ignored, and then Python installs none).
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            c.forward(ids)
    finally:
        signal.signal(signal.SIGINT, old)
    assert calls == [(chunk, n)]  # stopped after the first chunk, not at the end of the forward
    assert c.position == chunk
    _core._set_forward_chunk_hook(None)
    assert np.array_equal(c.forward(ids[chunk:]), ref_last)  # continuing gives the uninterrupted result
    c.reset_kv_cache()
    assert np.array_equal(c.forward(ids, all_logits=True), ref_all)


# ------------------------------------------------------- 6. the memory budget ---

def test_load_over_the_memory_budget_is_out_of_memory(path):
    with pytest.raises(errors.OutOfMemory) as e:
        cyb_llm.load(path, max_memory=1000)
    assert e.value.requested_bytes >= os.path.getsize(path)
    assert "max_memory=1000" in str(e.value) and "weights" in str(e.value)
    for bad in (0, -5):
        with pytest.raises(errors.InvalidConfig):
            cyb_llm.load(path, max_memory=bad)


def test_new_conversation_over_the_budget_is_out_of_memory(path):
    m = cyb_llm.load(path, threads=2, max_memory=os.path.getsize(path) + (64 << 20))
    held = m._native.charged_bytes
    c = m.new_conversation(1024)  # ~24 MB of KV cache: fits
    assert m._native.charged_bytes > held
    with pytest.raises(errors.OutOfMemory) as e:
        m.new_conversation(m.max_position)  # ~190 MB of KV cache: does not
    assert e.value.requested_bytes > 64 << 20
    assert "new_conversation(max_context=" in str(e.value) and "KV cache" in str(e.value)
    del c
    import gc
    gc.collect()
    assert m._native.charged_bytes == held  # a dropped conversation gives its bytes back


@pytest.mark.parametrize("exec_path", ["curated", "graph"])
def test_huge_but_valid_context_is_out_of_memory_against_available_memory(tmp_path, exec_path):
    # max_position 2**24: a KV cache for all of it would need more than any test machine has.
    layers = 48
    m = cyb_llm.load(_tiny_llama(tmp_path / "long.model", max_position=2**24, layers=layers), threads=1,
                     exec_path=exec_path)
    ctx = 2**24
    need = layers * 2 * 2 * ctx * 16 * 2  # layers x (k, v) x kv heads x positions x head_dim x f16: 103 GB
    try:
        avail = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemAvailable"))) * 1024
    except (OSError, StopIteration):
        pytest.skip("available memory unknown here: no default budget")
    if need < avail:
        pytest.skip("this machine could hold the KV cache")
    with pytest.raises(errors.OutOfMemory) as e:
        m.new_conversation(ctx)
    assert e.value.requested_bytes >= need


# ------------------------------------------------------- 7. amplification ---

@pytest.mark.parametrize("exec_path", ["curated", "graph"])
def test_rope_tables_follow_the_conversations_not_max_position(tmp_path, exec_path):
    # max_position_embeddings = 2**24 used to build RoPE tables for every position at load
    # (1 GiB for this model's 16 rotary dims; 4.4 GB and 20 s for a real one).
    p = _tiny_llama(tmp_path / "long.model", max_position=2**24)
    r = _run_python(f"""
        import resource, numpy as np, cyb_llm
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m = cyb_llm.load({p!r}, threads=1, exec_path={exec_path!r})
        assert m.execution_path == {exec_path!r}
        c = m.new_conversation(4096)
        a = c.forward(list(range(1, 40)), all_logits=True)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
        assert np.isfinite(a).all()
        assert m.max_position == 2**24
        print("grown", grown)
        """)
    assert r.returncode == 0, r.stdout + r.stderr
    grown = int(r.stdout.split("grown")[1])
    assert grown < 256 << 20, grown
