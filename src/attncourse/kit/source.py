"""The package's own code on the page: ``source(attention_forward)``.

A chapter shows the function it teaches by printing its source, read from the package at
run time, so the book, the notebook and the package cannot drift apart. The result is a
Markdown code block (``IPython.display.Markdown``), which the book, JupyterLab and Colab
all render, headed by the file it comes from.
"""

import ast
import inspect
import pathlib
import textwrap

__all__ = ["source"]

_ROOT = pathlib.Path(__file__).resolve().parents[1]  # src/attncourse


def _without_docstring(code):
    """``code`` (one function or class) with its docstring's lines left out."""
    node = ast.parse(textwrap.dedent(code)).body[0]
    first = node.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return code
    lines = code.splitlines()
    return "\n".join(lines[:first.lineno - 1] + lines[first.end_lineno:])


def source(*objects, docstring=False):
    """The source of ``objects`` (functions or classes of the package) as one Markdown
    code block, each headed by its module's path (``attncourse/layers/attention.py``);
    docstrings are left out unless ``docstring=True``.
    """
    from IPython.display import Markdown

    if not objects:
        raise ValueError("source needs at least one function or class")
    parts = []
    for obj in objects:
        try:
            path = pathlib.Path(inspect.getsourcefile(obj)).resolve()
            where = path.relative_to(_ROOT.parent).as_posix()
        except (TypeError, ValueError):
            raise ValueError(f"{obj!r} is not defined in attncourse") from None
        code = inspect.getsource(obj).rstrip()
        parts.append(f"# {where}\n{code if docstring else _without_docstring(code)}")
    return Markdown("```python\n" + "\n\n".join(parts) + "\n```")
