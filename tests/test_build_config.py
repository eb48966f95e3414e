"""The book's build configuration fails loudly: a failing cell or a warning stops the
build.

Each test builds a two-page book in a temporary folder with the repository's own
``_config.yml`` and the arguments of the README's build command, so what is checked is
what CI runs. The four builds are started together (``builds``) and run side by side;
one that stalls is started once more, alone (``build_all``).
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import nbformat
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


def start_build(tmp_path, cell=GOOD_CELL, intro=INTRO, cached=None):
    """Start building the tiny book with the repository's configuration; return the
    running process and the files that collect its output. ``cached``: the output of
    the cell as stored in the notebook cache before the build (as tools/execute.py
    stores it), or None for an empty cache."""
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    shutil.copytree(ROOT / "book" / "_static", tmp_path / "book" / "_static")
    shutil.copytree(ROOT / "book" / "_ext", tmp_path / "book" / "_ext")
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n  - file: chapter\n"
    )
    (tmp_path / "intro.md").write_text(intro)
    (tmp_path / "chapter.ipynb").write_text(json.dumps(notebook(cell)))
    if cached is not None:
        from jupyter_cache import get_cache
        from jupyter_cache.base import CacheBundleIn
        executed = nbformat.from_dict(notebook(cell))
        executed.cells[1].execution_count = 1
        executed.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                            text=cached)]
        get_cache(str(tmp_path / "_build" / ".jupyter_cache")).cache_notebook_bundle(
            CacheBundleIn(executed, str(tmp_path / "chapter.ipynb")))
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


#: Seconds after which a build counts as stalled (one takes about 10 s). Once, in a
#: clean-clone run of .ci/run, a build sat still for 300 s: its kernel was up, and the
#: build was blocked in sending the kernel its first request. A stalled build is started
#: once more, alone.
STALL = 120


def finish(started, timeout=STALL):
    """Wait for a build from start_build; return it as subprocess.run would have, or
    None when it stalled (it is then killed)."""
    process, out, err = started
    with out, err:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
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
    """The four builds the tests judge, by name: started together, then awaited."""
    plans = {
        "good": {},
        "failing cell": {"cell": 'assert 1 + 1 == 3, "planted failure"'},
        "warning": {"intro": INTRO + "\nSee {ref}`no-such-label`.\n"},
        "cached": {"cell": 'print("executed" + " by the build")',
                   "cached": "stored in the cache\n"},
    }
    folders = {}

    def start(name, plan):
        folders[name] = tmp_path_factory.mktemp(name.replace(" ", "-"))
        return start_build(folders[name], **plan)

    done = build_all(plans, start)
    for name, result in done.items():
        result.folder = folders[name]  # where the build ran
    return done


def build_all(plans, start, stall=STALL):
    """Start ``start(name, plan)`` for every plan, then wait for each; a build that
    stalls is started once more, alone. Returns the finished builds by name."""
    started = {}
    try:
        for name, plan in plans.items():
            started[name] = start(name, plan)
        done = {name: finish(s, stall) for name, s in started.items()}
        for name in [name for name, result in done.items() if result is None]:
            started[name] = start(name, plans[name])
            done[name] = finish(started[name], stall)
            if done[name] is None:
                pytest.fail(f"the {name!r} build stalled twice ({stall} s each)")
        return done
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


def test_the_build_takes_a_chapter_s_outputs_from_the_notebook_cache(builds):
    # what tools/execute.py stored is shown, and the chapter is not executed again;
    # fault control: with an empty cache the build executes the chapter itself
    done = builds["cached"]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Using cached notebook" in done.stdout
    html = (done.folder / "_build" / "html" / "chapter.html").read_text()
    assert "stored in the cache" in html and "executed by the build" not in html


def test_a_stalled_build_is_started_once_more_and_twice_fails():
    # fault control for the restart in build_all: "sleep" stands for a stalled build
    calls = []

    def start(name, plan):
        calls.append(name)
        stalls = plan["stalls"] > calls.count(name) - 1
        code = "import time; time.sleep(60)" if stalls else "print('built')"
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        return subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err,
                                text=True), out, err

    done = build_all({"quick": {"stalls": 0}, "stalls once": {"stalls": 1}}, start,
                     stall=2)
    assert calls == ["quick", "stalls once", "stalls once"]
    assert [(r.returncode, r.stdout) for r in done.values()] == [(0, "built\n")] * 2
    with pytest.raises(pytest.fail.Exception,
                       match="'stalls twice' build stalled twice"):
        build_all({"stalls twice": {"stalls": 2}}, start, stall=2)
