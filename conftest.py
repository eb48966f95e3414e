"""Settings for every test run, the chapters under nbval included.

One BLAS thread per process, and ``ATTNCOURSE_MODELS`` naming ``_build/models`` (where
``attncourse.kit.trained.trained_model`` keeps Chapter 7's models for the chapters and
tests that reuse them): set by ``tools/execute.py``, inherited by the kernels. Parallel
processes with several BLAS threads each only compete for the cores (measured: Chapter
8's training ran more than ten times slower), and one thread makes the numbers
independent of the core count.

Unfinished exercises. No chapter cell is tagged ``raises-exception``, so nbval fails on
any exception, as "Run All" stops; an exercise cell whose stub still raises
``NotImplementedError`` must instead print the checker's one-line notice.

One execution of each chapter. A chapter that ``tools/execute.py`` executed into the
notebook cache under the current environment key is checked from its outputs there
(every cell ran in order, none raised, every stub printed its notice); any other, or
every one with ``--nbval-fresh``, is executed by nbval.
"""

import ast
import pathlib
import sys

import nbformat
import pytest
from nbval.plugin import IPyNbFile

sys.path.append(str(pathlib.Path(__file__).resolve().parent / "tools"))
import execute  # noqa: E402  (sets the threads and ATTNCOURSE_MODELS, before numpy)

from attncourse.kit.exercises import UNFINISHED  # noqa: E402


def stub_names(source):
    """The functions a cell defines whose body only raises ``NotImplementedError``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython syntax (a magic): no stub here
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant):
                body = body[1:]  # a docstring
            if len(body) == 1 and isinstance(body[0], ast.Raise) and \
                    "NotImplementedError" in ast.unparse(body[0]):
                names.append(node.name)
    return names


def stub_cell_problem(source, outputs):
    """What is wrong with the outputs of an exercise cell (None: nothing, or no stub).

    A cell that defines a stub must print exactly one line, the checker's notice naming
    one of its stubs, and nothing else (no traceback, no second line).
    """
    names = stub_names(source)
    if not names:
        return None
    kinds = [out.get("output_type") for out in outputs]
    text = "".join(out.get("text", "") for out in outputs
                   if out.get("output_type") == "stream")
    lines = text.splitlines()
    if kinds != ["stream"] * len(kinds) or len(lines) != 1:
        return (f"an exercise stub ({', '.join(names)}) must print one line, the "
                f"checker's notice; the cell printed {len(lines)} line(s) and "
                f"output {kinds}")
    if lines[0] not in [UNFINISHED.format(name=name) for name in names]:
        return f"an exercise stub ({', '.join(names)}) printed {lines[0]!r}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    cell, outputs = getattr(item, "cell", None), getattr(item, "test_outputs", None)
    if cell is not None and outputs is not None:  # a notebook cell nbval ran
        problem = stub_cell_problem(cell.source, outputs)
        if problem:
            pytest.fail(f"cell {item.cell_num}: {problem}", pytrace=False)
    return result


# One execution of each chapter ------------------------------------------------------

def pytest_addoption(parser):
    parser.addoption("--nbval-fresh", action="store_true",
                     help="execute every chapter under nbval, even one in the cache")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    if (file_path.parent.name == "chapters" and execute.is_current()
            and not parent.config.getoption("nbval_fresh")
            and any(isinstance(c, IPyNbFile) for c in collected)):
        from jupyter_cache import get_cache

        cache = get_cache(str(execute.CACHE))
        try:
            record = cache.match_cache_notebook(nbformat.read(file_path, as_version=4))
        except KeyError:  # not in the cache (edited since, or failed there)
            return collected
        cells = [c for c in cache.get_cache_bundle(record.pk).nb.cells
                 if c.cell_type == "code"]
        nodeid = file_path.relative_to(parent.config.rootpath).as_posix()
        return [CachedChapter.from_parent(parent, name=file_path.name, path=file_path,
                                          nodeid=nodeid, cells=cells)]
    return collected


def recorded_cell_problem(number, cell):
    """What is wrong with code cell ``number`` of a cached run (None: nothing)."""
    if cell.get("execution_count") != number + 1:
        return f"not run in order (execution count {cell.get('execution_count')})"
    errors = [out for out in cell.outputs if out.get("output_type") == "error"]
    if errors:
        return f"an exception: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    return stub_cell_problem(cell.source, cell.outputs)


class CachedChapter(pytest.Item):
    """A chapter checked from its outputs in the notebook cache, cell by cell."""

    def __init__(self, *, cells, **kwargs):
        super().__init__(**kwargs)
        self.cells = cells
        self.user_properties.append(("notebook_cache", str(execute.CACHE)))

    def runtest(self):
        problems = [f"cell {n}: {problem}" for n, cell in enumerate(self.cells)
                    if (problem := recorded_cell_problem(n, cell))]
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.name} ({len(self.cells)} cells, cached)"


def pytest_terminal_summary(terminalreporter):
    checked = {report.fspath for reports in terminalreporter.stats.values()
               for report in reports
               if "notebook_cache" in dict(getattr(report, "user_properties", ()))}
    if checked:
        terminalreporter.write_line(
            f"{len(checked)} chapter(s) checked from their outputs in {execute.CACHE}, "
            f"executed under the current environment; --nbval-fresh executes them")
