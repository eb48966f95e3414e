"""Every chapter run from top to bottom with a wrong answer in each exercise stub.

A learner who answers an exercise wrongly and then runs the rest of the chapter must
see the checker report it, and must keep their own function: no later cell may bind the
name they were asked to write (a solution cell that reuses it would silently replace
their answer, and the next check would pass on the solution). Each chapter is executed
here as "Run All" runs it, going on past errors, with the body of every stub (a function
whose body only raises ``NotImplementedError``, the root ``conftest.stub_names``)
replaced by ``return None`` and the function marked; a cell appended at the end lists
the stubs whose name no longer holds the marked function. The test asserts that every
stub cell raised the checker's ``CheckFailed`` (not the "not done yet" notice), that no
other cell raised (the rest of the chapter does not lean on the learner's answer), and
that the appended cell found every planted function in place.

Fault controls: a solution cell that reuses the stub's name, a stub whose cell does not
call its checker, and a later cell that leans on the learner's answer are each caught.

This executes every chapter once more (about a minute of processor time with the
trained models cached), so it is marked ``book``, with the other slow tests.
"""

import ast
import copy
import importlib.util
import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root_conftest)
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
MARK = "_planted_wrong_answer"
REPORT = "stubs replaced:"

pytestmark = pytest.mark.book


def plant(source, names):
    """``source`` with each stub in ``names`` answering ``None``, marked ``MARK``."""
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        body.append(node)
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.body = [ast.Return(ast.Constant(None))]
            body.append(ast.parse(f"{node.name}.{MARK} = True").body[0])
    tree.body = body
    return ast.unparse(tree)


def planted(nb):
    """A copy of ``nb`` with every stub answered wrongly, the indices of the stub
    cells, and a last cell that prints which stubs no longer hold their planted
    function."""
    nb = copy.deepcopy(nb)
    stubs, cells = [], []
    for index, cell in enumerate(nb.cells):
        code = cell.cell_type == "code"
        names = root_conftest.stub_names(cell.source) if code else []
        if names:
            cell.source = plant(cell.source, names)
            stubs += names
            cells.append(index)
    nb.cells.append(nbformat.v4.new_code_cell(
        f"print({REPORT!r}, [name for name in {stubs!r} "
        f"if not getattr(globals().get(name), {MARK!r}, False)])"))
    return nb, cells, stubs


def run_all(nb, where):
    """Execute ``nb`` as Run All does, going on past errors; return it."""
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(where)}}).execute()
    return nb


def errors(cell):
    return [out for out in cell.get("outputs", []) if out.output_type == "error"]


def verdict(nb, stub_cells):
    """What went wrong in an executed planted notebook (an empty list: nothing)."""
    problems = []
    for index, cell in enumerate(nb.cells[:-1]):
        if cell.cell_type != "code":
            continue
        raised = [e.ename for e in errors(cell)]
        if index in stub_cells and raised != ["CheckFailed"]:
            problems.append(f"cell {index}: the checker did not report the wrong "
                            f"answer (raised {raised})")
        elif index not in stub_cells and raised:
            problems.append(f"cell {index} raised {raised} after a wrong answer")
    last = nb.cells[-1]
    text = "".join(out.get("text", "") for out in last.outputs)
    if errors(last) or text.strip() != f"{REPORT} []":
        problems.append(f"at the end: {text.strip() or errors(last)}")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_wrong_answer_is_reported_and_stays_the_learners_own(path):
    nb, stub_cells, stubs = planted(nbformat.read(path, as_version=4))
    if not stubs:
        pytest.skip(f"{path.name} has no exercise stub")
    problems = verdict(run_all(nb, path.parent), stub_cells)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_a_solution_that_reuses_the_stubs_name_is_caught(tmp_path):
    cells = [
        "from attncourse.kit.exercises import check_top_k",
        'def my_top_k(logits, k):\n    raise NotImplementedError("your code here")\n'
        "\n\ncheck_top_k(my_top_k)",
        "import numpy as np\n\n\ndef my_top_k(logits, k):  # the solution, same name\n"
        "    keep = np.argsort(-logits, axis=-1, kind='stable')[..., :k]\n"
        "    out = np.full_like(logits, -np.inf)\n"
        "    np.put_along_axis(out, keep, np.take_along_axis(logits, keep, -1), -1)\n"
        "    return out",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    planted_nb, stub_cells, stubs = planted(nb)
    assert stubs == ["my_top_k"] and stub_cells == [1]
    problems = verdict(run_all(planted_nb, tmp_path), stub_cells)
    assert problems == [f"at the end: {REPORT} ['my_top_k']"], json.dumps(problems)


def test_a_stub_whose_checker_is_not_called_and_a_cell_that_leans_on_it_are_caught(
        tmp_path):
    cells = ['def my_f(x):\n    raise NotImplementedError("your code here")',
             "my_f(1) + 1  # leans on the learner's answer"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    planted_nb, stub_cells, _ = planted(nb)
    problems = verdict(run_all(planted_nb, tmp_path), stub_cells)
    assert problems == [
        "cell 0: the checker did not report the wrong answer (raised [])",
        "cell 1 raised ['TypeError'] after a wrong answer"], problems
