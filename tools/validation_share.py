"""How much of the core is input validation: ``python tools/validation_share.py``.

Counts, over the core modules of ``attncourse`` (everything outside ``kit/``), the
executable lines (lines covered by a statement; docstrings, comments and blank lines
are not counted) and, among them, the validation lines:

- ``_validate.py`` (the shared validators) and every function named ``validate_*``,
  ``require_*`` or ``as_*``, whole;
- a ``raise`` of ``ValueError`` or ``TypeError``, and an ``if`` whose body only raises;
- a statement whose value is a call of a validator (``shaped``, ``validate_*``,
  ``require_*``, ``as_*``);
- a ``try`` whose handlers raise ``ValueError``.

Prints one line per module and the total; ``--max PERCENT`` exits 1 above it.
"""

import argparse
import ast
import pathlib
import re
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "src" / "attncourse"
VALIDATOR = re.compile(r"^_?(shaped|validate_\w*|require_\w*|as_\w*)$")


def lines(node):
    return set(range(node.lineno, node.end_lineno + 1))


def called(node):
    """The name of the function ``node`` (an expression) calls, or None."""
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
    return None


def raises_value_error(stmt):
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    name = called(stmt.exc) or getattr(stmt.exc, "id", None)
    return name in ("ValueError", "TypeError")


def is_docstring(stmt):
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def count(source, whole=False):
    """Return ``(executable, validation)`` line sets of one module's source."""
    executable, validation = set(), set()

    def visit(body, in_validator):
        for stmt in body:
            if is_docstring(stmt):
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                executable.add(stmt.lineno)
                visit(stmt.body, in_validator or bool(VALIDATOR.match(stmt.name)))
                continue
            nested = [getattr(stmt, f) for f in ("body", "orelse", "finalbody")
                      if isinstance(getattr(stmt, f, None), list)]
            handlers = getattr(stmt, "handlers", [])
            own = lines(stmt) if not nested else {stmt.lineno}
            if isinstance(stmt, ast.If):
                own = set(range(stmt.test.lineno, stmt.test.end_lineno + 1)) | own
            executable.update(own)
            value = getattr(stmt, "value", None)
            if in_validator or raises_value_error(stmt) \
                    or (value is not None and VALIDATOR.match(called(value) or "")):
                validation.update(lines(stmt))
                executable.update(lines(stmt))
                continue
            if isinstance(stmt, ast.If) and all(raises_value_error(s)
                                                 for s in stmt.body):
                validation.update(lines(stmt) - set().union(
                    *(lines(s) for s in stmt.orelse)) if stmt.orelse else lines(stmt))
                executable.update(lines(stmt.body[0]))
                visit(stmt.orelse, in_validator)
                continue
            if isinstance(stmt, ast.Try) and any(
                    any(raises_value_error(s) for s in h.body) for h in handlers):
                validation.update(lines(stmt))
                executable.update(lines(stmt))
                continue
            for block in nested:
                visit(block, in_validator)
            for h in handlers:
                executable.add(h.lineno)
                visit(h.body, in_validator)

    visit(ast.parse(source).body, whole)
    return executable, validation & executable | (validation if whole else set())


def core_modules():
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if "kit" not in p.relative_to(PACKAGE).parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=float, help="fail above this percentage")
    args = parser.parse_args(argv)
    total_e = total_v = 0
    for path in core_modules():
        e, v = count(path.read_text(), whole=path.name == "_validate.py")
        total_e, total_v = total_e + len(e), total_v + len(v)
        share = 100 * len(v) / len(e) if e else 0.0
        name = str(path.relative_to(PACKAGE))
        print(f"{name:28} {len(e):5} {len(v):5} {share:5.1f} %")
    share = 100 * total_v / total_e
    print(f"{'core':28} {total_e:5} {total_v:5} {share:5.1f} %")
    return 1 if args.max is not None and share > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
