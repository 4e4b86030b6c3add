"""Pieces shared by the importers: the tensor record, structured errors, and the atomic write."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, NamedTuple



class TensorRecord(NamedTuple):
    name: str
    encoding: str
    shape: list[int]
    data: Any  # a bytes-like object (numpy uint8 array, memoryview, bytes)


def make_error(cls, message: str, **fields) -> Exception:
    """An instance of a cyb_llm.errors class with its named fields and a readable message."""
    known = {k: v for k, v in fields.items() if k in getattr(cls, "field_names", ())}
    return cls(message=message, **known)


def check_layer_count(value: Any, n_tensors: int, key: str, error_cls) -> int:
    """The checkpoint's layer count as an int, bounded by its tensor count (every layer holds at least
    one tensor): per-layer tables built from the count (layer types, required tensor names) stay as
    small as the file itself. `error_cls(...)` names `key` otherwise."""
    bound = max(n_tensors, 1)  # a file without tensors fails later, on the first tensor it lacks
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= bound:
        raise make_error(error_cls, f"{key} = {value!r} is not a layer count of this checkpoint "
                         f"(a positive integer, at most its {n_tensors} tensors)", field=key,
                         reason=f"must be a positive integer <= {bound}, got {value!r}")
    return value


def nbytes(data: Any) -> int:
    return memoryview(data).nbytes


class Progress:
    """A tqdm bar over the bytes of the tensors written; used as write_model's progress callback.
    A finished import leaves the bar at 100 % on a line of its own (what comes next, such as
    `cyb-llm run`'s timing line, starts on the next line); a failed one leaves it where it stopped."""

    def __init__(self, total_bytes: int, enabled: bool, desc: str):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=True)

    def __call__(self, name: str, nbytes: int) -> None:
        if self.bar is not None:
            self.bar.update(nbytes)

    def close(self, done: bool = False) -> None:
        """Ends the bar (and its line); `done`: the import finished, so the bar shows 100 %
        (tqdm redraws at most every 0.1 s, so its last drawing may be older)."""
        if self.bar is not None:
            if done:
                self.bar.n = self.bar.total
                self.bar.refresh()
            self.bar.close()


def write_atomically(out: str, write: Callable[[str], None]) -> None:
    """Run `write(tmp_path)` and move the result to `out` only when it succeeded: a failed import
    leaves nothing behind (no partial file, no temporary)."""
    out = os.fspath(out)
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out) + ".", suffix=".partial", dir=d)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_import(out: str, records: list, *, name: str, config: dict, progress: bool, **sections: Any) -> None:
    """An importer's last step: write_model of `records` ((name, encoding, shape, data) tuples) with
    `config` and the other sections (graph=, stages=, tokenizer_json=, extra_sections=, ...) into
    `out` atomically (write_atomically), under a progress bar over the records' bytes."""
    import numpy as np

    from ..writer import write_model

    total = sum(int(np.asarray(r[3]).nbytes) for r in records)

    def write(tmp: str) -> None:
        bar = Progress(total, progress, f"import {os.path.basename(os.fspath(out))}")
        done = False
        try:
            write_model(tmp, name=name, config=config, tensors=records, progress=bar, **sections)
            done = True
        finally:
            bar.close(done)

    write_atomically(out, write)
