"""Tests of attncourse.kit.failed: CheckFailed holds under ``python -O`` and, in IPython
and Jupyter, is drawn without the kit's own frames."""

import re
import subprocess
import sys
import types

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import IPython
from IPython.core.ultratb import AutoFormattedTB

from attncourse.kit.exercises import check_top_k
from attncourse.kit.failed import CheckFailed

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_check_failed_is_an_assertion_error_that_holds_under_python_O():
    code = (
        "from attncourse.kit.exercises import check_top_k\n"
        "try:\n"
        "    check_top_k(lambda logits, k: logits)\n"
        "except AssertionError as e:\n"
        "    print(type(e).__name__, e.property)\n"
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout == "CheckFailed keeps exactly k\n"


def _wrong_top_k(logits, k):
    """Right for k <= n; crashes at k = 10 > n = 7 (np.argpartition's kth < n)."""
    idx = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    P = np.zeros_like(logits)
    np.put_along_axis(P, idx, np.take_along_axis(z, idx, axis=-1), axis=-1)
    return P / P.sum(axis=-1, keepdims=True)


def _caught():
    with pytest.raises(CheckFailed) as info:
        check_top_k(_wrong_top_k)
    return info.value


def _shell(monkeypatch):
    """IPython's drawing of tracebacks as a kernel sets it up, without a kernel."""
    shell = types.SimpleNamespace(
        InteractiveTB=AutoFormattedTB(mode="Context", theme_name="nocolor")
    )
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return shell


def test_ipython_draws_check_failed_without_the_kits_frames(monkeypatch):
    shell, error = _shell(monkeypatch), _caught()
    whole = error.__traceback__
    # the control: IPython's own drawing shows the checker's frames first
    plain = ANSI.sub("", "\n".join(shell.InteractiveTB.structured_traceback(
        type(error), error, error.__traceback__)))
    assert "exercises/_base.py" in plain and "exercises/sample.py" in plain
    drawn = ANSI.sub("", "\n".join(error._render_traceback_()))
    assert "/attncourse/kit/" not in drawn
    assert "in _wrong_top_k(logits, k)" in drawn  # the learner's frame is kept
    assert "The above exception was the direct cause" in drawn
    assert drawn.rstrip().endswith(str(error).splitlines()[-1])
    # the exception keeps its whole traceback
    assert error.__traceback__ is whole
    assert _names(error.__cause__.__traceback__)[:2] == ["_call", "_wrong_top_k"]


def _names(tb):
    """The names of the functions of a traceback's frames, outermost first."""
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def test_outside_ipython_the_hook_gives_the_standard_lines(monkeypatch):
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    lines = "".join(_caught()._render_traceback_())
    assert lines.rstrip().endswith(str(_caught()))


CELL = '''\
import numpy as np
from attncourse.kit.exercises import check_top_k

def my_top_k(logits, k):
    idx = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    P = np.zeros_like(logits)
    np.put_along_axis(P, idx, np.take_along_axis(z, idx, axis=-1), axis=-1)
    return P / P.sum(axis=-1, keepdims=True)

check_top_k(my_top_k)'''


def test_a_jupyter_kernel_shows_the_message_and_the_learners_frames_only(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    (error,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    text = ANSI.sub("", "\n".join(error.traceback))
    assert error.ename == "CheckFailed"
    assert "/attncourse/kit/" not in text and "skipping hidden" not in text
    assert re.search(r"Cell In\[1\], line 5, in my_top_k\(logits, k\)", text)
    assert "ValueError: kth(=9) out of bounds (7)" in text
    assert "---> 11 check_top_k(my_top_k)" in text
    assert text.rstrip().endswith(
        "CheckFailed: returns probabilities: calling my_top_k(logits (3, 7), k=10) "
        "raised ValueError: kth(=9) out of bounds (7) (likely fix: make my_top_k "
        "accept these arguments: the traceback above ends at the line that raised)"
    )
