"""Settings for every test run, the chapters under nbval included.

One BLAS thread per process. The tests run as parallel processes (pytest-xdist), each
starting notebook kernels, and the course's matrices are small: several BLAS threads per
process would only compete for the same cores (measured: Chapter 8's training ran more
than ten times slower). With one thread the numbers also do not depend on the machine's
core count. The kernels nbval starts inherit these settings.

Unfinished exercises under nbval. No chapter cell is tagged ``raises-exception`` (a test
in tests/test_notebooks.py asserts it), so nbval runs every cell as "Run All" does in a
plain kernel and fails on any exception. An exercise cell whose stub still raises
``NotImplementedError`` must instead print the checker's one-line notice: the hook below
fails such a cell when its output is anything else.

Trained models. ``ATTNCOURSE_MODELS`` names ``_build/models``, where
``attncourse.kit.trained.trained_model`` keeps each recipe's model under a key of
everything its bits depend on; the chapters that reuse Chapter 7's models, and the
tests, train each once between them. The kernels inherit it too.

One execution of each chapter. A chapter whose every cell passed under nbval is recorded
with its executed notebook and a key (tools/nbrecord.py); a later run with the same key
(the same notebook, package, environment and settings) checks the record instead of
executing the chapter again, and ``--nbval-fresh`` executes every chapter regardless.
So the README's build command (tools/execute.py runs the chapters under nbval) and its
test command execute each chapter once between them.
"""

import ast
import copy
import os
import pathlib
import sys
import time

import nbformat
import pytest
from nbval.plugin import IPyNbCell, IPyNbFile

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # before numpy is imported
# Chapter 7's models are trained once per machine: Chapters 8 and 10 and the tests read
# them back from here (attncourse.kit.trained.trained_model).
_MODELS = pathlib.Path(__file__).resolve().parent / "_build" / "models"
os.environ.setdefault("ATTNCOURSE_MODELS", str(_MODELS))

from attncourse.kit.exercises import UNFINISHED  # noqa: E402

sys.path.append(str(pathlib.Path(__file__).resolve().parent / "tools"))
import nbrecord  # noqa: E402


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
                     help="execute every chapter under nbval even when a record of a "
                          "run with the same key exists (see tools/nbrecord.py)")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    if (nbrecord.is_chapter(file_path) and not parent.config.getoption("nbval_fresh")
            and any(isinstance(c, IPyNbFile) for c in collected)):
        record = nbrecord.fresh_record(file_path)
        if record is not None:
            return [RecordedChapter.from_parent(parent, path=file_path, record=record)]
    return collected


def recorded_cell_problem(number, cell):
    """What is wrong with code cell ``number`` of a recorded run (None: nothing)."""
    if cell.get("execution_count") != number + 1:
        return (f"the record shows it was not run in order (execution count "
                f"{cell.get('execution_count')})")
    errors = [out for out in cell.outputs if out.get("output_type") == "error"]
    if errors:
        return (f"the record shows an exception: {errors[0].get('ename')}: "
                f"{errors[0].get('evalue')}")
    return stub_cell_problem(cell.source, cell.outputs)


class RecordedChapter(pytest.File):
    """A chapter checked from the record of its nbval run (tools/nbrecord.py)."""

    def __init__(self, *, record, **kwargs):
        super().__init__(**kwargs)
        self.record = record

    def collect(self):
        executed = nbformat.reads(self.record["executed"], as_version=4)
        code = [cell for cell in executed.cells if cell.cell_type == "code"]
        for number, cell in enumerate(code):
            yield RecordedCell.from_parent(self, name=f"Cell {number}", number=number,
                                           cell=cell)


class RecordedCell(pytest.Item):
    """A cell of a recorded run: it ran in order, raised nothing, kept the stub rule."""

    def __init__(self, *, number, cell, **kwargs):
        super().__init__(**kwargs)
        self.number, self.cell = number, cell
        self.user_properties.append(("nbval_record", self.parent.record["key"]))

    def runtest(self):
        problem = recorded_cell_problem(self.number, self.cell)
        if problem:
            pytest.fail(f"cell {self.number}: {problem}", pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.name} (recorded nbval run)"


_RUNS = {}  # a chapter's nodeid -> its nbval run so far: start, passed, outputs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if isinstance(item, IPyNbCell) and nbrecord.is_chapter(item.path):
        run = _RUNS.setdefault(item.parent.nodeid, {"start": time.perf_counter(),
                                                    "passed": True, "outputs": {}})
        if report.failed or report.skipped:
            run["passed"] = False
        if call.when == "call" and item.test_outputs is not None:
            run["outputs"][item.cell_num] = item.test_outputs
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    last = nextitem is None or nextitem.parent is not item.parent
    if last and isinstance(item, IPyNbCell) and nbrecord.is_chapter(item.path):
        run = _RUNS.pop(item.parent.nodeid, None)
        executed = copy.deepcopy(item.parent.nb)
        code = [cell for cell in executed.cells if cell.cell_type == "code"]
        if run and run["passed"] and sorted(run["outputs"]) == list(range(len(code))):
            for number, cell in enumerate(code):
                cell.outputs = run["outputs"][number]
                cell.execution_count = number + 1
            from ipykernel.ipkernel import IPythonKernel  # the kernel nbval ran

            executed.metadata["language_info"] = IPythonKernel.language_info
            nbrecord.write_record(item.path, nbformat.writes(executed),
                                  time.perf_counter() - run["start"])
    return result


def pytest_terminal_summary(terminalreporter):
    keys = {(report.fspath, value) for reports in terminalreporter.stats.values()
            for report in reports
            for name, value in getattr(report, "user_properties", ())
            if name == "nbval_record"}
    if keys:
        terminalreporter.write_line(
            f"{len(keys)} chapter(s) checked from the records of their nbval runs in "
            f"{nbrecord.RECORDS} (same notebook, package and environment); "
            f"--nbval-fresh executes them again")
