"""The book's build configuration fails loudly: a failing cell or a warning stops the
build.

Each test builds a two-page book in a temporary folder with the repository's own
``_config.yml`` and the arguments of the README's build command, so what is checked is
what CI runs. The three builds are started together (``builds``) and run side by side.
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from booksite import ROOT, _build_arguments

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"

GOOD_CELL = "assert 1 + 1 == 2"
INTRO = "# A tiny book\n\nOne page and one notebook.\n"


def notebook(source):
    cell = {
        "cell_type": "code",
        "id": "cell-0",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": source,
    }
    return {
        "cells": [
            {
                "cell_type": "markdown",
                "id": "title",
                "metadata": {},
                "source": "# A chapter",
            },
            cell,
        ],
        "metadata": {
            "kernelspec": {
                "name": "python3",
                "display_name": "Python 3",
                "language": "python",
            }
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def start_build(tmp_path, cell=GOOD_CELL, intro=INTRO):
    """Start building the tiny book with the repository's configuration; return the
    running process and the files that collect its output."""
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    shutil.copytree(ROOT / "book" / "_static", tmp_path / "book" / "_static")
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n  - file: chapter\n"
    )
    (tmp_path / "intro.md").write_text(intro)
    (tmp_path / "chapter.ipynb").write_text(json.dumps(notebook(cell)))
    jupyter_book = pathlib.Path(sys.executable).with_name("jupyter-book")
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(
        [str(jupyter_book), *_build_arguments()],
        cwd=tmp_path,
        stdout=out,
        stderr=err,
        text=True,
    )
    return process, out, err


def finish(started, timeout=300):
    """Wait for a build from start_build; return it as subprocess.run would have."""
    process, out, err = started
    with out, err:
        try:
            process.wait(timeout)
        finally:
            if process.poll() is None:  # timed out, or the wait was interrupted
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            process.args, process.returncode, out.read(), err.read()
        )


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The three builds the tests judge, by name: started together, then awaited."""
    plans = {
        "good": {},
        "failing cell": {"cell": 'assert 1 + 1 == 3, "planted failure"'},
        "warning": {"intro": INTRO + "\nSee {ref}`no-such-label`.\n"},
    }
    started = {}
    try:
        for name, plan in plans.items():
            folder = tmp_path_factory.mktemp(name.replace(" ", "-"))
            started[name] = start_build(folder, **plan)
        return {name: finish(s) for name, s in started.items()}
    finally:
        for process, _, _ in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def good_build(builds):
    return builds["good"]


def test_a_correct_book_builds(good_build):
    assert good_build.returncode == 0, (
        good_build.stdout[-2000:] + good_build.stderr[-2000:]
    )


def test_a_failing_cell_fails_the_build(builds, good_build):
    # nb_execution_raise_on_error (and -W) make this fail; with neither, JB1 builds the
    # book anyway
    assert good_build.returncode == 0
    done = builds["failing cell"]
    assert done.returncode != 0
    assert "planted failure" in done.stdout + done.stderr


def test_a_warning_fails_the_build(builds, good_build):
    # fault control for -W -n: an unresolved cross-reference is only a warning to Sphinx
    assert good_build.returncode == 0
    done = builds["warning"]
    assert done.returncode != 0
    assert "no-such-label" in done.stdout + done.stderr
