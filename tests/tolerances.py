"""The tests' tolerances, read from docs/runtime.md's "Tolerances" section (its one definition).

Each row of the tables in that section whose first cell is a key in backticks
(`fast-vs-precise`, `fast-vs-precise/smollm2`, ...) gives one bound: the cell
under the column headed `bound` (or `tolerance`), a plain number such as 3e-3.
`tolerance(key)` returns it (`count(key)` a bound written n/m); a key that is not in the table, or whose bound is
not a plain number, is an error (a test never falls back to a number of its own).
`measured(key)` returns the `measured` cell as text (for messages).
"""
from __future__ import annotations

import functools
import os
import re

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "runtime.md")
_KEY = re.compile(r"^`([a-z0-9][a-z0-9/_.+-]*)`$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, str]]:
    """key -> {column header: cell} for every keyed row of the Tolerances section."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Tolerances\n(.*?)(?=^## )", text, flags=re.M | re.S)
    if not m:
        raise LookupError(f"{DOC}: no '## Tolerances' section")
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for line in m.group(1).splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the |---| line
        k = _KEY.match(cells[0])
        if k:
            if k.group(1) in rows:
                raise LookupError(f"{DOC}: tolerance key {k.group(1)!r} defined twice")
            rows[k.group(1)] = dict(zip(header, cells))
    return rows


def tolerance(key: str) -> float:
    """The bound of `key` as a float (docs/runtime.md, "Tolerances")."""
    row = table().get(key)
    if row is None:
        raise LookupError(f"{DOC}: no tolerance row `{key}` (have: {', '.join(sorted(table()))})")
    cell = row.get("bound", row.get("tolerance"))
    try:
        return float(cell)
    except (TypeError, ValueError):
        raise LookupError(f"{DOC}: tolerance `{key}` is {cell!r}, not a plain number") from None


def count(key: str) -> tuple[int, int]:
    """A bound written as `n/m` (e.g. greedy text identical on 12/12 prompts): (n, m)."""
    row = table().get(key)
    if row is None:
        raise LookupError(f"{DOC}: no tolerance row `{key}` (have: {', '.join(sorted(table()))})")
    cell = row.get("bound", row.get("tolerance", ""))
    m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", cell)
    if not m:
        raise LookupError(f"{DOC}: bound of `{key}` is {cell!r}, not n/m")
    return int(m.group(1)), int(m.group(2))


def measured(key: str) -> str:
    return table()[key].get("measured", "?")


__all__ = ["tolerance", "count", "measured", "table"]
