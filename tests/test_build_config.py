"""The book's build configuration fails loudly: a failing cell or a warning stops the
build.

Each test builds a two-page book in a temporary folder with the repository's own
``_config.yml`` and the arguments of the README's build command, so what is checked is
what CI runs.
"""

import json
import pathlib
import shutil
import subprocess
import sys

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


def build(tmp_path, cell=GOOD_CELL, intro=INTRO):
    """Build the tiny book with the repository's configuration; return the finished
    process."""
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
    return subprocess.run(
        [str(jupyter_book), *_build_arguments()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def good_build(tmp_path_factory):
    return build(tmp_path_factory.mktemp("good"))


def test_a_correct_book_builds(good_build):
    assert good_build.returncode == 0, (
        good_build.stdout[-2000:] + good_build.stderr[-2000:]
    )


def test_a_failing_cell_fails_the_build(tmp_path, good_build):
    # nb_execution_raise_on_error (and -W) make this fail; with neither, JB1 builds the
    # book anyway
    assert good_build.returncode == 0
    done = build(tmp_path, cell='assert 1 + 1 == 3, "planted failure"')
    assert done.returncode != 0
    assert "planted failure" in done.stdout + done.stderr


def test_a_warning_fails_the_build(tmp_path, good_build):
    # fault control for -W -n: an unresolved cross-reference is only a warning to Sphinx
    assert good_build.returncode == 0
    done = build(tmp_path, intro=INTRO + "\nSee {ref}`no-such-label`.\n")
    assert done.returncode != 0
    assert "no-such-label" in done.stdout + done.stderr
