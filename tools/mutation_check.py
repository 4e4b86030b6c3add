#!/usr/bin/env python3
"""Mutation check: do the tests catch plausible bugs, and are the catches real?

Each mutation below plants one bug in a git worktree of HEAD (build/mutation/src; the checkout
you work in is never touched) and names the behaviour test(s) expected to catch it. For each
mutation, one at a time:

1. apply the bug, rebuild the worktree's native core incrementally (tools/devbuild.sh into
   build/mutation/src/build/dev: ccache, Ninja; WGSL shaders are embedded at build time, so a
   shader mutation is rebuilt too);
2. run the named tests, plus the snapshot tests (SNAPSHOT below: committed digests of our own
   output, such as the nox digest of tests/data/nox_golden.txt), in a clean environment: every
   CYB_* variable is removed except the model cache ones (CYB_LLM_CACHE, CYB_LLM_WHEELS; a
   mutation of the importer gets a fresh cache of imported models, the downloaded sources
   shared), PYTHONPATH is the worktree's python/ alone, CYB_REQUIRE_PEERS=1 (a missing peer
   is a failure, never a quiet skip), and before anything runs the check asserts that
   `cyb_llm._core` loads from the worktree; native test programs come from the worktree's own
   build (tests/test_native.py reads build/dev beside its tests/);
3. record the tests that *failed*: an exception or assertion in the test's call phase (junit's
   `<failure>`), never an error in collection, setup or teardown (junit's `<error>`), never a
   run killed by the time limit (`--timeout`) or a crash of pytest itself;
4. revert the bug, rebuild, and re-run exactly the failed test ids on the unmutated tree:
   only those that pass there count.

A mutation is CAUGHT when at least one behaviour test (not in SNAPSHOT) failed under it and
passed on the unmutated tree. Snapshot catches are listed in their own column: they show that
something changed, not that a claim broke. A mutation that is not caught, or that no longer
applies (its `old` text does not occur exactly once: the code moved, update the mutation), or
does not build, fails the run. Both test runs are printed per mutation.

    python tools/mutation_check.py                    # every mutation, its named tests
    python tools/mutation_check.py rope-shift mask-off    # some of them
    python tools/mutation_check.py --list             # the mutations, their files and tests
    python tools/mutation_check.py --full             # the whole default tier per mutation (hours)
    python tools/mutation_check.py rope-shift --tests "tests/test_generate.py -k eos"   # other catchers

`--full` runs the default tier's test files (tests/, not tests/slow, as `bash tools/test.sh`
runs them, without `-x`) instead of the named tests. The report is a Markdown table (mutation,
bug, file, catching behaviour tests, snapshot catches, seconds), printed and written
into the work folder, build/mutation (as Markdown and as JSON); docs/testing.md keeps the
last one. Part of the slow tier
(`bash tools/test.sh --slow`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
WORK = os.path.join(ROOT, "build", "mutation")
SRC = os.path.join(WORK, "src")
PLUGIN_DIR = os.path.join(WORK, "plugin")

# Tests that compare our own output with a committed digest or file: they catch any change,
# right or wrong. A catch by one of these alone does not count.
SNAPSHOT = ("tests/test_graph.py::test_nox_golden_digest_and_output",
            "tests/test_core_stub.py")

# Variables kept in a mutant's environment (all other CYB_* are removed): caches of downloaded
# models, checked by SHA-256, never builds of the tree.
KEEP_VARS = ("CYB_LLM_CACHE", "CYB_LLM_WHEELS")
# Files whose mutation changes what an import writes: their mutants get a fresh cache of
# imported .model files (a cached import would hide the bug).
IMPORTER_PATHS = ("python/cyb_llm/convert/", "python/cyb_llm/hub.py", "python/cyb_llm/toml_writer.py")


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str   # the bug, in words
    path: str   # file (repository-relative)
    old: str    # text that must occur exactly once
    new: str    # what it becomes
    tests: tuple[str, ...]  # the catching behaviour tests: each one pytest command line (node ids, or a file and -k)

    @property
    def fresh_imports(self) -> bool:
        return self.path.startswith(IMPORTER_PATHS)


MUTATIONS = [
    Mutation("rope-shift", "RoPE angle of position p computed for p + 1",
             "csrc/core/rope.h",
             "const float ang = static_cast<float>(p) * inv[i];",
             "const float ang = static_cast<float>(p + 1) * inv[i];",
             ("tests/test_ops.py -k 'test_rope_table_matches_transformers'",)),
    Mutation("kv-not-reset", "reset_kv_cache keeps the old position (KV cache not reset)",
             "csrc/model/model.h",
             "    position_ = 0;\n    drop_pending();",
             "    drop_pending();",
             ("tests/test_model.py::test_reset_kv_cache_restarts_the_conversation",)),
    Mutation("top-p-dropped", "top_p dropped between SamplingParams and the native sampler",
             "python/cyb_llm/text/sampling.py",
             "top_p=float(self.top_p),",
             "top_p=1.0,",
             ("tests/test_sampling.py -k 'test_sampling_parameters_reach_the_native_sampler'",)),
    Mutation("avx2-block-dot", "one SIMD level wrong: the AVX2 int16 block dot multiplies the second half "
             "of the weights by the first half of the activations",
             "csrc/backends/cpu/kernels_x86_matmul.inc",
             "return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));",
             "return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x0));",
             ("tests/test_ops.py -k 'test_matmul_every_encoding and cpu:avx2'",)),
    Mutation("wgpu-cpu-fallback", "wgpu+rs claims no op: the whole model silently runs on the cpu",
             "csrc/backends/wgpu/wgpu_backend.cc",
             "    return true;\n  };\n  switch (op.kind) {\n    case OpKind::Embedding:",
             "    return true;\n  };\n  if (n_in > 0) return false;\n  switch (op.kind) {\n    case OpKind::Embedding:",
             ("tests/test_ops.py -k 'test_l2_normalize_in_a_graph and wgpu'",)),
    Mutation("gelu-constant", "wrong GELU: tanh approximation's cubic coefficient 0.0447 instead of 0.044715 "
             "(x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86_matmul.inc",
             "_mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x)",
             "_mm256_fmadd_ps(_mm256_set1_ps(0.0447f), x3, x)",
             ("tests/test_ops.py -k 'test_unary and gelu and cpu'",)),
    Mutation("mask-off", "causal mask off: a prefill tile attends to later tokens of the same tile "
             "(AVX-512 attention)",
             "csrc/backends/cpu/attention_avx512.cc",
             "if (j >= lo[i] && j <= p[i]) {",
             "if (j >= lo[i] && j <= jhi) {",
             ("tests/test_ops.py -k 'test_attention and cpu:avx512 and not bad_shapes'",)),
    Mutation("rms-eps-dropped", "RMSNorm without eps (x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86_ops.inc",
             "std::sqrt(sum_squares(x, D) / static_cast<float>(D) + eps);",
             "std::sqrt(sum_squares(x, D) / static_cast<float>(D));",
             ("tests/test_ops.py -k 'test_rms_norm and cpu'",)),
    Mutation("kquant-min-bits", "Q4_K/Q5_K: the high bits of sub-block mins 4-7 taken from the wrong byte",
             "csrc/core/quant.cc",
             "*m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);",
             "*m = (sc[j + 4] >> 4) | ((sc[j - 4] >> 6) << 4);",
             ("tests/test_ops.py -k 'test_dequantize_random_blocks and cpu'",)),
    Mutation("temperature-multiplies", "temperature multiplies the logits instead of dividing them",
             "csrc/sampling/sampler.cc",
             "w[i] /= c.temperature;",
             "w[i] *= c.temperature;",
             ("tests/test_sampling.py -k 'test_single_stage_matches_hf'",)),
    Mutation("eos-ignored", "generation does not stop at an end-of-generation token",
             "python/cyb_llm/text/generate.py",
             "                if token in eos:\n                    finish = \"stop\"",
             "                if token in eos and False:\n                    finish = \"stop\"",
             ("tests/test_generate.py::test_greedy_follows_script_and_stops_at_eos",)),
    Mutation("f16-kv-truncated", "the f16 KV cache write rounds toward zero instead of to nearest (x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86_ops.inc",
             "_mm256_cvtps_ph(load8(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
             "_mm256_cvtps_ph(load8(src + i), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)",
             ("tests/test_ops.py -k 'test_kv_write_then_attention and cpu'",)),
    Mutation("wgsl-matvec-scale-twice", "WGSL matrix-vector kernel: the Q8_0 block scale applied twice "
             "(wgpu+rs, run on lavapipe)",
             "shaders/wgsl/mvdot.wgsl",
             "  return h16(o + 32u) * hsum(s);",
             "  return h16(o + 32u) * h16(o + 32u) * hsum(s);",
             ("tests/test_ops.py -k 'test_matmul_every_encoding and q8_0 and wgpu'",)),
    Mutation("whisper-timestamps-decrease", "Whisper decoder: after text, the last timestamp may repeat "
             "(the 'timestamps never decrease' rule masks one token too few)",
             "python/cyb_llm/speech/search.py",
             "                        logits[tb:t + 1] = NEG_INF",
             "                        logits[tb:t] = NEG_INF",
             ("tests/test_whisper_decode.py -k 'test_rules_match_transformers_processors'",)),
    Mutation("pool-mean-over-padding", "encoder mean pooling averages over the padding too (the mask "
             "ignored for mean)",
             "csrc/backends/cpu/ref_kernels.cc",
             "      if (m[b * S + s] == 0.f) continue;",
             "      if (m[b * S + s] == 0.f && op.a.pool_mode != 1) continue;",
             ("tests/test_encoders_tiny.py -k 'test_embed_pools_the_real_tokens and mean and cpu'",)),
    Mutation("tokenizer-merge-rank-swap", "GGUF byte-level tokenizer import: the ranks of each pair of "
             "neighbouring merges swapped",
             "python/cyb_llm/convert/gguf_tokenizer.py",
             "        merges.append(parts)\n",
             "        merges.append(parts)\n    merges = [merges[i ^ 1] if (i ^ 1) < len(merges) else merges[i] "
             "for i in range(len(merges))]\n",
             ("tests/test_tokenizer.py -k 'test_qwen05_matches_original or test_qwen05_merges_keep_the_original_ranks'",)),
    Mutation("gguf-scale-bytes", "GGUF importer: the two bytes of each Q8_0 block's f16 scale swapped",
             "python/cyb_llm/convert/gguf.py",
             "            raw = data[t.data_offset:t.data_offset + int(t.n_bytes)]\n",
             "            raw = data[t.data_offset:t.data_offset + int(t.n_bytes)]\n"
             "            if t.tensor_type.name == \"Q8_0\":\n"
             "                raw = np.asarray(raw).reshape(-1, 34)[:, [1, 0] + list(range(2, 34))].reshape(-1)\n",
             ("tests/test_import.py -k 'test_every_block_type_copied_byte_for_byte'",)),
    Mutation("server-sampler-crossed", "server: a batched decode step draws every slot's token with the "
             "first slot's sampler (one slot's settings given to the others)",
             "python/cyb_llm/serve/engine.py",
             "[e[\"sampler\"] for e in batch], [e[\"allowed\"] for e in batch])",
             "[batch[0][\"sampler\"] for e in batch], [e[\"allowed\"] for e in batch])",
             ("tests/test_wgpu_sampling.py::test_server_slots_draw_on_the_device",)),
    Mutation("mask-token-unmasked", "structured output: token 0 left unmasked when its word of the "
             "allowed-token bitset is all zero",
             "csrc/sampling/sampler.cc",
             "      std::fill(v, v + len, kNegInf);",
             "      std::fill(v + (k == 0 ? 1 : 0), v + len, kNegInf);",
             ("tests/test_structured.py -k 'test_mask_allowing_one_token_forces_it'",)),
    Mutation("chat-no-generation-prompt", "chat template: add_generation_prompt ignored (never rendered)",
             "python/cyb_llm/text/chat.py",
             "add_generation_prompt=bool(add_generation_prompt),",
             "add_generation_prompt=False,",
             ("tests/test_chat.py -k 'test_render_equals_transformers and True'",)),
]

# Hub models imported with the unmutated build before any mutation (warm_models).
WARM = ("smollm2", "qwen05", "gemma3", "minilm")

# --full: the default tier's files, cheapest first (the files that load real models many
# times, build packages or run subprocesses come last).
LAST = ["test_families_tiny.py", "test_generate_real.py", "test_cli.py", "test_golden_positions.py",
        "test_golden.py", "test_readme.py", "test_cpp_package.py"]

# Writes one JSON line per test phase report: the exact node id, the phase, the outcome.
PLUGIN = '''\
import json, os

_OUT = os.environ["CYB_MUTATION_OUTCOMES"]


def _write(rec):
    with open(_OUT, "a") as f:
        f.write(json.dumps(rec) + "\\n")


def pytest_runtest_logreport(report):
    msg = ""
    if report.failed:
        lr = getattr(report, "longrepr", None)
        crash = getattr(lr, "reprcrash", None)
        msg = crash.message if crash is not None else str(lr)[-300:]
    _write({"id": report.nodeid, "when": report.when, "outcome": report.outcome, "msg": msg[:300]})


def pytest_collectreport(report):
    if report.failed:
        _write({"id": report.nodeid, "when": "collect", "outcome": "failed", "msg": str(report.longrepr)[-300:]})
'''


def sh(cmd, cwd=None, env=None, check=True, capture=False, timeout=None):
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, check=False, text=True, timeout=timeout,
                           stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(cmd, 124, out + f"\n[mutation_check: killed after {timeout} s]\n")
    if check and r.returncode != 0:
        out = (r.stdout or "")[-4000:]
        raise SystemExit(f"mutation_check: `{' '.join(cmd)}` failed ({r.returncode})\n{out}")
    return r


def default_tier_files() -> list[str]:
    names = sorted(f for f in os.listdir(os.path.join(SRC, "tests")) if f.startswith("test_") and f.endswith(".py"))
    first = [n for n in names if n not in LAST]
    return [os.path.join("tests", n) for n in first + [n for n in LAST if n in names]]


def worktree(rev: str) -> None:
    """build/mutation/src at `rev`: a worktree already there (this check's own) is moved to that
    commit with its build kept (the next build is incremental), else one is made."""
    want = sh(["git", "rev-parse", rev], cwd=ROOT, capture=True).stdout.strip()
    ok = os.path.isdir(SRC) and sh(["git", "rev-parse", "--show-toplevel"], cwd=SRC, check=False,
                                   capture=True).stdout.strip() == os.path.realpath(SRC)
    if ok:
        sh(["git", "checkout", "--force", "--detach", want], cwd=SRC, capture=True)
    else:
        if os.path.isdir(SRC):
            sh(["git", "worktree", "remove", "--force", SRC], cwd=ROOT, check=False)
        os.makedirs(WORK, exist_ok=True)
        sh(["git", "worktree", "prune"], cwd=ROOT)
        sh(["git", "worktree", "add", "--detach", "--force", SRC, want], cwd=ROOT, capture=True)
    os.makedirs(PLUGIN_DIR, exist_ok=True)
    with open(os.path.join(PLUGIN_DIR, "cyb_mutation_outcomes.py"), "w") as f:
        f.write(PLUGIN)


def warm_models() -> float:
    """Fetches and imports WARM with the unmutated build, so that no mutant is the first to import a
    model into the shared cache (a native mutation could otherwise be baked into a cached import)."""
    t0 = time.time()
    sh([sys.executable, "-c", f"from cyb_llm import hub\nfor n in {list(WARM)!r}: hub.fetch(n, progress=False)"],
       cwd=SRC, env=clean_env(), capture=True)
    return time.time() - t0


def model_cache() -> str:
    return os.environ.get("CYB_LLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cyb_llm")


def fresh_cache(name: str) -> str:
    """A cache with the downloaded sources of the real one (checked by SHA-256, not written by the
    importer) and no imported .model files."""
    d = os.path.join(WORK, "cache", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    src = os.path.join(model_cache(), "src")
    os.makedirs(src, exist_ok=True)
    os.symlink(src, os.path.join(d, "src"))
    return d


def clean_env(cache: str | None = None) -> dict:
    """The environment of every build and test run: nothing that points at another tree's builds."""
    e = {k: v for k, v in os.environ.items()
         if not (k.startswith("CYB_") and k not in KEEP_VARS)
         and k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME")}
    # The worktree's build keeps the dev build's layout (src/build/dev), so relative paths and thus
    # ccache entries are shared between mutations.
    e.update(CCACHE_BASEDIR=SRC, CCACHE_NOHASHDIR="1",
             PYTHONPATH=os.pathsep.join([os.path.join(SRC, "python"), PLUGIN_DIR]),
             HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", CYB_REQUIRE_PEERS="1")
    if cache is not None:
        e["CYB_LLM_CACHE"] = cache
    return e


def build() -> float:
    t0 = time.time()
    sh(["bash", "tools/devbuild.sh"], cwd=SRC, env=clean_env(), capture=True)
    return time.time() - t0


def check_isolation() -> str:
    """The clean environment loads the worktree's module and native core, not another tree's."""
    r = sh([sys.executable, "-c", "import cyb_llm, cyb_llm._core as c; print(cyb_llm.__file__); print(c.__file__)"],
           cwd=SRC, env=clean_env(), capture=True)
    paths = r.stdout.split()
    bad = [p for p in paths if not os.path.realpath(p).startswith(os.path.realpath(SRC) + os.sep)]
    if len(paths) != 2 or bad:
        raise SystemExit(f"mutation_check: the clean environment does not load the worktree's build: {paths}")
    return paths[1]


def apply(m: Mutation) -> None:
    p = os.path.join(SRC, m.path)
    with open(p, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.old) if m.old else 0
    if n != 1:
        raise LookupError(f"{m.path}: the text to mutate occurs {n} times (expected once): {m.old!r}")
    with open(p, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))


def revert(m: Mutation) -> None:
    sh(["git", "checkout", "--", m.path], cwd=SRC)


def is_snapshot(test_id: str) -> bool:
    return any(test_id == s or test_id.startswith(s + "::") or test_id.startswith(s + "[") for s in SNAPSHOT)


def run_tests(tag: str, selections: list[list[str]], env: dict, timeout: int) -> dict:
    """Runs each selection (pytest arguments) as one pytest process; returns {failed: [ids of tests
    whose call phase failed], errors: [ids with setup/teardown/collection errors], passed, skipped,
    killed: [selections that hit the time limit or crashed pytest]}."""
    res: dict = {"failed": [], "errors": [], "passed": 0, "skipped": 0, "killed": [], "msgs": {}}
    for i, args in enumerate(selections):
        out = os.path.join(WORK, f"{tag}.{i}.jsonl")
        if os.path.exists(out):
            os.remove(out)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "cyb_mutation_outcomes",
               f"--junitxml={os.path.join(WORK, f'{tag}.{i}.xml')}", *args]
        r = sh(cmd, cwd=SRC, env=dict(env, CYB_MUTATION_OUTCOMES=out), check=False, capture=True, timeout=timeout)
        with open(os.path.join(WORK, f"{tag}.{i}.log"), "w") as f:
            f.write(" ".join(shlex.quote(a) for a in cmd) + "\n" + (r.stdout or ""))
        # pytest's exit codes: 0 passed, 1 some failed, 5 none collected; anything else (2
        # interrupted, 3 internal error, 4 usage, a signal, 124 our time limit) is the harness.
        if r.returncode not in (0, 1, 5):
            res["killed"].append(f"{' '.join(args)} (exit {r.returncode})")
        recs = []
        if os.path.exists(out):
            with open(out) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        for rec in recs:
            if rec["outcome"] == "failed":
                if rec["when"] == "call":
                    res["failed"].append(rec["id"])
                    res["msgs"][rec["id"]] = rec["msg"]
                else:
                    res["errors"].append(rec["id"])
            elif rec["when"] == "call":
                res["passed" if rec["outcome"] == "passed" else "skipped"] += 1
            elif rec["when"] == "setup" and rec["outcome"] == "skipped":
                res["skipped"] += 1
    res["failed"] = sorted(set(res["failed"]))
    res["errors"] = sorted(set(res["errors"]) - set(res["failed"]))
    return res


def summary(r: dict) -> str:
    s = f"{len(r['failed'])} failed, {r['passed']} passed, {r['skipped']} skipped, {len(r['errors'])} errors"
    if r["killed"]:
        s += f", harness: {'; '.join(r['killed'])}"
    return s


def selections_of(m: Mutation, full: bool) -> list[list[str]]:
    if full:
        return [default_tier_files()]
    return [shlex.split(t) for t in m.tests] + [list(SNAPSHOT)]


def run_mutation(m: Mutation, full: bool, timeout: int) -> dict:
    t0 = time.time()
    row = {"name": m.name, "what": m.what, "path": m.path, "tests": m.tests, "status": "", "behaviour": [],
           "snapshot": [], "not_confirmed": [], "seconds": 0}
    try:
        apply(m)
    except LookupError as e:
        row["status"] = f"NOT APPLIED: {e}"
        return row
    try:
        try:
            build()  # a mutation must compile; if not, it is stale
        except SystemExit as e:
            row["status"] = f"NOT BUILT: {str(e).splitlines()[0]}"
            return row
        cache = fresh_cache(m.name) if m.fresh_imports else None
        mut = run_tests(f"{m.name}.mutant", selections_of(m, full), clean_env(cache), timeout)
        print(f"   with the bug:  {summary(mut)}", flush=True)
        for t in mut["failed"]:
            print(f"     FAILED {t}: {' '.join(mut['msgs'].get(t, '').split())[:160]}", flush=True)
        for t in mut["errors"]:
            print(f"     error (not counted) {t}", flush=True)
    finally:
        revert(m)
    build()
    clean = {"failed": [], "passed": 0}
    if mut["failed"]:
        cache = fresh_cache(m.name) if m.fresh_imports else None
        clean = run_tests(f"{m.name}.clean", [mut["failed"]], clean_env(cache), timeout)
        print(f"   unmutated, the same {len(mut['failed'])} ids: {summary(clean)}", flush=True)
    confirmed = [t for t in mut["failed"] if t not in clean["failed"] and t not in clean.get("errors", [])]
    if clean.get("killed"):
        confirmed = []  # the unmutated re-run did not finish: nothing confirmed
    row["not_confirmed"] = [t for t in mut["failed"] if t not in confirmed]
    row["behaviour"] = [t for t in confirmed if not is_snapshot(t)]
    row["snapshot"] = [t for t in confirmed if is_snapshot(t)]
    row["status"] = "caught" if row["behaviour"] else "NOT CAUGHT"
    row["seconds"] = round(time.time() - t0)
    return row


def short_ids(ids: list[str], n: int = 3) -> str:
    out = ", ".join(ids[:n])
    return out + (f" and {len(ids) - n} more" if len(ids) > n else "")


def table(rows: list[dict]) -> str:
    out = ["| mutation | bug | file | catching behaviour tests (failed with the bug, passed without) "
           "| snapshot catches | seconds |", "|---|---|---|---|---|---|"]
    for r in rows:
        caught = short_ids(r["behaviour"], 1) if r["status"] == "caught" else r["status"]
        snap = short_ids(r["snapshot"], 1) or "none"
        out.append(f"| `{r['name']}` | {r['what']} | {r['path']} | {caught} | {snap} | {r['seconds']} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests, and exit")
    ap.add_argument("--full", action="store_true", help="run the whole default tier per mutation, not its named tests")
    ap.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per pytest run (default 1800)")
    ap.add_argument("--tests", action="append", default=[], metavar="PYTEST_ARGS",
                    help="run these tests (one pytest command line; repeatable) instead of the mutations' named ones")
    a = ap.parse_args()
    muts = MUTATIONS
    if a.list:
        for m in muts:
            print(f"{m.name:28s} {m.path}: {m.what}")
            for t in m.tests:
                print(f"{'':28s}   test: {t}")
        return 0
    unknown = set(a.names) - {m.name for m in muts}
    if unknown:
        ap.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in muts if not a.names or m.name in a.names]
    if a.tests:
        chosen = [dataclasses.replace(m, tests=tuple(a.tests)) for m in chosen]
    t0 = time.time()
    worktree(a.rev)
    print(f"worktree {SRC} at {a.rev}; unmutated build: {build():.0f} s", flush=True)
    print(f"clean environment loads {check_isolation()}", flush=True)
    print(f"models imported with the unmutated build: {', '.join(WARM)} ({warm_models():.0f} s)", flush=True)
    rows = []
    for m in chosen:
        print(f"-- {m.name}: {m.what}", flush=True)
        rows.append(run_mutation(m, a.full, a.timeout))
        r = rows[-1]
        print(f"   {r['status']}; behaviour: {short_ids(r['behaviour']) or 'none'}; snapshot: "
              f"{short_ids(r['snapshot']) or 'none'}; failing unmutated too (not counted): "
              f"{short_ids(r['not_confirmed']) or 'none'} ({r['seconds']} s)", flush=True)
        with open(os.path.join(WORK, "report.json"), "w") as f:  # so far (a long run can be read as it goes)
            json.dump(rows, f, indent=1)
    report = table(rows)
    total = round(time.time() - t0)
    with open(os.path.join(WORK, "report.md"), "w") as f:
        f.write(report + f"\n\ntotal: {total} s\n")
    with open(os.path.join(WORK, "report.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n" + report + f"\n\ntotal: {total} s")
    missed = [r["name"] for r in rows if r["status"] != "caught"]
    if missed:
        print(f"mutation_check: not caught, not applied or not built: {', '.join(missed)}", file=sys.stderr)
        return 1
    print(f"mutation_check: {len(rows)}/{len(rows)} caught by a behaviour test that passes unmutated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
