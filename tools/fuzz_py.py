#!/usr/bin/env python3
"""Python fuzz targets: the GGUF importer and the tokenizer/chat path.

    python tools/fuzz_py.py gguf --seconds 60
    python tools/fuzz_py.py chat --seconds 60 [--engine random] [--seed 1]

Targets (seed corpus in tests/data/fuzz/<target>/, written by tools/fuzz_corpus.py --all):
  gguf  the input is a .gguf file: import_model, then load the result, one forward and a decode.
  chat  the input is a chat template, a NUL byte, then message contents separated by NUL bytes:
        the template renders the messages, the tiny model's tokenizer encodes the text and
        decodes ids taken from the input (one by one through the stream decoder as well).

Engines: `atheris` (libFuzzer with coverage of cyb_llm, jinja2 and gguf; the default when
atheris imports) and `random` (a seeded random-mutation loop over the seed corpus: bit flips,
byte insertions and deletions, truncations, splices; no coverage feedback).

A run fails only on a crash, a hang (one input running over --timeout seconds) or an
exception that is neither a cyb_llm.Error nor expected; the failing input is written to
build/fuzz_py/<target>-crash-* (atheris) or build/fuzz_py/<target>-failure-* (random).
Exit status 0 when none was found.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkout_path import ROOT, setup  # noqa: E402

setup()
TARGETS = ("gguf", "chat")
OUT = os.path.join(ROOT, "build", "fuzz_py")


def _import(engine: str):
    """Imports what the targets reach, instrumented for coverage under atheris."""
    if engine == "atheris":
        import atheris

        with atheris.instrument_imports(include=["cyb_llm", "jinja2", "gguf"]):
            import cyb_llm  # noqa: F401
            import cyb_llm.text.chat  # noqa: F401
            import cyb_llm.convert  # noqa: F401
            import cyb_llm.convert.gguf  # noqa: F401
            import jinja2  # noqa: F401
    import cyb_llm  # noqa: F811


class Targets:
    def __init__(self):
        import hostile

        self.tmp = tempfile.mkdtemp(prefix="fuzz_py-")
        self.base = hostile.build_base(os.path.join(OUT, "base"))
        self._model = None

    def model(self):
        import cyb_llm

        if self._model is None:
            self._model = cyb_llm.load(self.base["model"], backend="cpu", threads=1)
        return self._model

    def gguf(self, data: bytes) -> None:
        import cyb_llm
        from cyb_llm.convert import import_model

        src = os.path.join(self.tmp, "in.gguf")
        out = os.path.join(self.tmp, "out.model")
        with open(src, "wb") as f:
            f.write(data)
        try:
            import_model(src, out, progress=False)
            m = cyb_llm.load(out, backend="cpu", threads=1)
            m.new_conversation(8).forward([1 % max(1, m.vocab_size)])
            m.tokenizer.decode(m.tokenizer.encode("hi a"))
        except cyb_llm.Error:
            pass
        finally:
            for p in (src, out):
                if os.path.exists(p):
                    os.remove(p)

    def chat(self, data: bytes) -> None:
        import cyb_llm
        from cyb_llm.text.chat import ChatTemplate

        text = data.decode("utf-8", "replace")
        template, *contents = text.split("\0")
        msgs = [{"role": ("user", "assistant", "system")[i % 3], "content": c} for i, c in enumerate(contents[:8])]
        tok = self.model().tokenizer
        try:
            rendered = ChatTemplate(template).render(msgs) if template else "".join(contents)
            ids = tok.encode(rendered[:20000], add_special_tokens=bool(len(data) & 1))
            tok.decode(ids)
        except cyb_llm.Error:
            pass
        raw = [int.from_bytes(data[i:i + 4], "little", signed=True) for i in range(0, min(len(data), 64) - 3, 4)]
        for ids in (raw, [i % 300 for i in raw]):
            try:
                tok.decode(ids)
            except cyb_llm.Error:
                pass
            d = tok.stream_decoder(skip_special_tokens=bool(len(data) & 2))
            try:
                for i in ids:
                    d.push(i)
                d.flush()
            except cyb_llm.Error:
                pass


def run_atheris(target: str, seconds: int, timeout: int) -> int:
    import atheris

    _import("atheris")
    t = Targets()
    fn = getattr(t, target)
    os.makedirs(OUT, exist_ok=True)
    work = os.path.join(OUT, "corpus", target)
    os.makedirs(work, exist_ok=True)
    argv = [sys.argv[0], work, os.path.join(ROOT, "tests", "data", "fuzz", target), f"-max_total_time={seconds}",
            f"-timeout={timeout}", "-rss_limit_mb=4096", "-max_len=262144", "-print_final_stats=1",
            f"-artifact_prefix={os.path.join(OUT, target)}-"]
    atheris.Setup(argv, fn)
    atheris.Fuzz()  # exits the process: 0 at the end of the time, non-zero with the crashing input saved
    return 0


def run_atheris_logged(target: str, seconds: int, timeout: int) -> int:
    """Runs the atheris engine in a child whose libFuzzer output goes to build/fuzz_py/<target>.log
    (thousands of NEW/REDUCE lines); prints one summary line, or the log's tail on a failure."""
    import re
    import subprocess

    os.makedirs(OUT, exist_ok=True)
    log = os.path.join(OUT, f"{target}.log")
    cmd = [sys.executable, os.path.abspath(__file__), target, "--seconds", str(seconds), "--timeout", str(timeout),
           "--engine", "atheris"]
    with open(log, "wb") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, CYB_FUZZ_PY_CHILD="1"))
    text = open(log, encoding="utf-8", errors="replace").read()
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
    cov = re.findall(r"cov: (\d+)", text)
    if rc != 0:
        print("\n".join(text.splitlines()[-60:]))
        print(f"fuzz_py {target}: FAILED (exit {rc}) after {execs[-1] if execs else '?'} executions; "
              f"the input is in {OUT}/{target}-*; the whole log in {log}")
        return 1
    print(f"fuzz_py {target}: {execs[-1] if execs else '?'} executions in {seconds}s (atheris), "
          f"cov: {cov[-1] if cov else '?'}, no failure")
    return 0


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(6)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and b:
            i = rng.randrange(len(b))
            del b[i:i + rng.randint(1, 16)]
        elif op == 3 and b:
            del b[rng.randrange(len(b)):]
        elif op == 4 and b:  # an interesting integer at a random place
            i = rng.randrange(len(b))
            v = rng.choice([0, 1, 0xFF, 0xFFFF, 0xFFFFFFFF, 2 ** 63, 2 ** 64 - 1, 2 ** 31])
            b[i:i + 8] = v.to_bytes(8, "little")
        elif op == 5:
            other = rng.choice(corpus)
            if other:
                i, j = rng.randrange(len(b) + 1), rng.randrange(len(other))
                b = b[:i] + other[j:j + rng.randint(1, 64)] + b[i:]
    return bytes(b)


def run_random(target: str, seconds: int, timeout: int, seed: int) -> int:
    import signal

    _import("random")
    t = Targets()
    fn = getattr(t, target)
    seed_dir = os.path.join(ROOT, "tests", "data", "fuzz", target)
    corpus = [open(os.path.join(seed_dir, n), "rb").read() for n in sorted(os.listdir(seed_dir))]
    rng = random.Random(seed)
    os.makedirs(OUT, exist_ok=True)
    last = os.path.join(OUT, f"{target}-last-input")  # a crash kills the process: this names the input

    class Hang(Exception):
        pass

    def on_alarm(signum, frame):
        raise Hang()

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, on_alarm)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        data = corpus[n] if n < len(corpus) else mutate(rng, rng.choice(corpus), corpus)
        with open(last, "wb") as f:
            f.write(data)
        if hasattr(signal, "alarm"):
            signal.alarm(timeout)
        try:
            fn(data)
        except BaseException as e:  # noqa: BLE001 - the failure is the finding
            if hasattr(signal, "alarm"):
                signal.alarm(0)
            kind = "hang" if isinstance(e, Hang) else "exception"
            path = os.path.join(OUT, f"{target}-failure-{hashlib.sha1(data).hexdigest()}")
            with open(path, "wb") as f:
                f.write(data)
            if not isinstance(e, Hang):
                traceback.print_exc()
            print(f"fuzz_py {target}: FAILED ({kind}: {type(e).__name__}) after {n} executions; input in {path}")
            return 1
        if hasattr(signal, "alarm"):
            signal.alarm(0)
        n += 1
    os.remove(last)
    print(f"fuzz_py {target}: {n} executions in {seconds}s (random engine, seed {seed}), no failure")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", choices=TARGETS)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--timeout", type=int, default=20, help="seconds one input may run (a hang beyond)")
    ap.add_argument("--engine", choices=("atheris", "random"), default=None)
    ap.add_argument("--seed", type=int, default=1, help="random engine only")
    args = ap.parse_args()
    engine = args.engine
    if engine is None:
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    if engine == "atheris":
        if os.environ.get("CYB_FUZZ_PY_CHILD") == "1":
            return run_atheris(args.target, args.seconds, args.timeout)
        return run_atheris_logged(args.target, args.seconds, args.timeout)
    return run_random(args.target, args.seconds, args.timeout, args.seed)


if __name__ == "__main__":
    sys.exit(main())
