"""`cyb-llm serve` as a child process, for tests that watch the server from outside (its RSS and
open files in /proc, its exit status): tests/test_serve_load.py, tests/slow/test_serve_ray.py."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

import httpx

import cyb_llm


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def child_env(**extra: str) -> dict:
    """The environment of a child interpreter: the cyb_llm this test imported comes first, with the
    _core it imported (CYB_LLM_CORE_DIR: after `pip install .` the module is in site-packages, not
    next to the source tree's package); `extra` variables on top."""
    from cyb_llm import _core

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(cyb_llm.__file__)),
                                                    env.get("PYTHONPATH", "")] if p)
    env["CYB_LLM_CORE_DIR"] = os.environ.get("CYB_LLM_CORE_DIR") or os.path.dirname(_core.__file__)
    env.update(extra)
    return env


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: str):
        self.proc, self.url, self.log = proc, url, log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status(self, field: str) -> int:
        """A /proc/<pid>/status field in kB (VmRSS, VmHWM, Threads)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()


@contextmanager
def cli_server(*args: str, start_timeout: float = 120.0, stop_timeout: float = 60.0) -> Iterator[Server]:
    """`cyb-llm serve ARGS --port <free>` in a child process, yielded once GET /health answers 200;
    stopped with SIGTERM afterwards (killed if it does not exit). Its output goes to a log file."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="cyb-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "cyb_llm.cli", "serve", *args, "--port", str(port)],
                            env=child_env(), stdout=log, stderr=subprocess.STDOUT)
    srv = Server(proc, f"http://127.0.0.1:{port}", log.name)
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(srv.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"the server exited with {proc.returncode}:\n{srv.log_text()[-4000:]}"
            assert time.time() - t0 < start_timeout, f"the server did not start:\n{srv.log_text()[-4000:]}"
            time.sleep(0.2)
        yield srv
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def run_held(batcher, threads, n: int, timeout: float) -> None:
    """Starts the request threads with the server's batcher held until n of them wait on one
    decode step (Batcher.hold: no time window), joins them, and releases the batcher whatever
    happens, so a failing test never leaves the server held."""
    batcher.hold(n)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    finally:
        batcher.release()
