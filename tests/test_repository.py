"""Repository-wide checks: notebooks are stored stripped, import attncourse stays
light, its API is curated, the course script runs its set-up before each job, and the
GitHub workflow passes actionlint. (Code lines of at most 88 characters: ./course test
runs ruff check, configured in pyproject.toml.)"""

import importlib
import json
import os
import pathlib
import pkgutil
import subprocess
import sys

import pytest
from packaging.utils import canonicalize_name

from booksite import _build_arguments, course_commands

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


def test_the_top_level_api_is_importable():
    ac = importlib.import_module("attncourse")
    names = ac.__all__
    assert len(names) == len(set(names)), "a name is listed twice in attncourse.__all__"
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
    # excludes.txt names what the course script's uv install leaves out
    commands = [c for c in course_commands("setup") if "uv pip install" in c]
    assert commands, course_commands("setup")
    excludes = (ROOT / "excludes.txt").read_text()
    lock = (ROOT / "constraints.txt").read_text()
    assert exclusion_problems(excludes, lock, commands) == []
    # fault controls: a misspelt name, and a command that forgets the file
    assert exclusion_problems("rfc3987-sintax\n", lock, commands) == [
        "rfc3987-sintax is not in the lock"]
    forgot = commands[0].replace(" --excludes excludes.txt", "")
    assert exclusion_problems(excludes, lock, [forgot]) == [
        f"does not leave them out: {forgot}"]


# The course script (./course book, ./course test, ./course lab), run in a copy of the
# repository's root whose .venv holds stand-ins: each writes its name and arguments to
# $LOG instead of doing its job, so the order of the steps is seen without installing
# or building anything.
STAND_INS = ("uv", "python", "ruff", "jupyter-book", "jupyter")


def run_course(folder, *args, script=None, **env):
    """Run the repository's course script (or the text ``script``) from ``folder`` (a
    copy of it is put there) with ``args``; return the finished process and the
    commands it ran, as logged."""
    (folder / "course").write_text(script or (ROOT / "course").read_text())
    log = folder / "log"
    log.write_text("")
    done = subprocess.run(["sh", str(folder / "course"), *args], capture_output=True,
                          text=True, env={**os.environ, "LOG": str(log), **env})
    return done, log.read_text().splitlines()


@pytest.fixture
def stand_ins(tmp_path):
    """A folder whose .venv/bin holds a stand-in for every program the course runs."""
    programs = tmp_path / ".venv" / "bin"
    programs.mkdir(parents=True)
    for name in STAND_INS:
        (programs / name).write_text('#!/bin/sh\necho "${0##*/} $*" >> "$LOG"\n')
        (programs / name).chmod(0o755)
    # what ./course lab copies into the working copy
    for name in ("chapters/01_a.ipynb", "book/notation.md", "book/glossary.md",
                 "benchmarks/results/a.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"{name}, as committed\n")
    return tmp_path


def as_logged(job, args=""):
    """The commands of the course's function ``job`` as the stand-ins log them (an
    ``export`` sets variables and runs nothing)."""
    return [c.removeprefix(".venv/bin/").replace(' "$@"', args)
            for c in course_commands(job) if not c.startswith("export ")]


def test_the_course_script_is_executable():
    assert os.access(ROOT / "course", os.X_OK), "chmod +x course"


def test_each_job_of_the_course_script_runs_after_the_install(stand_ins):
    [install] = [c for c in as_logged("setup") if c.startswith("uv pip install")]
    assert "--excludes excludes.txt" in install
    done, book = run_course(stand_ins, "book")
    assert done.returncode == 0, done.stderr
    assert book == [install, *as_logged("book")]
    # booksite builds the book with the arguments ./course book runs jupyter-book with
    assert " ".join(["jupyter-book", *_build_arguments()]) in book
    done, test = run_course(stand_ins, "test", "-m", "not book", "-x")
    assert done.returncode == 0, done.stderr
    assert test == [install, *as_logged("test", " -m not book -x")]
    # ruff first (code lines of at most 88 characters), then pytest with the arguments
    assert test[1] == "ruff check" and test[2].startswith("python -m pytest ")
    done, lab = run_course(stand_ins, "lab")
    assert done.returncode == 0, done.stderr
    assert lab == [install, "jupyter lab --ServerApp.root_dir=workspace"]
    # fault control: a script whose dispatch forgets the set-up runs the job alone
    source = (ROOT / "course").read_text()
    assert source.count("        setup\n") == 1
    done, book = run_course(stand_ins, "book",
                            script=source.replace("        setup\n", ""))
    assert done.returncode == 0 and book == as_logged("book"), done.stderr


def test_the_lab_opens_a_working_copy_that_keeps_the_learners_answers(stand_ins):
    done, _ = run_course(stand_ins, "lab")
    assert done.returncode == 0, done.stderr
    work = stand_ins / "workspace"
    for name in ("chapters/01_a.ipynb", "book/notation.md", "book/glossary.md",
                 "benchmarks/results/a.csv"):
        assert (work / name).read_text() == f"{name}, as committed\n", name
    # the learner answers in the copy; the committed chapter and notation change
    (work / "chapters/01_a.ipynb").write_text("my answer\n")
    (stand_ins / "chapters/01_a.ipynb").write_text("a newer chapter\n")
    (stand_ins / "book/notation.md").write_text("newer notation\n")
    done, lab = run_course(stand_ins, "lab", "--port=9")
    assert done.returncode == 0, done.stderr
    assert (work / "chapters/01_a.ipynb").read_text() == "my answer\n"
    assert (work / "book/notation.md").read_text() == "newer notation\n"
    assert (stand_ins / "chapters/01_a.ipynb").read_text() == "a newer chapter\n"
    assert lab[-1] == "jupyter lab --ServerApp.root_dir=workspace --port=9"
    # $COURSE_WORKSPACE names another folder
    done, lab = run_course(stand_ins, "lab", COURSE_WORKSPACE=str(stand_ins / "mine"))
    assert done.returncode == 0, done.stderr
    assert (stand_ins / "mine/chapters/01_a.ipynb").is_file()
    assert lab[-1] == f"jupyter lab --ServerApp.root_dir={stand_ins / 'mine'}"


def test_the_course_script_without_a_job_prints_its_usage_and_runs_nothing(stand_ins):
    for args in [(), ("bogus",)]:
        done, ran = run_course(stand_ins, *args)
        assert done.returncode == 2 and ran == []
        assert "./course book" in done.stderr and "./course test" in done.stderr
    done, ran = run_course(stand_ins, "--help")
    assert done.returncode == 0 and ran == [] and "./course lab" in done.stdout


def test_the_course_script_refuses_a_python_older_than_3_11(tmp_path):
    # no .venv yet: the set-up would create it with $PYTHON, which is too old here
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\nexit 1\n")  # sys.version_info < (3, 11): exit status 1
    old.chmod(0o755)
    done, ran = run_course(tmp_path, "test", PYTHON=str(old))
    assert done.returncode == 1 and ran == []
    assert "is not Python 3.11 or newer" in done.stderr
    assert not (tmp_path / ".venv").exists()


WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def actionlint(path):
    """actionlint's findings on the workflow file ``path``, one line each (none when it
    passes). ShellCheck and pyflakes are left out, so that the verdict does not depend
    on what else the machine has installed."""
    executable = pathlib.Path(sys.executable).with_name("actionlint")
    if not executable.is_file():
        pytest.fail("actionlint is missing: ./course test installs it (the test extra)",
                    pytrace=False)
    done = subprocess.run([str(executable), "-no-color", "-oneline", "-shellcheck=",
                           "-pyflakes=", str(path)], capture_output=True, text=True)
    findings = done.stdout.splitlines()
    assert (done.returncode == 0) == (findings == []), (done.returncode, done.stderr)
    return findings


def test_the_workflow_passes_actionlint():
    assert actionlint(WORKFLOW) == []


def test_the_workflow_runs_the_two_commands_and_publishes_the_book():
    import yaml

    workflow = yaml.safe_load(WORKFLOW.read_text())
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    runs = [step["run"] for step in build["steps"] if "run" in step]
    assert [r for r in runs if r.startswith("./")] == ["./course book", "./course test"]
    assert build["steps"][-1]["uses"].startswith("actions/upload-pages-artifact@")
    assert build["steps"][-1]["with"]["path"] == "_build/html"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["steps"][-1]["uses"].startswith("actions/deploy-pages@")


@pytest.mark.parametrize("right, wrong, kind", [
    # a key the workflow syntax does not have
    ("timeout-minutes: 90", "timeout-minute: 90", "syntax-check"),
    # runs-on read from a matrix the job does not define
    ("runs-on: ubuntu-latest", "runs-on: ${{ matrix.os }}", "expression"),
    # a runner that does not exist
    ("runs-on: ubuntu-latest", "runs-on: ubuntu-lastest", "runner-label"),
    # an input the action does not take
    ('python-version: "3.11"', 'python_version: "3.11"', "action"),
])
def test_actionlint_rejects_a_broken_workflow(tmp_path, right, wrong, kind):
    # fault control: the workflow with one planted mistake (in its first job) fails,
    # for that mistake
    text = WORKFLOW.read_text()
    assert right in text, right
    broken = tmp_path / "book.yml"
    broken.write_text(text.replace(right, wrong, 1))
    findings = actionlint(broken)
    assert findings and all(f.endswith(f"[{kind}]") for f in findings), findings


def learner_recipe(path):
    """The learner's set-up recipe in ``path``: from "You need Python" to the end of
    the paragraph after the ``./course lab`` block."""
    text = path.read_text()
    start = text.index("You need Python 3.11 or newer, `git` and a shell.")
    after = text.index("./course lab\n```\n", start) + len("./course lab\n```\n")
    return text[start:text.index("\n\n", after + 1)]


def test_the_readme_and_the_book_give_the_learner_one_recipe():
    readme, intro = ROOT / "README.md", ROOT / "book" / "intro.md"
    assert learner_recipe(readme) == learner_recipe(intro)
    assert "workspace/" in learner_recipe(readme)
