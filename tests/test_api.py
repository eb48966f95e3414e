"""One import path per public name: the chapters take every core name from
``attncourse`` itself (listed in ``attncourse.__all__``), the byte-pair tokenizer from
``attncourse.bpe``, and every learner checker from ``attncourse.kit.exercises``; no
chapter touches a private name."""

import ast
import json
import pathlib
import types

import pytest

import attncourse as ac

CHAPTERS = sorted((pathlib.Path(__file__).resolve().parents[1] / "chapters").glob(
    "*.ipynb"))


def code(path):
    """A chapter's code cells as one module (IPython magics left out)."""
    cells = json.loads(path.read_text())["cells"]
    lines = [line for cell in cells if cell["cell_type"] == "code"
             for line in "".join(cell["source"]).splitlines()
             if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def misuses(source):
    """What in ``source`` breaks the rule: a core name not taken from ``attncourse``,
    a name that is not in ``__all__``, a private name, a checker taken from a
    submodule of ``attncourse.kit.exercises``."""
    found, modules = [], {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attncourse"):
                    modules[alias.asname or alias.name] = alias.name
                    if alias.name not in ("attncourse",):
                        found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "attncourse"):
            module, names = node.module, [a.name for a in node.names]
            found += [f"{module}.{n}" for n in names if n.startswith("_")]
            if module == "attncourse":
                found += [f"attncourse.{n}" for n in names
                          if n not in ac.__all__ and n != "kit"]
            elif module.startswith("attncourse.kit.exercises."):
                found.append(f"from {module} import …")
            elif not module.startswith(("attncourse.kit", "attncourse.bpe")):
                found.append(f"from {module} import …")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and modules.get(node.value.id) == "attncourse"):
            if node.attr not in ac.__all__ and node.attr != "kit":
                found.append(f"ac.{node.attr}")
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapters_take_core_names_from_attncourse(path):
    assert misuses(code(path)) == []


@pytest.mark.parametrize("source, fault", [
    ("from attncourse.model import init_model", "from attncourse.model import …"),
    ("import attncourse.train as training", "import attncourse.train"),
    ("import attncourse as ac\nac.model_forward\nac._PASSED", "ac._PASSED"),
    ("from attncourse.kit.exercises.model import check_model_backward",
     "from attncourse.kit.exercises.model import …"),
    ("from attncourse.kit.exercises import _base", "attncourse.kit.exercises._base"),
    ("from attncourse import shaped", "attncourse.shaped"),
])
def test_a_planted_misuse_is_reported(source, fault):
    assert misuses(source) == [fault]


def test_all_lists_the_core_functions_and_two_subpackages():
    values = {name: getattr(ac, name) for name in ac.__all__}
    assert [n for n, v in values.items() if isinstance(v, types.ModuleType)] == [
        "bpe", "layers"]
    assert all(not n.startswith("_") for n in values)
    assert len(set(ac.__all__)) == len(ac.__all__)
    # every name is the object its module defines (no copies, no wrappers)
    for name, value in values.items():
        if callable(value) and not isinstance(value, types.ModuleType):
            module = __import__(value.__module__, fromlist=["_"])
            assert getattr(module, name) is value, name
