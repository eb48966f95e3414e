"""tools/execute.py and the root conftest.py: each chapter is executed once, into the
notebook cache, and the test command checks it there while nothing it depends on has
changed (anything changed, and nbval executes it)."""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import nbformat
import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn

import execute
from attncourse.kit.exercises import UNFINISHED

ROOT = execute.ROOT
_spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root_conftest)
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
FIRST, SECOND = CHAPTERS[0], CHAPTERS[1]


def copy_sources(root):
    """Copy what the environment key reads (``execute.SOURCES``) into ``root``."""
    for name in execute.SOURCES:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, target)


def test_the_key_covers_the_package_the_settings_and_the_environment(
        tmp_path, monkeypatch):
    copy_sources(tmp_path)
    monkeypatch.setattr(execute, "ROOT", tmp_path)
    key = execute.environment_key.__wrapped__
    before = key()
    assert key() == before == execute.environment_key()  # the same inputs, the same key
    (tmp_path / "conftest.py").write_text("")  # not an input of the outputs
    assert key() == before
    for name in ("src/attncourse/softmax.py", "src/attncourse/kit/faults/attention.py",
                 "benchmarks/results/attention.csv", "pyproject.toml"):
        original = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(original + b"\n")
        assert key() != before, name
        (tmp_path / name).write_bytes(original)
        assert key() == before
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert key() != before
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert key() == before
    # the environment's own distributions, even with src/ (and the editable install's
    # egg-info) on sys.path, as pytest puts it there while collecting doctests
    monkeypatch.syspath_prepend(str(ROOT / "src"))
    assert key() == before
    monkeypatch.setattr(execute.importlib.metadata, "distributions",
                        lambda **where: [SimpleNamespace(metadata={"Name": "numpy"},
                                                         version="0.0")])
    assert key() != before


def test_the_cache_is_current_only_under_the_current_key(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "CACHE", tmp_path)
    assert not execute.is_current()  # no key written
    (tmp_path / "environment.sha256").write_text(execute.environment_key())
    assert execute.is_current()
    (tmp_path / "environment.sha256").write_text("0" * 64)
    assert not execute.is_current()


def test_the_cells_may_run_as_long_as_in_the_books_own_execution():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    assert config["execute_notebooks"] == "cache"
    assert not config.get("cache")  # jupyter-book's default: _build/.jupyter_cache
    assert execute.TIMEOUT == config["timeout"] == 300
    assert pathlib.Path(execute.CACHE) == ROOT / "_build" / ".jupyter_cache" or (
        "ATTNCOURSE_JUPYTER_CACHE" in os.environ)


def run_execute(root, cache, **env):
    """Run tools/execute.py's main() on the chapters of ``root`` into ``cache``."""
    code = ("import sys, pathlib; sys.path.insert(0, sys.argv[1]); import execute; "
            "execute.ROOT = pathlib.Path(sys.argv[2]); sys.argv[1:] = sys.argv[3:]; "
            "execute.main()")
    args = env.pop("args", [])
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "tools"), str(root), *args],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ATTNCOURSE_JUPYTER_CACHE": str(cache), **env})


def small_notebook(source):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"),
                nbformat.v4.new_code_cell(source)]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3",
                              "language": "python"}
    return nb


def test_the_chapters_are_executed_once_and_again_when_the_key_changes(tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    (root / "chapters").mkdir(parents=True)
    copy_sources(root)  # the same key as this repository's
    nbformat.write(small_notebook("print(6 * 7)"), root / "chapters" / "good.ipynb")
    nbformat.write(small_notebook("assert 1 + 1 == 3, 'planted failure'"),
                   root / "chapters" / "bad.ipynb")
    done = run_execute(root, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bad.ipynb failed: the book's build executes it once more" in done.stderr
    assert "planted failure" in done.stderr
    assert "good.ipynb failed" not in done.stderr
    records = get_cache(str(cache)).list_cache_records()
    assert [pathlib.Path(r.uri).name for r in records] == ["good.ipynb"]
    executed = get_cache(str(cache)).get_cache_bundle(records[0].pk).nb
    assert executed.cells[0].outputs[0]["text"] == "42\n"
    assert (cache / "environment.sha256").read_text() == execute.environment_key()
    (root / "chapters" / "bad.ipynb").unlink()
    again = run_execute(root, cache)  # nothing changed: nothing executed
    assert "Executing 0 notebook(s)" in again.stderr, again.stderr[-3000:]
    # fault controls: another key, or --fresh, clears the cache and executes again
    for changed in ({"OPENBLAS_NUM_THREADS": "2"}, {"args": ["--fresh"]}):
        done = run_execute(root, cache, **changed)
        assert "Executing 1 notebook(s)" in done.stderr, (changed, done.stderr[-3000:])
        assert len(get_cache(str(cache)).list_cache_records()) == 1


def fill_cache(cache, chapters, executed=True):
    """Put ``chapters`` in the notebook cache at ``cache`` under the current key, as if
    executed (each code cell run in order, printing nothing) or not at all."""
    store = get_cache(str(cache))
    for path in chapters:
        nb = nbformat.read(path, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        for number, cell in enumerate(code):
            cell.execution_count = number + 1 if executed else None
            stubs = root_conftest.stub_names(cell.source)
            if executed and stubs:  # the checker's notice
                notice = UNFINISHED.format(name=stubs[0]) + "\n"
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                       text=notice)]
        store.cache_notebook_bundle(CacheBundleIn(nb, str(path)), check_validity=False,
                                    overwrite=True)
    (cache / "environment.sha256").write_text(execute.environment_key.__wrapped__())


def pytest_on(cache, *args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env=dict(os.environ, ATTNCOURSE_JUPYTER_CACHE=str(cache)))


def collected_kinds(cache, *extra):
    """The collector pytest makes for each of the first two chapters, given a cache."""
    done = pytest_on(cache, "--collect-only", *extra, str(FIRST.relative_to(ROOT)),
                     str(SECOND.relative_to(ROOT)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {path.name: re.search(rf"<(\w+) {re.escape(path.name)}>", done.stdout)[1]
            for path in (FIRST, SECOND)}


def test_the_tests_take_a_current_cache_and_execute_what_it_lacks(tmp_path):
    fill_cache(tmp_path, [FIRST])
    assert collected_kinds(tmp_path) == {FIRST.name: "CachedChapter",
                                         SECOND.name: "IPyNbFile"}
    assert collected_kinds(tmp_path, "--nbval-fresh") == {FIRST.name: "IPyNbFile",
                                                          SECOND.name: "IPyNbFile"}
    (tmp_path / "environment.sha256").write_text("0" * 64)  # filled under another key
    assert collected_kinds(tmp_path) == {FIRST.name: "IPyNbFile",
                                         SECOND.name: "IPyNbFile"}


def test_a_cached_chapter_passes_only_if_every_cell_ran_in_order(tmp_path):
    fill_cache(tmp_path / "ran", [FIRST])
    done = pytest_on(tmp_path / "ran", str(FIRST.relative_to(ROOT)))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 chapter(s) checked from their outputs in" in done.stdout
    # fault control: the same chapter cached without its cells having run
    fill_cache(tmp_path / "not-run", [FIRST], executed=False)
    done = pytest_on(tmp_path / "not-run", str(FIRST.relative_to(ROOT)))
    assert done.returncode == 1
    assert "cell 0: not run in order (execution count None)" in done.stdout


def test_a_cached_chapter_is_judged_by_the_stub_rule_and_its_errors():
    problem = root_conftest.recorded_cell_problem
    stub = "def my_f():\n    raise NotImplementedError\n\ncheck(my_f)"
    cell = nbformat.v4.new_code_cell(stub)
    cell.execution_count = 1
    assert "must print one line" in problem(0, cell)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text=UNFINISHED.format(name="my_f") + "\n")]
    assert problem(0, cell) is None
    cell.outputs.append(nbformat.v4.new_output("error", ename="ValueError",
                                               evalue="bad", traceback=[]))
    assert "an exception: ValueError: bad" in problem(0, cell)
    cell.outputs, cell.execution_count = cell.outputs[:1], 2
    assert "not run in order (execution count 2)" in problem(0, cell)
