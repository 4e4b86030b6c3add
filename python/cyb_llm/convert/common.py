"""Pieces shared by the importers: the tensor record, structured errors, and the atomic write."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .. import errors as _errors


class TensorRecord(NamedTuple):
    name: str
    encoding: str
    shape: list[int]
    data: Any  # a bytes-like object (numpy uint8 array, memoryview, bytes)


def make_error(cls, message: str, **fields) -> Exception:
    """An instance of a cyb_llm.errors class with its named fields, whatever its constructor."""
    try:
        err = cls(message, **fields)
    except TypeError:
        try:
            err = cls(**fields)
        except TypeError:
            err = cls(message)
    if str(err) != message and message not in str(err):
        try:
            err.args = (message,) + tuple(err.args[1:])
        except Exception:
            pass
    for k, v in fields.items():
        if not hasattr(err, k):
            try:
                setattr(err, k, v)
            except Exception:
                pass
    return err


def nbytes(data: Any) -> int:
    return memoryview(data).nbytes


def with_progress(records: Iterable[TensorRecord], total_bytes: int, enabled: bool, desc: str) -> Iterator[TensorRecord]:
    """Pass records through, advancing a tqdm bar by each tensor's bytes."""
    if not enabled:
        yield from records
        return
    from tqdm import tqdm

    with tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False) as bar:
        for r in records:
            yield r
            bar.update(nbytes(r.data))


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


def errors_module():
    return _errors
