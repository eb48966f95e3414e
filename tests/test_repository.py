"""Repository-wide checks: notebooks are stored stripped, code lines are at most 88
characters, import attncourse stays light, and its API is curated."""

import importlib
import json
import pathlib
import pkgutil
import subprocess
import sys

import pytest
from packaging.utils import canonicalize_name

from booksite import readme_command

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def stored_outputs(path):
    """Return the indices of code cells in the notebook at ``path`` that carry outputs
    or counts."""
    cells = json.loads(path.read_text())["cells"]
    return [
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "code"
        and (c.get("outputs") or c.get("execution_count") is not None)
    ]


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found under chapters/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    assert stored_outputs(path) == [], f"{path.name}: clear outputs before committing"


def test_stored_outputs_detects_an_executed_notebook(tmp_path):
    # fault control: a notebook that carries an output must be flagged
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": "1",
                "metadata": {},
                "execution_count": 1,
                "outputs": [
                    {
                        "output_type": "execute_result",
                        "data": {"text/plain": "1"},
                        "metadata": {},
                        "execution_count": 1,
                    }
                ],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "executed.ipynb"
    path.write_text(json.dumps(nb))
    assert stored_outputs(path) == [0]


MAX_LINE = 88  # as [tool.ruff] line-length in pyproject.toml


def long_lines(path):
    """``(line number, length)`` of each code line over MAX_LINE characters in ``path``.

    In a notebook, the lines of its code cells are numbered through the cells; in a
    Python file, every line counts (code, comments and docstrings alike).
    """
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        lines = [line for c in cells if c["cell_type"] == "code"
                 for line in "".join(c["source"]).splitlines()]
    else:
        lines = path.read_text(encoding="utf-8").splitlines()
    return [(i, len(line)) for i, line in enumerate(lines, 1) if len(line) > MAX_LINE]


# what a reader sees as code: the chapters' code cells (in the book and in Jupyter) and
# the package, whose source the chapters show; also the tools, the tests (tests/*.py)
# and the root conftest.py, the test settings
CODE = [*NOTEBOOKS, *sorted((ROOT / "src" / "attncourse").rglob("*.py")),
        *sorted((ROOT / "tools").glob("*.py")), *sorted((ROOT / "tests").glob("*.py")),
        ROOT / "conftest.py"]


@pytest.mark.parametrize("path", CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_code_lines_are_at_most_88_characters(path):
    found = long_lines(path)
    assert found == [], (
        f"{path.relative_to(ROOT)}: lines over {MAX_LINE} characters, (line, length): "
        f"{found}; wrap them (ruff check lists them; ruff format --range helps)")


def test_long_lines_counts_notebook_code_cells_only(tmp_path):
    # fault control: a long code line is found, a long Markdown line is not
    long = "x = " + "1 + " * 30 + "1"
    nb = {"cells": [{"cell_type": "markdown", "source": ["m" * 200], "metadata": {}},
                    {"cell_type": "code", "source": ["y = 1\n", long], "metadata": {},
                     "execution_count": None, "outputs": []}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "wide.ipynb"
    path.write_text(json.dumps(nb))
    assert long_lines(path) == [(2, len(long))]
    module = tmp_path / "wide.py"
    module.write_text(f'"""Doc."""\n# {"c" * 87}\n{long}\n')
    assert long_lines(module) == [(2, 89), (3, len(long))]


@pytest.fixture(scope="module")
def imported():
    """What a fresh interpreter holds after ``import attncourse`` (line 1), then
    after ``import attncourse.kit.symbolic`` (line 2), and what it wrote to stderr:
    one process for both tests below."""
    code = (
        "import sys, attncourse; "
        "print(sorted(m for m in ('sympy', 'matplotlib') if m in sys.modules), "
        "flush=True); "
        "import attncourse.kit.symbolic; print('sympy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    return result.stdout.splitlines() + ["", ""], result.stderr


def test_import_attncourse_does_not_import_sympy_or_matplotlib(imported):
    lines, stderr = imported
    assert lines[0].strip() == "[]", stderr


def test_the_import_check_sees_sympy_when_it_is_imported(imported):
    # fault control for the check above: importing the symbolic module does load sympy,
    # and the same test of sys.modules, in the same process, sees it
    lines, stderr = imported
    assert lines[1].strip() == "True", stderr


def test_the_top_level_api_is_curated_and_importable():
    ac = importlib.import_module("attncourse")
    names = ac.__all__
    assert len(names) == len(set(names)), "a name is listed twice in attncourse.__all__"
    assert 0 < len(names) <= 40, (
        f"attncourse.__all__ has {len(names)} names; keep the curated API to 40 or "
        "fewer"
    )
    for name in names:
        assert getattr(ac, name) is not None, name
    namespace = {}
    # every listed name really is importable
    exec("from attncourse import *", namespace)
    assert set(names) <= set(namespace)
    assert {"softmax", "attention_forward", "causal_attention"} <= set(names)


def all_modules():
    package = importlib.import_module("attncourse")
    return sorted(
        m.name for m in pkgutil.walk_packages(package.__path__, "attncourse.")
    )


@pytest.mark.parametrize("name", all_modules())
def test_every_module_lists_names_it_defines(name):
    module = importlib.import_module(name)
    assert module.__all__, f"{name} has an empty __all__"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ lists names it does not define: {missing}"


def test_the_version_is_written_once_and_read_from_the_installed_metadata():
    import tomllib

    import attncourse

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "version"
    ]
    assert attncourse.__version__ == declared
    source = (ROOT / "src" / "attncourse" / "__init__.py").read_text()
    assert declared not in source  # not written a second time


def exclusion_problems(excludes, lock, commands):
    """What is wrong with the excludes file ``excludes`` (requirements format) against
    the lock ``lock`` and the install ``commands``: a name the lock does not pin
    excludes nothing (a typo), and a command without ``--excludes excludes.txt``
    installs it.

    >>> exclusion_problems("# why\\nFoo_Bar  # a reason\\n", "foo-bar==1.0\\n",
    ...                    ["uv pip install -r r.txt --excludes excludes.txt"])
    []
    """
    names = {canonicalize_name(line.split("#", 1)[0].strip())
             for line in excludes.splitlines() if line.split("#", 1)[0].strip()}
    pinned = {canonicalize_name(line.split("==")[0])
              for line in lock.splitlines() if "==" in line}
    problems = [] if names else ["excludes.txt lists no package"]
    problems += [f"{name} is not in the lock" for name in sorted(names - pinned)]
    problems += [f"does not leave them out: {command}" for command in commands
                 if "--excludes excludes.txt" not in command]
    return problems


def test_the_excluded_packages_are_locked_and_every_install_leaves_them_out():
    # excludes.txt names what the README's uv install leaves out
    commands = [readme_command(m) for m in ("build-command", "test-command")]
    assert all("uv pip install" in c for c in commands), commands
    excludes = (ROOT / "excludes.txt").read_text()
    lock = (ROOT / "constraints.txt").read_text()
    assert exclusion_problems(excludes, lock, commands) == []
    # fault controls: a misspelt name, and a command that forgets the file
    assert exclusion_problems("rfc3987-sintax\n", lock, commands) == [
        "rfc3987-sintax is not in the lock"]
    forgot = commands[0].replace(" --excludes excludes.txt", "")
    assert exclusion_problems(excludes, lock, [forgot]) == [
        f"does not leave them out: {forgot}"]
