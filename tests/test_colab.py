"""The Colab renditions (colab/NN_x.ipynb, written by tools/colab.py).

Colab renders Markdown and $-math but no MyST, so each chapter has a rendition in
plain Markdown with the same code cells. These tests regenerate the renditions and
compare them with the committed ones, look for MyST left in them, compare their code
cells with the chapters', and check the converter on small inputs.
"""

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab  # noqa: E402

REGENERATE = ".venv/bin/python tools/colab.py"
CHAPTERS = [path for _, path in colab.chapters()]
# What Colab would show raw: each construct of MyST the chapters use, by name.
MYST = {
    "directive fence": r"^\s*(`{3,}|:{3,})\s*\{[\w:-]+\}",
    "colon fence": r"^\s*:{3,}\s*$",
    "{eq} role": r"\{eq\}`",
    "{numref} role": r"\{numref\}`",
    "{ref} role": r"\{ref\}`",
    "{term} role": r"\{term\}`",
    "{cite} role": r"\{cite(:\w+)?\}`",
    "any other role": r"\{[\w:-]+\}`[^`]*`",
    "directive option": r"^\s*:(label|class|name|open|nonumber|caption):",
    "target": r"^\(\S+\)=\s*$",
    "generator marker": r"<!--",
}


def myst_left(nb):
    """(cell id, construct) for every MyST construct in a notebook's Markdown cells."""
    return [(cell.get("id"), name) for cell in nb["cells"]
            if cell["cell_type"] == "markdown"
            for name, pattern in MYST.items()
            if re.search(pattern, "".join(cell["source"]), re.M)]


@pytest.fixture(scope="module")
def renderer():
    return colab.Renderer()


@pytest.fixture
def unit():
    """A renderer of its own for the small inputs, which add labels to it."""
    return colab.Renderer()


@pytest.fixture(scope="module")
def renditions(renderer):
    return {path.name: colab.render(path, renderer) for path in CHAPTERS}


def committed(path):
    target = ROOT / "colab" / path.name
    assert target.exists(), f"no {target.relative_to(ROOT)}: run {REGENERATE}"
    return json.loads(target.read_text())


# --- the committed renditions --------------------------------------------------------


def test_every_chapter_has_its_rendition_and_nothing_else():
    assert CHAPTERS, "no chapter in _toc.yml"
    written = sorted(p.name for p in (ROOT / "colab").glob("*.ipynb"))
    assert written == sorted(p.name for p in CHAPTERS), f"run {REGENERATE}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_the_committed_rendition_is_current(path, renditions):
    fresh = colab.dumps(copy.deepcopy(renditions[path.name]))
    assert (ROOT / "colab" / path.name).read_text() == fresh, (
        f"colab/{path.name} is stale: run {REGENERATE}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_rendition_contains_myst(path):
    nb = committed(path)
    assert myst_left(nb) == []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            opened = len(re.findall(r"<details[ >]", text))
            assert opened == text.count("</details>"), cell["id"]
            assert text.count("$$") % 2 == 0, cell["id"]


def test_a_planted_myst_construct_is_caught():
    nb = committed(CHAPTERS[0])
    assert myst_left(nb) == []
    for planted, name in [("see {eq}`eq-ch1-x`", "{eq} role"),
                          ("```{math}\n:label: eq-x\nx\n```", "directive fence"),
                          ("{cite:t}`vaswani2017attention`", "{cite} role"),
                          ("(sec-x)=\n## A section", "target")]:
        spoiled = copy.deepcopy(nb)
        markdown = next(c for c in spoiled["cells"] if c["cell_type"] == "markdown")
        markdown["source"] = ["text\n", planted]
        assert (markdown["id"], name) in myst_left(spoiled), planted


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_cells_are_the_chapters_own(path):
    cells = json.loads(path.read_text())["cells"]
    source = [c for c in cells if c["cell_type"] == "code"]
    rendition = [c for c in committed(path)["cells"] if c["cell_type"] == "code"]
    assert [c["id"] for c in rendition] == [c["id"] for c in source]
    for mine, theirs in zip(rendition, source):
        assert mine["source"] == theirs["source"], mine["id"]
        assert mine["outputs"] == [] and mine["execution_count"] is None, mine["id"]
        metadata = dict(mine["metadata"])
        view = metadata.pop("cellView", None)
        assert metadata == theirs["metadata"], mine["id"]  # tags, jupyter, mystnb
        tags = set(theirs["metadata"].get("tags", []))
        if tags & {"hide-input", "hide-cell", "remove-cell"}:
            assert view == "form", f"{mine['id']}: folded in the book, open in Colab"
    assert rendition[0]["id"] == "course-setup", "the setup cell installs the package"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_cell_tells_a_colab_user_to_run_what_only_a_clone_has(path):
    assert colab.clone_only(json.loads(path.read_text())) == [], (
        f"{path.name}: a cell runs a path that exists only in a clone"
    )


def test_the_clone_check_catches_a_planted_command():
    def nb(*sources):
        return {"cells": [{"id": f"c{i}", "source": [s]}
                          for i, s in enumerate(sources)]}
    assert colab.clone_only(nb("run `.venv/bin/python benchmarks/attention.py`"))
    assert colab.clone_only(nb("!python benchmarks/attention.py --quick"))
    assert colab.clone_only(nb("pytest tests/test_colab.py"))
    assert colab.clone_only(nb("import ac", "see `benchmarks/attention.py`")) == []


# --- the converter on small inputs ---------------------------------------------------


def test_a_labelled_math_block_becomes_numbered_display_math(unit):
    unit.labels["eq-t-one"] = ("7.2", "")
    out = unit.markdown("Before\n\n```{math}\n:label: eq-t-one\na = b\n```\n\nafter")
    assert out == "Before\n\n$$\na = b \\tag{7.2}\n$$\n\nafter"
    assert unit.markdown("```{math}\nx \\\\ y\n```") == (
        "$$\n\\begin{aligned}\nx \\\\ y\n\\end{aligned}\n$$"
    )


def test_roles_become_the_numbers_and_words_the_book_prints(unit):
    unit.labels.update({"eq-t-one": ("7.2", ""), "fig-t": ("Fig. 7.3", "A caption"),
                            "sec-t": ("Section 7.1", "The title")})
    assert unit.markdown("by {eq}`eq-t-one`.") == "by (7.2)."
    assert unit.markdown("{numref}`fig-t` and {ref}`sec-t`") == "Fig. 7.3 and The title"
    assert unit.markdown("{ref}`this part <sec-t>`") == "this part"
    assert unit.markdown("{cite:p}`rabe2021self,dao2022flashattention`") == (
        "[Dao *et al.*, 2022, Rabe and Staats, 2021]"
    )
    assert unit.markdown("{cite:t}`vaswani2017attention`") == (
        "Vaswani *et al.* [2017]"
    )
    assert unit.markdown("a {term}`token`") == (
        f"a [token]({colab.BOOK}/book/glossary.html#term-Token)"
    )
    with pytest.raises(colab.MystLeft, match="unknown label 'eq-missing'"):
        unit.markdown("{eq}`eq-missing`")
    with pytest.raises(colab.MystLeft, match="role {glue}"):
        unit.markdown("{glue}`x`")


def test_links_point_at_the_published_book_and_colab(unit):
    out = unit.markdown("[Notation](../book/notation.md), [Ch. 2](02_x.ipynb)")
    assert out == (f"[Notation]({colab.BOOK}/book/notation.html), "
                   f"[Ch. 2]({colab.COLAB}/02_x.ipynb)")
    owner, repo = colab.SLUG.split("/")  # GitHub Pages of the repository's address
    assert colab.BOOK == f"https://{owner}.github.io/{repo}"


def test_an_exercise_and_its_solution_become_a_heading_and_details(unit):
    unit.chapter, unit.exercises = 7, 0
    out = unit.markdown(
        "````{exercise} One step\n:label: ex-t\n\nWrite it.\n````\n\n"
        "````{solution} ex-t\n:class: dropdown\n\n"
        "```python\ndef f():\n    pass\n```\n````"
    )
    assert out == ("### Exercise 7.1 — One step\n\nWrite it.\n\n"
                   "<details><summary>Solution</summary>\n\n"
                   "```python\ndef f():\n    pass\n```\n\n</details>")


def test_hints_dropdowns_and_admonitions(unit):
    assert unit.markdown(":::{dropdown} Checks\nText.\n:::") == (
        "<details><summary>Checks</summary>\n\nText.\n\n</details>"
    )
    assert unit.markdown("```{hint}\nUse the mask.\n```") == (
        "<details><summary>Hint</summary>\n\nUse the mask.\n\n</details>"
    )
    assert unit.markdown("```{note}\nOne.\nTwo.\n```") == "> **Note.** One.\n> Two."
    with pytest.raises(colab.MystLeft, match="directive {glue:figure}"):
        unit.markdown("```{glue:figure} x\n```")


def test_a_solution_across_cells_folds_its_code(tmp_path, unit):
    def cell(kind, source, **metadata):
        extra = {"outputs": [1], "execution_count": 3} if kind == "code" else {}
        return {"cell_type": kind, "id": f"c{len(cells)}", "metadata": metadata,
                "source": source, **extra}
    cells = []
    cells.append(cell("markdown", "```{exercise} A stub\n:label: ex-t2\nDo it.\n```"))
    cells.append(cell("code", "def f(): ..."))
    cells.append(cell("markdown",
                      "```{solution-start} ex-t2\n:class: dropdown\n```\n\nA hint"))
    cells.append(cell("code", "def solution_f(): ..."))
    cells.append(cell("markdown", "```{solution-end}\n```\n\nAfter."))
    cells.append(cell("code", "x = 1"))
    path = tmp_path / "07_t.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    out = colab.render(path, unit)["cells"]
    assert [c["id"] for c in out] == ["colab-edition"] + [f"c{i}" for i in range(6)]
    assert out[1]["source"].startswith("### Exercise")
    assert out[3]["source"] == ("<details><summary>Solution</summary>\n\nA hint\n\n"
                                f"{colab.SOLUTION_CODE}\n\n</details>")
    assert out[4]["metadata"] == {"cellView": "form"} and out[4]["outputs"] == []
    assert "cellView" not in out[2]["metadata"] and "cellView" not in out[6]["metadata"]
    assert out[5]["source"] == "After."


def test_myst_left_over_names_the_cell(tmp_path, unit):
    cells = [{"cell_type": "markdown", "id": "bad-cell", "metadata": {},
              "source": "```{figure} a.png\nA caption\n```"}]
    path = tmp_path / "07_t.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}}))
    where = r"07_t.ipynb, cell bad-cell: directive \{figure\}"
    with pytest.raises(colab.MystLeft, match=where):
        colab.render(path, unit)


def test_labelled_dollar_math_is_numbered(tmp_path, unit):
    cells = [{"cell_type": "markdown", "id": "m", "metadata": {},
              "source": "```{math}\n:label: eq-a\na\n```\n\n"
                        "$$\nb\n$$ (eq-b)\n\n{eq}`eq-b`"}]
    path = tmp_path / "07_t.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}}))
    colab.number(7, path, unit.labels)
    assert colab.render(path, unit)["cells"][1]["source"] == (
        "$$\na \\tag{7.1}\n$$\n\n$$\nb\n \\tag{7.2}$$\n\n(7.2)"
    )
