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
"""

import ast
import os

import pytest

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # before numpy is imported

from attncourse.verify.exercises import UNFINISHED  # noqa: E402


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
