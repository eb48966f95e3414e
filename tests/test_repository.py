"""Repository-wide checks: notebooks are stored stripped, and import attncourse stays light."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def stored_outputs(path):
    """Return the indices of code cells in the notebook at ``path`` that carry outputs or counts."""
    cells = json.loads(path.read_text())["cells"]
    return [
        i for i, c in enumerate(cells)
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found under chapters/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    assert stored_outputs(path) == [], f"{path.name}: clear outputs before committing"


def test_stored_outputs_detects_an_executed_notebook(tmp_path):
    # fault control: a notebook that carries an output must be flagged
    nb = {"cells": [{"cell_type": "code", "source": "1", "metadata": {}, "execution_count": 1,
                     "outputs": [{"output_type": "execute_result", "data": {"text/plain": "1"},
                                  "metadata": {}, "execution_count": 1}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "executed.ipynb"
    path.write_text(json.dumps(nb))
    assert stored_outputs(path) == [0]


def test_import_attncourse_does_not_import_sympy_or_matplotlib():
    code = "import sys, attncourse; print(sorted(m for m in ('sympy', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
