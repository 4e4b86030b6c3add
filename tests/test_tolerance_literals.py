"""No test file writes a numeric bound of its own (docs/testing.md, "Numeric bounds in tests").

Every bound comes from tests/tolerances.py (docs/runtime.md, "Tolerances"). This test parses
each Python file under tests/ and fails on a numeric literal used as a bound:

- an operand of an ordering comparison (`<`, `<=`, `>`, `>=`) inside an `assert`'s condition,
  through arithmetic, `min`/`max`/`float`/`int` and conditional expressions (not through other
  calls' arguments, subscripts or `abs(...)`: in `x[3] < tol`, `f(x, 4) < tol` and
  `abs(f - 440) < tol` the literals are data, not bounds);
- an `rtol`/`atol`/`rel`/`abs`/`rel_tol`/`abs_tol` argument (keyword, or the positional slots)
  of `assert_allclose`, `allclose`, `isclose`, `assert_close`, `approx`;
- the value of an assignment to a name ending in `TOL`.

Allowed by rule (docs/testing.md states the rule): the numbers 0 and 1; an integer in an
ordering comparison (a count, a size, a length of audio in seconds), unless it scales something
(`100 * tol`), or the comparison holds a difference (`abs(...)`) within it, or it is a
tolerance argument or a `*TOL` value. Floats are never allowed by rule. Every other literal
needs a row in docs/testing.md's table of justified literals (file, literal, context, why);
a row that matches nothing is an error too.
"""
from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
TESTS = os.path.join(ROOT, "tests")
DOC = os.path.join(ROOT, "docs", "testing.md")
SECTION = "## Numeric bounds in tests"

ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
PASS_CALLS = {"min", "max", "float", "int"}
CLOSE_CALLS = {
    # name -> positional indexes of the tolerance arguments
    "assert_allclose": (2, 3),  # numpy.testing.assert_allclose(actual, desired, rtol, atol)
    "allclose": (2, 3),  # numpy/torch allclose(a, b, rtol, atol)
    "isclose": (2, 3),  # numpy/torch isclose(a, b, rtol, atol); math.isclose takes keywords
    "assert_close": (),  # torch.testing.assert_close(actual, expected, *, rtol, atol)
    "approx": (1, 2),  # pytest.approx(expected, rel, abs)
}
TOL_KEYWORDS = {"rtol", "atol", "rel", "abs", "rel_tol", "abs_tol"}


def _num(node: ast.AST) -> float | None:
    """The value of a numeric literal (with its sign), else None."""
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sign * node.value
    return None


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _bound_literals(node: ast.AST, scaled: bool = False):
    """(literal, is a factor of a product) for the literals that make up a bound expression."""
    if _num(node) is not None:
        yield node, scaled
        return
    if isinstance(node, ast.BinOp):
        prod = isinstance(node.op, ast.Mult)
        yield from _bound_literals(node.left, scaled or prod)
        yield from _bound_literals(node.right, scaled or prod)
    elif isinstance(node, ast.UnaryOp):
        yield from _bound_literals(node.operand, scaled)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            yield from _bound_literals(v, scaled)
    elif isinstance(node, ast.IfExp):
        yield from _bound_literals(node.body, scaled)
        yield from _bound_literals(node.orelse, scaled)
    elif isinstance(node, ast.Call) and _call_name(node) in PASS_CALLS:
        for a in node.args:
            yield from _bound_literals(a, scaled)


def _has_abs(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _call_name(n) == "abs" for n in ast.walk(node))


def _signed(root: ast.AST):
    """Every numeric literal under `root`, a signed one once (as `-1e-6`, not also `1e-6`)."""
    inner = {id(n.operand) for n in ast.walk(root)
             if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd))}
    return [n for n in ast.walk(root) if _num(n) is not None and id(n) not in inner]


def findings(path: str, source: str):
    """(literal text, context text, line, allowed by rule) of every bound literal in one file."""
    tree = ast.parse(source, filename=path)

    def seg(node):
        return " ".join((ast.get_source_segment(source, node) or "").split())

    def rule(lit, int_ok):
        v = _num(lit)
        return v in (0, 1) or (int_ok and isinstance(v, int))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Compare) and any(isinstance(op, ORDER) for op in sub.ops):
                    operands = [sub.left, *sub.comparators]
                    diff = any(_has_abs(o) for o in operands)
                    for operand in operands:
                        if isinstance(operand, ast.Call) and _call_name(operand) == "abs":
                            continue
                        for lit, scaled in _bound_literals(operand):
                            yield seg(lit), seg(sub), lit.lineno, rule(lit, not (scaled or diff))
        elif isinstance(node, ast.Call) and _call_name(node) in CLOSE_CALLS:
            slots = CLOSE_CALLS[_call_name(node)]
            args = [a for i, a in enumerate(node.args) if i in slots]
            args += [k.value for k in node.keywords if k.arg in TOL_KEYWORDS]
            for a in args:
                for lit in _signed(a):
                    yield seg(lit), seg(node), lit.lineno, rule(lit, False)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(
                isinstance(t, ast.Name) and t.id.upper().endswith("TOL") for t in targets
            ):
                for lit in _signed(node.value):
                    yield seg(lit), seg(node), lit.lineno, rule(lit, False)


def justified() -> list[tuple[str, str, str]]:
    """(file, literal, context) rows of docs/testing.md's justified-literals table."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"^{re.escape(SECTION)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if not m:
        raise LookupError(f"{DOC}: no {SECTION!r} section")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 4 or not cells[0].startswith("`tests/"):
            continue
        unq = [c[1:-1] if c.startswith("`") and c.endswith("`") else c for c in cells[:3]]
        rows.append((unq[0], unq[1], " ".join(unq[2].replace("\\|", "|").split())))
    return rows


def _py_files():
    out = []
    for d, _, files in os.walk(TESTS):
        for f in files:
            if f.endswith(".py"):
                out.append(os.path.join(d, f))
    return sorted(out)


def scan(paths=None):
    """(relative path, literal, context, line) of every literal neither allowed nor justified,
    and the justified rows that matched nothing."""
    rows = justified()
    used = set()
    bad = []
    for p in paths or _py_files():
        rel = os.path.relpath(p, ROOT).replace(os.sep, "/")
        with open(p, encoding="utf-8") as f:
            src = f.read()
        for lit, ctx, line, ok in findings(p, src):
            if ok:
                continue
            hit = [i for i, (rf, rl, rc) in enumerate(rows) if rf == rel and rl == lit and rc in ctx]
            if hit:
                used.update(hit)
            else:
                bad.append((rel, lit, ctx, line))
    stale = [rows[i] for i in range(len(rows)) if i not in used] if paths is None else []
    return bad, stale


def test_no_bound_literals_outside_the_table():
    bad, stale = scan()
    msg = "\n".join(f"{f}:{line}: literal {lit} in `{ctx}`" for f, lit, ctx, line in bad)
    assert not bad, (
        "numeric bounds written in a test file (move them to docs/runtime.md's Tolerances and "
        "read them with tests/tolerances.py, or justify them in docs/testing.md, "
        f"'{SECTION[3:]}'):\n{msg}"
    )
    assert not stale, f"justified rows in docs/testing.md that match no literal: {stale}"


@pytest.mark.parametrize(
    "src",
    [
        "def t(e):\n    assert e < 1e-3\n",
        "def t(e, r):\n    assert e <= 2 * r\n",
        "def t(e):\n    assert all(x < 5e-2 for x in e)\n",
        "def t(a, b):\n    np.testing.assert_allclose(a, b, rtol=1e-5)\n",
        "def t(a, b):\n    np.testing.assert_allclose(a, b, 0, 1e-6)\n",
        "def t(a, b):\n    assert np.allclose(a, b, atol=-1e-6 + 2e-6)\n",
        "def t(a, b):\n    assert a == pytest.approx(b, rel=1e-3)\n",
        "def t(a, b):\n    assert math.isclose(a, b, abs_tol=0.5)\n",
        "NP_TOL = 1e-4\n",
        "TIME_TOL: float = 0.02\n",
        "def t(f):\n    assert abs(f - 440) < 3\n",
        "def t(e, tol):\n    assert e > 100 * tol\n",
        "def t(y, x):\n    assert np.abs(y - x).max() <= 2\n",
    ],
)
def test_scanner_flags(src):
    lits = [lit for lit, _, _, ok in findings("<planted>", src) if not ok]
    assert lits, src


@pytest.mark.parametrize(
    "src",
    [
        "def t(n):\n    assert n > 0\n",
        "def t(p):\n    assert 0 <= p <= 1\n",
        "def t(x):\n    assert len(x) == 3\n",
        "def t(x, tol):\n    assert x[3] < tol\n",
        "def t(x, tol):\n    assert f(x, 4) < tol\n",
        "def t(a, b, tol):\n    np.testing.assert_allclose(a[2], b, rtol=tol)\n",
        "def t(a, b):\n    assert a == pytest.approx(b)\n",
        "N_TOKENS = 32\n",
        "def t(x):\n    assert len(x) >= 15\n",
        "def t(f, tol):\n    assert abs(f - 440) < tol\n",
    ],
)
def test_scanner_passes(src):
    lits = [lit for lit, _, _, ok in findings("<clean>", src) if not ok]
    assert not lits, (src, lits)


def test_table_orders_its_own_rows():
    """The relations docs/runtime.md states between rows: no per-model fast bound above the
    `fast-vs-precise` outer limit, and precise greedy text never asked to match on fewer
    prompts than fast greedy text of the same model."""
    from tolerances import count, table, tolerance

    outer = tolerance("fast-vs-precise")
    fast = {k: tolerance(k) for k in table() if k.startswith("fast-vs-precise/")}
    assert fast and all(v <= outer for v in fast.values()), (outer, fast)
    pn, pm = count("precise-greedy")
    for k in (k for k in table() if k.startswith("fast-greedy/")):
        n, m = count(k)
        assert pn * m >= n * pm, f"precise-greedy {pn}/{pm} asks fewer matches than {k} {n}/{m}"
