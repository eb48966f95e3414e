"""The learner's route through the chapter notebooks: Run All, Colab and Binder.

"Run All" in a plain kernel completes. No chapter cell is exempt from execution (no
``raises-exception`` or skip tag), so nbval, which runs every chapter once (in the
build command, or in the test command when the chapter is not in the current notebook
cache: see tools/execute.py and tests/test_execute.py), executes each one as "Run All"
does and fails on any exception; the hook in the root ``conftest.py`` also fails an
exercise cell that does not print the one-line "not done yet" notice. These fast tests
assert the premises (no exemptions, every stub passed to a checker, no cell binding a
stub's name), test the hook's rule, and run small notebooks in a plain kernel with
nbclient to show that a stub lets Run All go on while a wrong answer still stops it;
tests/test_planted_answers.py runs every chapter with a wrong answer in each stub.

Colab and Binder: the first code cell of every chapter installs the course package when
it is missing, from the address in ``_config.yml`` (tools/notebook_setup.py writes it).
"""

import ast
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import stat
import subprocess
import sys
import tomllib
import urllib.parse

import nbformat
import pytest
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from attncourse.kit.exercises import UNFINISHED

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup_tool = _load("notebook_setup", ROOT / "tools" / "notebook_setup.py")
root_conftest = _load("root_conftest", ROOT / "conftest.py")

# every chapter: those in _toc.yml and any notebook under chapters/ not yet listed
CHAPTERS = sorted(
    set(setup_tool.toc_notebooks(ROOT)) | set((ROOT / "chapters").glob("*.ipynb"))
)
EXEMPTING_TAGS = {
    "raises-exception",
    "skip-execution",
    "nbval-skip",
    "nbval-raises-exception",
}
EXEMPTING_COMMENTS = re.compile(
    r"^\s*#\s*(NBVAL_SKIP|NBVAL_RAISES_EXCEPTION)\s*$", re.M
)


def code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


# --- Run All --------------------------------------------------------------------------


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_cell_is_exempt_from_run_all(path):
    nb = nbformat.read(path, as_version=4)
    exempt = [
        c.get("id")
        for c in nb.cells
        if c.cell_type == "code"
        and (
            EXEMPTING_TAGS & set(c.metadata.get("tags", []))
            or EXEMPTING_COMMENTS.search(c.source)
        )
    ]
    assert exempt == [], f"{path.name}: cells {exempt} would stop Run All or skip nbval"
    settings = nb.metadata.get("execution", {})  # myst-nb's per-notebook overrides
    assert not settings.get("allow_errors"), f"{path.name} allows errors"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_exercise_stub_is_passed_to_a_learner_checker(path):
    stub_cells = [c for c in code_cells(path) if root_conftest.stub_names(c.source)]
    assert stub_cells, f"{path.name} has no exercise stub"
    for cell in stub_cells:
        stubs = set(root_conftest.stub_names(cell.source))
        checked = set()
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).rsplit(".", 1)[-1]
                if name.startswith("check_"):
                    checked |= {ast.unparse(a) for a in node.args} & stubs
        assert checked, f"{path.name}, cell {cell.get('id')}: no checker gets {stubs}"


def defined_names(source):
    """The names a cell's code binds at its top level: functions, classes, assignments,
    imports (IPython magics: none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def redefined_stubs(cells):
    """``(cell id, name)`` for every cell that binds a name some other cell's stub asks
    the learner to write: run top to bottom, it would replace the learner's answer."""
    stubs = {name: cell.get("id") for cell in cells
             for name in root_conftest.stub_names(cell.source)}
    return [(cell.get("id"), name) for cell in cells
            for name in sorted(defined_names(cell.source) & set(stubs))
            if stubs[name] != cell.get("id")]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_cell_replaces_the_learners_function(path):
    assert redefined_stubs(code_cells(path)) == []


def test_a_solution_cell_that_reuses_the_stubs_name_is_found():
    # fault control: the defect the rule exists for (a solution right after the stub,
    # defining the same name), in each way a cell can bind it
    stub = nbformat.v4.new_code_cell(
        "def my_clip(g):\n    raise NotImplementedError\n\ncheck_clip(my_clip)")
    stub["id"] = "stub"
    for i, solution in enumerate(["def my_clip(g):\n    return g",
                                  "my_clip = lambda g: g",
                                  "from attncourse.optim import clip as my_clip"]):
        cell = nbformat.v4.new_code_cell(solution)
        cell["id"] = f"solution-{i}"
        assert redefined_stubs([stub, cell]) == [(f"solution-{i}", "my_clip")]
    renamed = nbformat.v4.new_code_cell("def solution_clip(g):\n    return g")
    assert redefined_stubs([stub, renamed]) == []


def checker_calls(path):
    """``(cell id, checker call, stub names)`` for every exercise stub of a chapter: the
    call as written in the stub's cell (e.g. ``kit.check_top_k(my_top_k)``)."""
    calls = []
    for cell in code_cells(path):
        stubs = root_conftest.stub_names(cell.source)
        for node in ast.walk(ast.parse(cell.source)) if stubs else ():
            if (isinstance(node, ast.Call)
                    and ast.unparse(node.func).rsplit(".", 1)[-1].startswith("check_")):
                calls.append((cell.get("id"), node, stubs))
    return calls


def forgets_return(*args, **kwargs):
    """A planted wrong answer to any exercise: the ``return`` forgotten."""


def crashes(*args, **kwargs):
    """A planted wrong answer to any exercise: it fails on the checker's inputs."""
    return args[0][10**9]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
@pytest.mark.parametrize("wrong", [forgets_return, crashes])
def test_each_stubs_checker_reports_a_planted_wrong_answer(path, wrong):
    from attncourse.kit import CheckFailed, exercises

    calls = checker_calls(path)
    assert calls, f"{path.name} has no exercise checker"
    for cell, call, stubs in calls:
        checker = getattr(exercises, ast.unparse(call.func).rsplit(".", 1)[-1])
        args = [wrong if ast.unparse(a) in stubs else None for a in call.args]
        assert None not in args, f"{path.name}, cell {cell}: {ast.unparse(call)}"
        with pytest.raises(CheckFailed):
            checker(*args)


def test_the_stub_rule_accepts_the_notice_and_nothing_else():
    problem = root_conftest.stub_cell_problem
    source = (
        'def my_f(x):\n    raise NotImplementedError("your code here")\n\n\n'
        "check_f(my_f)"
    )
    notice = {
        "output_type": "stream",
        "name": "stdout",
        "text": UNFINISHED.format(name="my_f") + "\n",
    }
    assert problem(source, [notice]) is None
    assert problem("x = 1", []) is None  # not an exercise cell
    # fault controls: each way an exercise cell can go wrong is named
    assert "0 line(s)" in problem(source, [])
    error = {
        "output_type": "error",
        "ename": "NotImplementedError",
        "evalue": "",
        "traceback": [],
    }
    assert "'error'" in problem(source, [notice, error])
    assert "2 line(s)" in problem(source, [dict(notice, text=notice["text"] * 2)])
    other = UNFINISHED.format(name="my_g") + "\n"
    assert "printed" in problem(source, [dict(notice, text=other)])
    assert root_conftest.stub_names(
        "def f():\n    '''Doc.'''\n    raise NotImplementedError"
    ) == ["f"]
    assert root_conftest.stub_names("def f():\n    return 1") == []


def run_all(cells, tmp_path):
    """Execute code ``cells`` as Run All does in a plain kernel; return the notebook."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    return nb


EXERCISE = """\
def my_top_k(logits, k):
    raise NotImplementedError("your code here")


check_top_k(my_top_k)"""


def test_run_all_goes_on_past_a_stub_in_a_plain_kernel(tmp_path):
    nb = run_all(
        [
            "from attncourse.kit import check_top_k",
            EXERCISE,
            "print('the next cell ran')",
        ],
        tmp_path,
    )
    stub, after = nb.cells[1], nb.cells[2]
    assert root_conftest.stub_cell_problem(stub.source, stub.outputs) is None
    assert [o["text"] for o in stub.outputs] == [
        UNFINISHED.format(name="my_top_k") + "\n"
    ]
    assert after.outputs[0]["text"] == "the next cell ran\n"


def test_run_all_stops_at_a_wrong_answer_in_a_plain_kernel(tmp_path):
    wrong = EXERCISE.replace(
        'raise NotImplementedError("your code here")', "return logits"
    )
    with pytest.raises(CellExecutionError, match="CheckFailed"):
        run_all(["from attncourse.kit import check_top_k", wrong], tmp_path)


# --- Colab and Binder: the setup cell -------------------------------------------------


def test_the_tool_reports_no_stale_setup_cell():
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "notebook_setup.py"),
            "--check",
            *map(str, CHAPTERS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_the_first_code_cell_is_the_setup_cell_hidden_in_the_book(path):
    cells = code_cells(path)
    first = cells[0]
    assert first.get("id") == setup_tool.CELL_ID, (
        f"{path.name}: run tools/notebook_setup.py"
    )
    assert first.metadata.get("tags") == ["remove-cell"]  # left out of the HTML
    assert first.source == setup_tool.setup_source()
    assert [c.get("id") for c in cells].count(setup_tool.CELL_ID) == 1
    assert not first.get("outputs") and first.get("execution_count") is None


def pip_calls(source, monkeypatch, installed):
    """Run a setup cell's source with pip replaced by a recorder; return the calls."""
    calls = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: real_find_spec(name, *a) if installed else None,
    )
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: calls.append((argv, kw)))
    exec(compile(source, "<setup cell>", "exec"), {})
    return calls


def test_the_setup_cell_installs_the_course_package_from_the_configured_repository(
    monkeypatch,
):
    source = code_cells(CHAPTERS[0])[0].source
    [(argv, kwargs)] = pip_calls(source, monkeypatch, installed=False)
    assert argv[:5] == [sys.executable, "-m", "pip", "install", "--quiet"]
    assert kwargs == {"check": True} and len(argv) == 6
    requirement = Requirement(argv[5])
    assert requirement.name == PROJECT["name"] == "attncourse"
    assert requirement.extras == {"symbolic", "plots"}
    assert requirement.extras <= set(PROJECT["optional-dependencies"])
    repository = CONFIG["repository"]
    assert requirement.url == f"git+{repository['url']}@{repository['branch']}"
    assert (
        ROOT / "pyproject.toml"
    ).is_file()  # the package sits at the repository's root
    url = urllib.parse.urlsplit(requirement.url.removeprefix("git+"))
    assert url.scheme == "https" and url.netloc == "github.com"
    assert re.fullmatch(r"/[\w.-]+/[\w.-]+@[\w./-]+", url.path), url.path


def test_the_setup_cell_does_nothing_where_the_package_is_installed(monkeypatch):
    # nbval, the book's build, a clone set up as the README says, Binder
    assert (
        pip_calls(code_cells(CHAPTERS[0])[0].source, monkeypatch, installed=True) == []
    )


def test_the_installed_extras_provide_every_module_the_chapters_import():
    modules = set()
    for path in CHAPTERS:
        for cell in code_cells(path):
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Import):
                    modules |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names) - {"attncourse", "IPython"}
    requirements = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in sorted(setup_tool.EXTRAS):
        requirements += [
            Requirement(r) for r in PROJECT["optional-dependencies"][extra]
        ]
    provided = {r.name.lower() for r in requirements}
    distributions = importlib.metadata.packages_distributions()
    missing = {
        m
        for m in third_party
        if not {d.lower() for d in distributions.get(m, [])} & provided
    }
    assert {"numpy", "sympy", "matplotlib"} <= third_party
    assert missing == set(), f"the setup cell's extras do not install {missing}"


def test_the_setup_cell_follows_the_configuration(tmp_path):
    # fault control: another address or branch in _config.yml gives another cell
    for name in ("pyproject.toml", "_toc.yml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    moved = dict(CONFIG, repository={"url": "https://github.com/o/r", "branch": "dev"})
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(moved))
    source = setup_tool.setup_source(tmp_path)
    assert 'repository = "https://github.com/o/r"' in source and '@dev"]' in source
    assert source != setup_tool.setup_source()


def test_the_tool_inserts_one_setup_cell_before_the_first_code_cell():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    once = setup_tool.refreshed(nb, "SETUP")
    twice = setup_tool.refreshed(once, "NEW")
    assert [c.source for c in twice.cells] == ["# Title", "NEW", "x = 1"]
    nbformat.validate(twice)


def test_the_tool_folds_the_code_of_gated_solutions_and_nothing_else():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("exercise = 1"),
        nbformat.v4.new_markdown_cell(
            "````{solution-start} ex-a\n:class: dropdown\n````"),
        nbformat.v4.new_code_cell("answer = 1"),
        nbformat.v4.new_markdown_cell("More of the answer."),
        nbformat.v4.new_code_cell("answer = 2"),
        nbformat.v4.new_markdown_cell("````{solution-end}\n````"),
        nbformat.v4.new_code_cell("after = 1"),
        nbformat.v4.new_markdown_cell(
            "```{solution} ex-b\n:class: dropdown\nText.\n```"),
        nbformat.v4.new_code_cell("not_gated = 1"),
    ]
    assert setup_tool.solution_code_cells(nb) == [2, 4]
    folded = setup_tool.folded(nb)
    hidden = [i for i, c in enumerate(folded.cells)
              if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert hidden == [2, 4]
    nbformat.validate(folded)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_solution_code_cell_is_folded(path):
    nb = nbformat.read(path, as_version=4)
    unfolded = [i for i in setup_tool.solution_code_cells(nb)
                if not nb.cells[i].metadata.get("jupyter", {}).get("source_hidden")]
    assert unfolded == [], f"{path.name}: run tools/notebook_setup.py ({unfolded})"


# --- launch links and Binder ----------------------------------------------------------


def test_the_launch_links_are_well_formed():
    repository, launch = CONFIG["repository"], CONFIG["launch_buttons"]
    assert repository["branch"] == "main" and repository.get("path_to_book", "") == ""
    slug = urllib.parse.urlsplit(repository["url"]).path.strip("/")
    for path in CHAPTERS:
        notebook = path.relative_to(ROOT).as_posix()
        rendition = f"colab/{path.name}"  # what the Colab button opens
        for url, target in (
            (f"{launch['binderhub_url']}/v2/gh/{slug}/{repository['branch']}"
             f"?urlpath=lab/tree/{notebook}", notebook),
            (f"{launch['colab_url']}/github/{slug}/blob/{repository['branch']}/"
             f"{rendition}", rendition),
        ):
            parts = urllib.parse.urlsplit(url)
            assert parts.scheme == "https" and "." in parts.netloc, url
            assert "//" not in parts.path and " " not in url, url
            assert url.endswith(target) and (ROOT / target).is_file(), target
    assert urllib.parse.urlsplit(launch["binderhub_url"]).netloc == "mybinder.org"
    assert (
        urllib.parse.urlsplit(launch["colab_url"]).netloc == "colab.research.google.com"
    )


def test_binder_installs_the_package_at_the_locked_versions():
    post_build = ROOT / "binder" / "postBuild"
    assert post_build.stat().st_mode & stat.S_IXUSR, (
        "binder/postBuild must be executable"
    )
    commands = [
        line
        for line in post_build.read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set "))
    ]
    extras = ",".join(setup_tool.EXTRAS)
    assert commands == [
        f'python -m pip install --no-cache-dir -e ".[{extras}]" '
        "jupyterlab jupyterlab-myst "
        "-c constraints.txt"
    ]
    pins = (ROOT / "constraints.txt").read_text()
    for name in ("numpy", "sympy", "matplotlib", "jupyterlab", "jupyterlab-myst"):
        pattern = re.sub(r"[-_.]", "[-_.]", name)  # pip normalises -, _ and .
        assert re.search(rf"^{pattern}==", pins, re.M | re.I), name
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    version = runtime.removeprefix("python-")
    assert runtime.startswith("python-") and re.fullmatch(r"3\.\d+", version)
    assert SpecifierSet(PROJECT["requires-python"]).contains(version + ".0")
    # only binder/ configures Binder: the root requirements.txt (the book's tools) is
    # not used there
    assert sorted(p.name for p in (ROOT / "binder").iterdir()) == [
        "postBuild",
        "runtime.txt",
    ]


def test_the_stored_notebooks_stay_valid():
    for path in CHAPTERS:
        nbformat.validate(nbformat.read(path, as_version=4))
        assert json.loads(path.read_text())["nbformat"] == 4


def test_nbval_with_the_root_conftest_fails_an_exercise_that_shows_no_notice(tmp_path):
    # the hook is wired into nbval: a stub cell whose checker swallows the stub silently
    # fails; the same cell with a real checker passes
    silent = EXERCISE.replace("check_top_k(my_top_k)", "check_top_k = print\n")
    for name, exercise in (("good", EXERCISE), ("silent", silent)):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell("from attncourse.kit import check_top_k"),
            nbformat.v4.new_code_cell(exercise),
        ]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rf",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    summary = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert len(summary) == 1 and "silent.ipynb::Cell 1" in summary[0], result.stdout
    assert "must print one line" in result.stdout
    assert "1 failed, 3 passed" in result.stdout


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_links_the_notation_and_the_glossary(path):
    # in the book, in the working copy ./course lab opens (book/ beside chapters/), and
    # in the Colab rendition (tools/colab.py points both at the published pages)
    cells = nbformat.read(path, as_version=4).cells
    markdown = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert "](../book/notation.md)" in markdown, f"{path.name} never links the notation"
    assert "{term}`" in markdown, f"{path.name} links no term to the glossary"


SPLIT_ROLE = re.compile(r"\{[\w:]+\}`[^`]*\n[^`]*`")


def split_roles(path):
    """The roles (``{ref}`text <label>```, ...) a chapter's markdown breaks over a line:
    jupyterlab-myst reads the ``<label>`` only on one line."""
    nb = nbformat.read(path, as_version=4)
    return [m.group(0) for cell in nb.cells if cell.cell_type == "markdown"
            for m in SPLIT_ROLE.finditer(cell.source)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_role_is_broken_over_a_line(path):
    assert split_roles(path) == []


def test_a_role_broken_over_a_line_is_found(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "as {ref}`the causal-mask section\n<sec-ch4-causal>` shows;\n"
        "{eq}`eq-ch3-scores`")])
    nbformat.write(nb, tmp_path / "planted.ipynb")
    assert split_roles(tmp_path / "planted.ipynb") == [
        "{ref}`the causal-mask section\n<sec-ch4-causal>`"]
