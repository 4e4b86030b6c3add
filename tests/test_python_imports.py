"""The module DAG of python/cyb_llm (tools/check_py_imports.py): leaves <- pipelines <- fronts, no
import cycle, module-level or inside a function, every module importable alone, and the old module
paths kept one release as aliases that warn (DeprecationWarning) and hold the very same objects."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "cyb_llm")

# old path -> the modules that hold its names now
ALIASES = {
    "generate": ["cyb_llm.text.generate"],
    "chat": ["cyb_llm.text.chat"],
    "sampling": ["cyb_llm.text.sampling"],
    "structured": ["cyb_llm.text.structured"],
    "toolcalls": ["cyb_llm.text.toolcalls"],
    "model": ["cyb_llm.base", "cyb_llm.ids", "cyb_llm.text.model"],
    "encoder": ["cyb_llm.encode.model"],
    "whisper": ["cyb_llm.speech.model"],
    "whisper_decode": ["cyb_llm.speech.common", "cyb_llm.speech.search", "cyb_llm.speech.alignment",
                       "cyb_llm.speech.pipeline"],
    "audio": ["cyb_llm.speech.audio"],
    "transcript": ["cyb_llm.speech.transcript"],
}
# modules that need an extra the test machines may lack
EXTRAS = {"cyb_llm.serve.ray": "ray", "cyb_llm.serve.app": "fastapi"}


def _checker():
    spec = importlib.util.spec_from_file_location("check_py_imports", os.path.join(ROOT, "tools", "check_py_imports.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_py_imports", mod)  # the dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_package_follows_the_module_dag():
    chk = _checker()
    errors = chk.check(ROOT)
    assert errors == [], "imports against the module DAG:\n" + "\n".join(errors)
    files = chk.modules(ROOT)
    assert chk.pipeline_packages(files) == ["cyb_llm.diffusion", "cyb_llm.encode", "cyb_llm.graph", "cyb_llm.speech",
                                             "cyb_llm.text",
                                             "cyb_llm.tts"]
    assert {n for n in files if chk.is_shim(n, files)} == {f"cyb_llm.{old}" for old in ALIASES}


def _core_env() -> dict:
    """The environment of a child that imports the source tree's package (python/cyb_llm): its _core
    is the one this session imported (CYB_LLM_CORE_DIR), since `pip install .` keeps the module in
    site-packages, not in python/cyb_llm."""
    from cyb_llm import _core

    return dict(os.environ, CYB_LLM_CORE_DIR=os.environ.get("CYB_LLM_CORE_DIR") or os.path.dirname(_core.__file__))


def test_every_module_imports_alone():
    """Each module of the package imported in a state with no cyb_llm module loaded (a child of a
    fresh interpreter per module): none needs another to be imported first, none imports an alias."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_py_imports.py"), ROOT, "--fresh"],
                       capture_output=True, text=True, timeout=120, env=_core_env())
    assert p.returncode == 0, p.stdout + p.stderr
    n_modules = len(_checker().modules(ROOT))
    skipped = [line.split()[1].rstrip(":") for line in p.stdout.splitlines() if line.startswith("skipped ")]
    assert set(skipped) <= set(EXTRAS), p.stdout  # only a missing extra may skip a module
    assert f"fresh imports: {n_modules - len(skipped)} modules imported alone" in p.stdout, p.stdout
    assert time.perf_counter() - t0 < 60


def _copy_package(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(PKG, root / "python" / "cyb_llm",
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or n.endswith((".so", ".pyd"))])
    return root


def _plant(root, rel: str, code: str) -> None:
    path = root / "python" / "cyb_llm" / rel
    path.write_text(path.read_text() + "\n\n" + code + "\n")


@pytest.mark.parametrize("rel, code, want", [
    # the example: a leaf that reaches a pipeline from inside a function, which closes a cycle
    ("errors.py", "def _planted():\n    from .text import generate  # noqa: F401",
     ["cyb_llm.errors -> cyb_llm.text.generate: a leaf imports the pipeline",
      "import cycle: cyb_llm.errors -> cyb_llm.text.generate -> cyb_llm.errors"]),
    ("ids.py", "def _planted():\n    import cyb_llm.cli  # noqa: F401",
     ["cyb_llm.ids -> cyb_llm.cli: a leaf imports the front", "import cycle:"]),
    ("text/chat.py", "def _planted():\n    from ..speech import audio  # noqa: F401",
     ["cyb_llm.text.chat -> cyb_llm.speech.audio: a pipeline imports another pipeline"]),
    ("encode/model.py", "from ..serve import engine  # noqa: F401,E402",
     ["cyb_llm.encode.model -> cyb_llm.serve.engine: a pipeline imports the front"]),
    ("cli.py", "def _planted():\n    from . import generate  # noqa: F401",
     ["cyb_llm.cli -> cyb_llm.generate: imports the deprecated alias"]),
    # two leaves in a loop: the old format <-> hub knot
    ("hub.py", "def _planted():\n    from .format import ModelFile  # noqa: F401",
     ["import cycle: cyb_llm.format -> cyb_llm.hub -> cyb_llm.format"]),
])
def test_planted_back_edge_fails(tmp_path, capsys, rel, code, want):
    root = _copy_package(tmp_path)
    chk = _checker()
    assert chk.check(str(root)) == []
    _plant(root, rel, code)
    errors = chk.check(str(root))
    for w in want:
        assert any(w in e for e in errors), (w, errors)
    assert all(rel in e for e in errors if "cycle" not in e), errors  # each edge named by file:line
    assert chk.main(["check_py_imports.py", str(root)]) == 1
    out = capsys.readouterr().out
    assert "function-local" in out or "module-level" in out


def test_a_new_pipeline_is_one_row(tmp_path):
    """A pipeline the registry gains is a pipeline for the check too (nothing else edited): a leaf
    importing its package fails, and its package importing the text pipeline fails. (Its package is
    `synth`, a name the package does not have: `tts` exists, a leaf.)"""
    root = _copy_package(tmp_path)
    pkg = root / "python" / "cyb_llm" / "synth"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("from ..base import Model\n\n\nclass SpeechSynth(Model):\n    kind = 'tts'\n")
    reg = root / "python" / "cyb_llm" / "pipelines.py"
    text = reg.read_text()
    row = ('    Pipeline("tts", "cyb_llm.synth.model:SpeechSynth", "speech synthesis models", ("speak",),\n'
           '             ("/v1/audio/speech",), "cyb_llm.serve.engine:EncoderEngine"),\n')
    assert "\n)\n\n_BY_KIND" in text
    reg.write_text(text.replace("\n)\n\n_BY_KIND", "\n" + row + ")\n\n_BY_KIND", 1))
    chk = _checker()
    assert chk.check(str(root)) == []
    assert "cyb_llm.synth" in chk.pipeline_packages(chk.modules(str(root)))
    _plant(root, "synth/model.py", "def _planted():\n    from ..text import chat  # noqa: F401")
    _plant(root, "format.py", "def _planted():\n    from .synth import model  # noqa: F401")
    errors = chk.check(str(root))
    assert any("cyb_llm.synth.model -> cyb_llm.text.chat: a pipeline imports another pipeline" in e for e in errors)
    assert any("cyb_llm.format -> cyb_llm.synth.model: a leaf imports the pipeline" in e for e in errors)


def test_model_types_map_to_pipelines_only_in_the_registry():
    """No module but pipelines.py compares a model type with a string (the routing is the registry's,
    the decision the native core's: _core.pipeline_of). The importer (convert/) reads each source
    family's own config keys by its model type: that is no routing."""
    found = []
    for d, _dirs, files in os.walk(PKG):
        if os.path.relpath(d, PKG).split(os.sep)[0] == "convert":
            continue
        for f in files:
            if not f.endswith(".py") or os.path.join(d, f) == os.path.join(PKG, "pipelines.py"):
                continue
            path = os.path.join(d, f)
            tree = ast.parse(open(path, encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                    sides = [node.left, *node.comparators]
                    if any("model_type" in ast.unparse(s) for s in sides) and \
                            any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                        found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_path_warns_and_holds_the_same_objects(old):
    import cyb_llm

    name = f"cyb_llm.{old}"
    sys.modules.pop(name, None)
    if old in vars(cyb_llm):
        delattr(cyb_llm, old)
    with pytest.warns(DeprecationWarning, match=f"cyb_llm.{old} is deprecated") as rec:
        __import__(name)  # as an import statement does (importlib.import_module would be the importer)
    mod = sys.modules[name]
    # stacklevel=2: the warning names the importing line, here, not the alias
    assert [w.filename for w in rec if issubclass(w.category, DeprecationWarning)] == [__file__]
    for new_name in ALIASES[old]:
        new = importlib.import_module(new_name)
        public = getattr(new, "__all__", None) or [n for n in vars(new) if not n.startswith("_")]
        for n in public:
            assert getattr(mod, n) is getattr(new, n), (old, new_name, n)
    with warnings.catch_warnings():  # a second import is the cached module: no warning
        warnings.simplefilter("error")
        importlib.import_module(name)


def test_normal_use_warns_nothing(real_model):
    """The package never imports an alias: importing it, the CLI and the server, loading a model and
    generating raise no DeprecationWarning when warnings are errors."""
    code = ("import cyb_llm, cyb_llm.cli, cyb_llm.serve, cyb_llm.serve.command, cyb_llm.serve.engine\n"
            "import sys\n"
            "m = cyb_llm.load(sys.argv[1])\n"
            "assert isinstance(m, cyb_llm.TextModel)\n"
            "print(m.create_completion('The capital of France is', max_tokens=2, temperature=0)"
            "['choices'][0]['text'])\n")
    env = dict(_core_env(), PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code, real_model("smollm2")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    if importlib.util.find_spec("fastapi") is not None:
        p = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", "import cyb_llm.serve.app"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
