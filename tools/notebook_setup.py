"""Keep the chapters learner-ready: the setup cell for Colab, solution code folded.

    .venv/bin/python tools/notebook_setup.py            # every chapter in _toc.yml
    .venv/bin/python tools/notebook_setup.py chapters/10_kv_cache.ipynb
    .venv/bin/python tools/notebook_setup.py --check    # exit 1 if a cell is stale

A notebook opened in Colab (or downloaded on its own) runs in a kernel without the
course package. Its first code cell therefore installs ``attncourse`` from the
repository when ``import attncourse`` would fail, and does nothing where it is installed
(a clone set up with ./course, Binder, nbval, the book's build). The repository's
address and branch are written once, in ``_config.yml``; the package's name and extras
come from ``pyproject.toml``. A notebook cannot read ``_config.yml`` on Colab, so the
cell carries a copy, written by this script and checked against ``_config.yml`` by
``tests/test_notebooks.py``.

The cell (id ``course-setup``) is tagged ``remove-cell``: the book leaves it out of the
HTML, while JupyterLab, Colab and Binder show and run it. It goes right before the
chapter's first code cell. Rerun this script when the address, the branch or the extras
change, or for a new chapter. Notebooks stay without outputs.

The same script folds the input of every code cell inside a gated solution (between
``{solution-start}`` and ``{solution-end}``) with the cell metadata
``"jupyter": {"source_hidden": true}``, so JupyterLab shows the exercise without its
answer until the learner unfolds it. The book and nbval ignore that metadata.
"""

import argparse
import pathlib
import re
import sys
import tomllib
import urllib.parse

import nbformat
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from toc import toc_notebooks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CELL_ID = "course-setup"
TAGS = ["remove-cell"]
EXTRAS = ("symbolic", "plots")  # what the chapters import: sympy and matplotlib

TEMPLATE = """\
# Colab or Binder: install the course package if this kernel lacks it. In a clone set
# up with ./course, attncourse is installed and this cell does nothing.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("{name}") is None:
    repository = "{url}"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    f"{name}[{extras}] @ git+{{repository}}@{branch}"], check=True)"""


def requirement_parts(root=ROOT):
    """The package name, extras, repository address and branch the cell installs."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    repository = config["repository"]
    url = repository["url"].rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"_config.yml: repository.url {url!r} is not an https address")
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    missing = set(EXTRAS) - set(project.get("optional-dependencies", {}))
    if missing:
        raise ValueError(f"pyproject.toml defines no extras {sorted(missing)}")
    return {
        "name": project["name"],
        "extras": ",".join(EXTRAS),
        "url": url,
        "branch": repository.get("branch", "main"),
    }


def setup_source(root=ROOT):
    """The source of the setup cell, from ``_config.yml`` and ``pyproject.toml``."""
    return TEMPLATE.format(**requirement_parts(root))


def refreshed(nb, source):
    """``nb`` with one setup cell, holding ``source``, before its first code cell."""
    cells = [c for c in nb.cells if c.get("id") != CELL_ID]
    cell = nbformat.v4.new_code_cell(source)
    cell.id = CELL_ID
    cell.metadata = {"tags": list(TAGS)}
    first_code = next(
        (i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells)
    )
    nb.cells = cells[:first_code] + [cell] + cells[first_code:]
    return nb


_GATE = re.compile(r"^[`:]{3,}\{(solution-start|solution-end)\}", re.MULTILINE)


def solution_code_cells(nb):
    """Indices of the code cells that sit inside a gated solution."""
    inside, found = False, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if inside:
                found.append(index)
            continue
        if cell.cell_type == "markdown":
            for gate in _GATE.findall(cell.source):
                inside = gate == "solution-start"
    return found


def folded(nb):
    """``nb`` with the input of every solution code cell folded in JupyterLab."""
    for index in solution_code_cells(nb):
        nb.cells[index].metadata.setdefault("jupyter", {})["source_hidden"] = True
    return nb


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks",
        nargs="*",
        type=pathlib.Path,
        help="notebooks to update (default: every chapter in _toc.yml)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a notebook needs updating",
    )
    args = parser.parse_args()
    source = setup_source()
    stale = []
    for path in args.notebooks or toc_notebooks(ROOT):
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=4)
        new = nbformat.writes(folded(refreshed(nb, source))) + "\n"
        if new == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
    verb = "needs" if args.check else "updated"
    for path in stale:
        print(f"{verb}: {path}")
    if args.check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
