"""The chapters opened in JupyterLab, as a learner who clones the course sees them.

JupyterLab (with ``jupyterlab-myst``, both installed by requirements.txt, as
``./course lab`` opens them) is started headless on 127.0.0.1 with a random token, a
temporary settings, workspace, runtime and data folder, and nothing that fetches from
the internet (no news, no update check, a read-only extension manager); every browser
request to another host is refused and recorded. Notebook windowing is left on, as
JupyterLab ships it (its default ``windowingMode``: ``contentVisibility`` from
JupyterLab 4.5, ``full`` before), so that a cell is rendered only near the screen or
when the browser is idle, and in the ``full`` mode hidden again once scrolled past. A
chapter is opened in the same headless Chromium the book tests use and scrolled through
until every cell has been rendered and seen; each cell is judged by what it showed,
and the tests assert what the book shows:

- every markdown cell is rendered, and the display equations are typeset by KaTeX — at
  least as many as the notebook's ``{math}`` blocks and ``$$`` pairs — with no KaTeX
  error;
- no raw MyST is visible in the rendered markdown: no ``{math}``, ``{eq}``,
  ``{exercise}``, ``{solution}`` (or any other role or directive name in braces), no
  directive fence, no label target, no untypeset TeX;
- every solution is folded: a closed dropdown whose body is hidden, and the code cells
  of a gated solution (between ``{solution-start}`` and ``{solution-end}``) have their
  input folded;
- every cross-reference is resolved: no cell shows jupyterlab-myst's "Cross Reference
  Not Found" mark, and jupyterlab-myst writes nothing to the browser console (no
  "Cross reference target was not found", no TeX error) but the expected lines of
  windowing, a reference logged before the cell holding its target was rendered
  (``console_problems``). The references the chapters are known to leave unresolved
  in JupyterLab are listed, with their cause, in ``KNOWN_UNRESOLVED``: a new one fails
  the test, and so does a listed one once it is resolved.

Fault controls: a notebook with planted mistakes (an unknown directive, a solution that
is not a dropdown, an unfolded solution code cell, broken TeX, a reference to no target)
must be flagged cell by cell, and its broken TeX and its reference be logged by
jupyterlab-myst; a chapter's own cells (an excerpt holding its first ``{math}`` block,
its first ``{eq}`` reference and its first exercise with its solution:
``chapter_excerpt``) opened in JupyterLab with the jupyterlab-myst extension disabled
must fail the same checks.

A screenshot of each notebook opened lands in ``_build/screenshots/jupyterlab/``.
Without a Chromium these tests skip, except under CI (``CI=true``), where they fail.
"""

import contextlib
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

import booksite

# slow, and a browser: the fast set is pytest -m "not book"
pytestmark = pytest.mark.book

ROOT = booksite.ROOT
CHAPTERS = ["03_one_attention_head", "04_causality_heads_positions"]
VIEWPORT = {"width": 1280, "height": 900}
PAGE_TIMEOUT = 120  # seconds for a notebook to open and every cell to render


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Settings a learner would not need, written for the test's private JupyterLab only: no
# news prompt, no update check. The notebook settings are left as JupyterLab ships them,
# notebook windowing on (its default windowingMode: "contentVisibility" from JupyterLab
# 4.5, "full" in 4.4), as in a learner's JupyterLab; open_notebook scrolls through the
# notebook so that every cell is rendered and seen.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}
SERVER_CONFIG = {
    "LabApp": {"news_url": None,
               "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
               "extension_manager": "readonly"},
    "ServerApp": {"open_browser": False},
}


class JupyterLab:
    """JupyterLab serving ``folder`` on 127.0.0.1 for as long as the ``with`` block
    lasts.

    ``myst=False`` starts it with the jupyterlab-myst extension disabled (the fault
    control).
    """

    def __init__(self, folder, myst=True):
        self.folder, self.myst = pathlib.Path(folder), myst
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="jupyterlab-test-")
        tmp = pathlib.Path(self._tmp.name)
        config = tmp / "config"
        (config / "labconfig").mkdir(parents=True)
        (config / "jupyter_server_config.json").write_text(json.dumps(SERVER_CONFIG))
        if not self.myst:
            (config / "labconfig" / "page_config.json").write_text(
                json.dumps({"disabledExtensions": {"jupyterlab-myst": True}}))
        for name, values in SETTINGS.items():
            path = tmp / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config),
               "JUPYTER_DATA_DIR": str(tmp / "data"),
               "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
               "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
               "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
               "IPYTHONDIR": str(tmp / "ipython"),
               "JUPYTER_PLATFORM_DIRS": "1", "MPLBACKEND": "Agg"}
        self.log = tmp / "jupyterlab.log"
        args = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                f"--port={self.port}",
                "--port-retries=0", f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={self.folder}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        with open(self.log, "w") as log:
            self._process = subprocess.Popen(args, env=env, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.folder)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(
                        f"{self.origin}/api/status?token={self.token}", timeout=2):
                    break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise AssertionError(
                        f"JupyterLab did not start:\n{self.log_tail()}")
                time.sleep(0.3)
        return self

    def log_tail(self):
        return (self.log.read_text(errors="replace")[-3000:] if self.log.is_file()
                else "")

    def __exit__(self, *exc):
        if self._process.poll() is None:
            self._process.terminate()  # the server shuts its kernels down
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._tmp.cleanup()

    def url(self, relpath):
        return f"{self.origin}/lab/tree/{relpath}?reset&token={self.token}"


# -------------------------------------------------- what the notebook's source promises

_DIRECTIVE = re.compile(r"^(?:`{3,}|:{3,})\{([\w:-]+)\}", re.MULTILINE)


def markdown_cells(notebook):
    return [("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in notebook["cells"] if c["cell_type"] == "markdown"]


def display_math(text):
    """How many display equations a markdown cell's source holds: ``{math}`` blocks and
    ``$$`` pairs."""
    return _DIRECTIVE.findall(text).count("math") + text.count("$$") // 2


def expected(notebook):
    """What a correct rendering of ``notebook`` must contain, counted from its markdown
    source."""
    solutions = 0
    for text in markdown_cells(notebook):
        solutions += sum(1 for n in _DIRECTIVE.findall(text)
                         if n in ("solution", "solution-start"))
    gated, inside = [], False  # indices of the code cells inside a gated solution
    for index, cell in enumerate(notebook["cells"]):
        names = (_DIRECTIVE.findall("".join(cell["source"]))
                 if cell["cell_type"] == "markdown" else [])
        if "solution-end" in names:
            inside = False
        elif inside and cell["cell_type"] == "code":
            gated.append(index)
        if "solution-start" in names:
            inside = "solution-end" not in names[names.index("solution-start"):]
    return {"display_math": sum(display_math(t) for t in markdown_cells(notebook)),
            "solutions": solutions,
            "gated_code_cells": gated, "cells": len(notebook["cells"])}


# ------------------------------------------------------------- what the browser shows

# Raw MyST a reader must never see in rendered markdown: a role or directive name in
# braces, a directive fence, a label target "(name)=" at the start of a line, a
# directive option line.
_RAW_MYST = re.compile(
    r"\{(?:math|eq|exercise|solution(?:-start|-end)?|ref|numref|doc|cite(?::\w+)?|term"
    r"|glue(?::\w+)?"
    r"|prf:\w+|dropdown|admonition|note|warning|figure|code-cell|[a-z][\w-]*)\}`?"
    r"|`{3,}\{|:{3,}\{|^\s*\([\w-]+\)=\s*$|^:(?:label|class|name|nonumber):",
    re.MULTILINE)


# What jupyterlab-myst writes in place of a directive or role it cannot render.
_MYST_ERROR = re.compile(r"\bUnknown (?:Directive|Role)\b")


def raw_myst_fragments(text):
    """Pieces of ``text`` (what a rendered markdown cell shows) that look like
    unrendered MyST.

    >>> raw_myst_fragments("See {eq}`eq-ch3-scores` and")
    ['{eq}`']
    >>> raw_myst_fragments("nosuchdirective - Unknown Directive")
    ['Unknown Directive']
    >>> raw_myst_fragments("A set {x : x > 0} and a dict {'a': 1}, and (2) twice.")
    []
    """
    return ([m.group(0).strip() for m in _RAW_MYST.finditer(text)]
            + _MYST_ERROR.findall(text))


NOTEBOOK_FACTS_JS = r"""
() => {
  // checkVisibility() also sees the content of a closed <details> as hidden
  const visible = e => !!e && (e.checkVisibility
    ? e.checkVisibility({visibilityProperty: true, opacityProperty: true})
    : e.getClientRects().length > 0);
  const cells = [...document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
  const skip = 'script,style,pre,code,.katex,.MathJax,mjx-container,' +
    '.jp-Editor,.jp-InputPrompt,.jp-Collapser';
  const textOf = root => {
    const parts = [];
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: n => n.parentElement && n.parentElement.closest(skip)
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
    while (walker.nextNode()) parts.push(walker.currentNode.nodeValue);
    return parts.join('');
  };
  // with notebook windowing only the cells near the viewport are in the page: each
  // says its position in the notebook
  return cells.map((cell, position) => {
    const index = cell.dataset.windowedListIndex === undefined ? position
      : Number(cell.dataset.windowedListIndex);
    const markdown = cell.classList.contains('jp-MarkdownCell');
    const input = cell.querySelector('.jp-Cell-inputArea');
    // a rendered markdown cell shows its output next to the (hidden) editor in the
    // input area
    const outputs = input ? [...input.children]
      .filter(c => !c.matches('.jp-InputPrompt, .jp-Editor, .jp-Collapser')) : [];
    const rendered = markdown && outputs.length > 0 &&
      !!cell.querySelector('.jp-Editor.lm-mod-hidden, .jp-Editor[hidden]');
    const solutions = [];
    for (const out of outputs) {
      for (const box of out.querySelectorAll('details, aside, .admonition, ' +
          'div[class*="myst-exercise"], div[class*="myst-admonition"]')) {
        if (box.parentElement.closest('details, aside, .admonition')) continue;
        const title = box.querySelector(
          'summary, .admonition-title, [class*="-title"], [class*="-header"]');
        const titleText = title ? title.textContent.trim() : '';
        if (!/solution/i.test(titleText)) continue;
        const body = [...box.children].filter(c => c !== title && !c.contains(title));
        solutions.push({title: titleText.slice(0, 80),
                        dropdown: box.tagName === 'DETAILS',
                        open: box.tagName === 'DETAILS' ? box.open : true,
                        bodyVisible: body.some(visible)});
      }
    }
    return {
      // windowing hides a cell scrolled away (opacity 0, or display none): its facts
      // then are not what the reader sees
      index, shown: visible(cell), markdown, rendered,
      inputVisible: visible(input) &&
        (markdown || visible(cell.querySelector('.jp-Editor'))),
      text: outputs.map(textOf).join('\n'),
      displayMath: outputs.reduce((n, o) => n +
        o.querySelectorAll('.katex-display, mjx-container[display="true"]').length, 0),
      inlineMath: outputs.reduce((n, o) => n +
        o.querySelectorAll('.katex, mjx-container').length, 0),
      rawFences: outputs.flatMap(o => [...o.querySelectorAll(
        'pre > code[class*="language-{"], pre > code[class*="language-%7B"]')])
        .map(e => e.className),
      mathErrors: outputs
        .flatMap(o => [...o.querySelectorAll('.katex-error, mjx-merror')])
        .map(e => e.textContent.slice(0, 80)),
      // jupyterlab-myst's mark for a cross-reference whose target it did not find
      unresolved: outputs.flatMap(o => [...o.querySelectorAll(
        '[title="Cross Reference Not Found"]')]).map(e => e.textContent.trim()),
      solutions,
    };
  });
}
"""


def notebook_problems(notebook, cells):
    """Judge the rendered notebook (``cells``, from NOTEBOOK_FACTS_JS) against its
    source.

    Returns ``(index, problem)`` pairs; ``index`` is the cell's position in the
    notebook, or None for a problem of the whole notebook.
    """
    want = expected(notebook)
    problems = []
    if len(cells) != want["cells"]:
        return [(None, f"{len(cells)} cells shown for {want['cells']} in the notebook")]
    for index, (source, cell) in enumerate(zip(notebook["cells"], cells)):
        if cell is None:
            problems.append((index, "cell never shown while scrolling through the "
                                    "notebook"))
            continue
        if source["cell_type"] == "markdown":
            if not cell["rendered"]:
                problems.append((index, "markdown cell not rendered"))
                continue
            problems += [(index, f"raw MyST visible: {f!r}")
                         for f in raw_myst_fragments(cell["text"])]
            problems += [(index, f"raw TeX visible: {f!r}")
                         for f in booksite.raw_tex_fragments(cell["text"])]
            problems += [(index, f"raw MyST visible: a directive shown as code ({c})")
                         for c in cell["rawFences"]]
            problems += [(index, f"TeX error: {e!r}") for e in cell["mathErrors"]]
            problems += [(index, _UNRESOLVED + " ".join(t.split()))
                         for t in cell["unresolved"]]
            wanted = display_math("".join(source["source"]))
            if cell["displayMath"] < wanted:
                problems.append((index, f"{cell['displayMath']} typeset display "
                                        f"equations for {wanted} in the source"))
            for s in cell["solutions"]:
                if not s["dropdown"]:
                    problems.append((index,
                                     f"solution {s['title']!r} is not a dropdown"))
                elif s["open"] or s["bodyVisible"]:
                    problems.append((index, f"solution {s['title']!r} is open"))
        elif index in want["gated_code_cells"] and cell["inputVisible"]:
            problems.append((index, "code cell of a solution is not folded "
                                    "(input shown): give it the cell "
                                    "metadata \"jupyter\": {\"source_hidden\": true}"))
    shown = sum(len(c["solutions"]) for c in cells if c is not None)
    if shown < want["solutions"]:
        problems.append((None, f"{shown} solution boxes for {want['solutions']} in the "
                               "source"))
    return problems


SCROLL_JS = r"""
(top) => {
  const outer = document.querySelector(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
  if (!outer) return null;
  outer.scrollTop = top;
  return {top: outer.scrollTop, height: outer.clientHeight, total: outer.scrollHeight};
}
"""
POLL_MS = 500  # how often the cells are looked at
STALL_S = 2.0  # no cell changed for this long: scroll a step all the same
QUIET_S = 1.5  # no cell changed for this long: cross-references and math are done


_TARGET = re.compile(r"^\(([^()\s]+)\)=[ \t]*$|^:(?:label|name):[ \t]*(\S+)",
                     re.MULTILINE)
_NOT_FOUND = "Cross reference target was not found: "  # jupyterlab-myst's console line
_UNRESOLVED = "cross-reference target not found: "  # notebook_problems's, for a cell


def targets(notebook):
    """The cross-reference targets the markdown cells of ``notebook`` define: a label
    ``(name)=``, a directive's ``:label:`` or ``:name:``; in lower case, as
    jupyterlab-myst names them."""
    return {(a or b).lower() for text in markdown_cells(notebook)
            for a, b in _TARGET.findall(text)}


def console_problems(notebook, messages):
    """What jupyterlab-myst wrote to the browser console (``messages``, from
    open_notebook) about ``notebook``: each distinct line, sorted, but one.

    jupyterlab-myst resolves a notebook's cross-references among the cells rendered so
    far, and logs every target missing at that moment. With notebook windowing on, a
    cell is rendered only when it comes near the screen or the browser is idle, so a
    reference to a target this notebook defines in a cell further down is logged as
    "Cross reference target was not found" until that cell is rendered; then it is
    resolved. Such a line is expected and harmless, and left out here: the cells'
    rendering, judged by notebook_problems once every cell has been rendered, shows
    whether the reference was resolved in the end. A reference to any other target, and
    any other line, is a problem.

    >>> notebook = {"cells": [_markdown("(sec-here)=\\n## Here")]}
    >>> console_problems(notebook, [("error", _NOT_FOUND + "sec-here\\n"
    ...                                        + _NOT_FOUND + "sec-elsewhere")])
    ['error: Cross reference target was not found: sec-elsewhere']
    """
    defined = targets(notebook)
    problems = set()
    for kind, text in messages:
        for line in filter(None, map(str.strip, text.splitlines())):
            name = " ".join(line.removeprefix(_NOT_FOUND).split()).lower()
            if not (line.startswith(_NOT_FOUND) and name in defined):
                problems.add(f"{kind}: {line}")
    return sorted(problems)


def open_notebook(context, lab, relpath, ready=None):
    """Open ``relpath`` in JupyterLab, scroll through it step by step until every cell
    has been rendered and rendering has settled, and record what each cell showed.

    With notebook windowing a cell is rendered only near the screen or when the
    browser is idle (``contentVisibility``), or only near the screen, and hidden again
    once scrolled past (``full``). So the facts of each cell (NOTEBOOK_FACTS_JS) are
    kept by its index in the notebook, as last seen while it was shown. Every POLL_MS
    the cells are looked at; the page scrolls a step down (from the bottom back to the
    top) when the markdown cells on screen are all rendered and nothing changed since
    the last look, or when nothing changed for STALL_S. It is settled when nothing
    changed for QUIET_S, every markdown cell is rendered and every cell has been seen
    again since the last change (where windowing keeps every cell in the page, at the
    next look; where it hides them, after a pass through the notebook): so a
    cross-reference resolved late, when its target's cell was rendered, is seen
    resolved.

    ``ready``, given the cells' facts, says whether the page already shows what is
    expected; until it does (or PAGE_TIMEOUT passes) the wait goes on, so that a slow,
    busy machine is given the time to typeset instead of being judged mid-way. The facts
    are judged afterwards all the same.

    Returns the cells' facts in notebook order (None for a cell never seen), the
    requests that tried to leave the machine and what jupyterlab-myst wrote to the
    browser console (``(type, text)`` pairs).
    """
    count = len(read_notebook(lab.folder / relpath)["cells"])
    page = context.new_page()
    external, myst_console = [], []

    def is_local(u):
        return u.startswith(lab.origin + "/") or u.startswith(
            ("data:", "blob:", "about:", "ws://127.0.0.1"))

    def on_console(message):
        # the extension's own scripts, served from lab/extensions/jupyterlab-myst/
        if ("/jupyterlab-myst/" in (message.location or {}).get("url", "")
                and message.type in ("error", "warning")):
            myst_console.append((message.type, message.text))

    page.on("request", lambda r: None if is_local(r.url) else external.append(r.url))
    page.on("console", on_console)
    page.route(lambda u: not is_local(u),
               lambda route: route.abort("blockedbyclient"))
    try:
        start = time.monotonic()
        page.goto(lab.url(relpath), wait_until="load", timeout=PAGE_TIMEOUT * 1000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell",
                               timeout=PAGE_TIMEOUT * 1000)
        facts, cells = {}, [None] * count
        seen_at, changed_at = {}, time.monotonic()  # index -> when last seen
        view = page.evaluate(SCROLL_JS, 0)
        while time.monotonic() - start < PAGE_TIMEOUT:
            page.wait_for_timeout(POLL_MS)
            now, changed = time.monotonic(), False
            shown = [c for c in page.evaluate(NOTEBOOK_FACTS_JS) if c["shown"]]
            for cell in shown:
                index, before = cell["index"], facts.get(cell["index"])
                seen_at[index] = now
                # a cell brought back on screen may show for a moment as not rendered
                if before != cell and not (before and before["rendered"]
                                           and not cell["rendered"]):
                    facts[index], changed_at, changed = cell, now, True
            cells = [facts.get(i) for i in range(max([count - 1, *facts]) + 1)]
            # settled: no change for QUIET_S, and every cell seen again since the last
            # change (at once where every cell is in the page; after a pass through
            # the notebook where windowing takes cells out of it)
            settled = (now - changed_at >= QUIET_S
                       and all(seen_at.get(i, 0) > changed_at for i in range(count))
                       and all(c["rendered"] for c in cells if c and c["markdown"]))
            if settled and (ready is None or ready(cells)):
                break
            # scroll a step when the cells on screen are done, or rendering stalls
            done = not changed and all(c["rendered"] for c in shown if c["markdown"])
            if view is not None and (done or now - changed_at >= STALL_S):
                bottom = view["top"] + view["height"] >= view["total"] - 1
                view = page.evaluate(SCROLL_JS, 0 if bottom else view["top"] + max(
                    1, int(view["height"] * 0.9)))
        page.evaluate(SCROLL_JS, 0)
        page.wait_for_timeout(POLL_MS)
        shot = (ROOT / "_build" / "screenshots" / "jupyterlab"
                / (pathlib.PurePosixPath(relpath).stem + ".png"))
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))
        return cells, external, myst_console
    finally:
        page.close()


@pytest.fixture(scope="module")
def browser():
    with booksite.chromium(VIEWPORT) as context:
        yield context


def _require_jupyterlab():
    try:
        import jupyterlab  # noqa: F401
        import jupyterlab_myst  # noqa: F401
    except ImportError:
        pytest.fail("JupyterLab or jupyterlab-myst is missing: ./course lab (or "
                    "./course test) installs them from requirements.txt",
                    pytrace=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working copy as ``./course lab`` makes it: the chapters, with the notation
    and glossary beside them (the server writes checkpoints and trust data there)."""
    folder = tmp_path_factory.mktemp("learner")
    shutil.copytree(ROOT / "chapters", folder / "chapters",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__",
                                                  "_build"))
    (folder / "book").mkdir()
    for page in ("notation.md", "glossary.md"):
        shutil.copy(ROOT / "book" / page, folder / "book" / page)
    return folder


@pytest.fixture(scope="module")
def lab(workdir):
    _require_jupyterlab()
    with JupyterLab(workdir) as server:
        yield server


def read_notebook(path):
    return json.loads(pathlib.Path(path).read_text())


def format_problems(problems):
    return "\n".join(f"cell {i}: {p}" if i is not None else p for i, p in problems)


# The chapters' cross-references that jupyterlab-myst does not resolve: for a chapter,
# the target as jupyterlab-myst logs it ("Cross reference target was not found: ...") ->
# why. A learner's JupyterLab shows them so (and logs them with windowing on or off);
# they are the chapters' to mend, and listed here only so that the test passes on what
# is known while failing on any new one, and on a listed one once it is resolved.
_FIGURE = ("{numref} of a figure a code cell draws, named in the cell's metadata "
           "(mystnb.figure.name), which only the book's myst-nb reads: shown as the "
           "bare label with a warning sign")
_TERM = ("{term} of a glossary entry in book/glossary.md, another document, which "
         "jupyterlab-myst does not read: shown as a link to nowhere (href \"#\")")
KNOWN_UNRESOLVED = {
    "03_one_attention_head": {
        **dict.fromkeys(["fig-ch3-geometry", "fig-ch3-graph", "fig-ch3-steps"],
                        _FIGURE),
        **dict.fromkeys(["term-query", "term-key", "term-value", "term-score",
                         "term-attention weights"], _TERM),
    },
    "04_causality_heads_positions": {
        **dict.fromkeys(["fig-ch4-masks", "fig-ch4-multihead", "fig-ch4-head-maps",
                         "fig-ch4-position-similarity"], _FIGURE),
        **dict.fromkeys(["term-causal mask", "term-padding mask", "term-head"], _TERM),
    },
}


def chapter_problems(chapter, notebook, cells, messages=()):
    """notebook_problems and console_problems for ``chapter``, less the references of
    KNOWN_UNRESOLVED; and the targets of KNOWN_UNRESOLVED seen unresolved."""
    known, seen = KNOWN_UNRESOLVED.get(chapter, {}), set()

    def listed(text, prefix):
        target = text.partition(prefix)[2]
        if prefix in text and target in known:
            seen.add(target)
            return True
        return False

    problems = [(i, p) for i, p in notebook_problems(notebook, cells)
                if not listed(p, _UNRESOLVED)]
    logged = [line for line in console_problems(notebook, messages)
              if not listed(line, _NOT_FOUND)]
    return problems, logged, seen


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_renders_in_jupyterlab_as_in_the_book(browser, lab, workdir, chapter):
    relpath = f"chapters/{chapter}.ipynb"
    notebook = read_notebook(workdir / relpath)
    cells, external, messages = open_notebook(
        browser, lab, relpath,
        ready=lambda cells: not chapter_problems(chapter, notebook, cells)[0])
    want = expected(notebook)
    assert want["display_math"] >= 5 and want["solutions"] >= 2, (
        "the chapter should hold equations and solutions")
    problems, logged, seen = chapter_problems(chapter, notebook, cells, messages)
    assert not problems and not logged, (
        f"{chapter} in JupyterLab: {len(problems)} problem(s) in its cells:\n"
        + format_problems(problems)
        + f"\n{len(logged)} line(s) jupyterlab-myst logged:\n" + "\n".join(logged))
    fixed = sorted(set(KNOWN_UNRESOLVED.get(chapter, {})) - seen)
    assert not fixed, (f"{chapter}: now resolved in JupyterLab, delete from "
                       f"KNOWN_UNRESOLVED: {fixed}")
    assert external == [], f"JupyterLab asked the network for {external}"


# -------------------------------------------------------------------- fault controls

def _markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text, **metadata):
    return {"cell_type": "code", "metadata": metadata, "source": text, "outputs": [],
            "execution_count": None}


CLEAN_CELLS = [
    _markdown("# A planted page\n\n```{math}\n:label: eq-fault-s\n"
              "S = Q K^\\top / \\sqrt{d}\n```\n\n"
              "By {eq}`eq-fault-s`, inline $x^2$."),
    _markdown("```{exercise} Do it\n:label: ex-fault\n\nCompute $S$.\n```"),
    _markdown("```{solution-start} ex-fault\n:class: dropdown\n```\n\nThe answer."),
    _code("S = 1", jupyter={"source_hidden": True}),
    _markdown("```{solution-end}\n```"),
    _markdown("```{solution} ex-fault\n:class: dropdown\n\nAgain $y$.\n```"),
]
FAULT_CELLS = {  # name -> (cell, what the judge must say about it)
    "unknown directive": (_markdown("```{nosuchdirective}\nbody\n```"),
                          "raw MyST visible"),
    "solution not folded": (_markdown("```{solution} ex-fault\n\nShown at once.\n```"),
                            "is not a dropdown"),
    "broken TeX": (_markdown("```{math}\n\\frac{a}{\n```"),
                   "0 typeset display equations for 1"),
    "reference to no target": (_markdown("As {ref}`sec-fault-nowhere` says."),
                               "cross-reference target not found: sec-fault-nowhere"),
}
UNFOLDED_SOLUTION_CODE = [  # a gated solution whose code cell is shown
    _markdown("```{solution-start} ex-fault\n:class: dropdown\n```"),
    _code("S = 2"),
    _markdown("```{solution-end}\n```"),
]


def planted_notebook():
    cells = list(CLEAN_CELLS)
    where = {}
    for name, (cell, _) in FAULT_CELLS.items():
        where[name] = len(cells)
        cells.append(cell)
    where["unfolded solution code"] = len(cells) + 1
    cells += UNFOLDED_SOLUTION_CODE
    notebook = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                "metadata": {"kernelspec": {"name": "python3",
                                            "display_name": "Python 3",
                                            "language": "python"}}}
    for i, cell in enumerate(notebook["cells"]):
        cell["id"] = f"planted-{i}"
    return notebook, where


def test_fault_control_planted_mistakes_are_flagged_cell_by_cell(browser, lab, workdir):
    notebook, where = planted_notebook()
    (workdir / "planted.ipynb").write_text(json.dumps(notebook))
    cells, _, messages = open_notebook(browser, lab, "planted.ipynb")
    problems = notebook_problems(notebook, cells)
    flagged = {}
    for index, problem in problems:
        flagged.setdefault(index, []).append(problem)
    assert set(flagged) == set(where.values()), (
        f"flagged cells {sorted(flagged, key=str)}, planted at {where}:\n"
        + format_problems(problems))
    for name, (_, message) in FAULT_CELLS.items():
        assert any(message in p for p in flagged[where[name]]), (
            name, flagged[where[name]])
    assert any("not folded" in p for p in flagged[where["unfolded solution code"]])
    # jupyterlab-myst's console: the reference to no target and the broken TeX, and
    # nothing about the clean cells
    logged = console_problems(notebook, messages)
    assert any(line.endswith(_NOT_FOUND + "sec-fault-nowhere") for line in logged), (
        logged)
    assert any("\\frac{a}{" in line for line in logged), logged
    assert len(logged) == 2, logged


def chapter_excerpt(notebook):
    """The cells of a chapter ``notebook`` that hold each construct jupyterlab-myst
    renders, in order: the first markdown cell with a ``{math}`` block, the first with
    an ``{eq}`` reference, and every cell from the first exercise to the end of its
    solution."""
    cells = notebook["cells"]

    def source(cell):
        text = cell["source"]
        return "".join(text) if isinstance(text, list) else text

    def names(cell):
        if cell["cell_type"] != "markdown":
            return set()
        return set(_DIRECTIVE.findall(source(cell)))

    def cites(cell):
        return cell["cell_type"] == "markdown" and "{eq}" in source(cell)

    keep = {next(i for i, c in enumerate(cells) if "math" in names(c)),
            next(i for i, c in enumerate(cells) if cites(c))}
    start = next(i for i, c in enumerate(cells) if "exercise" in names(c))
    end = next(i for i in range(start, len(cells))
               if names(cells[i]) & {"solution", "solution-end"})
    keep.update(range(start, end + 1))
    return {**notebook, "cells": [cells[i] for i in sorted(keep)]}


def test_fault_control_a_chapter_without_jupyterlab_myst_fails(browser, workdir):
    # The chapter's own cells (chapter_excerpt: a {math} block, an {eq} reference, an
    # exercise and its solution), in a JupyterLab whose MyST extension is disabled:
    # plain markdown rendering shows the {math} blocks as code, {eq} roles and
    # directives as text, solutions unfolded. Every kind of cell the four assertions
    # look at is in the excerpt, so the whole chapter, longer to render, would prove
    # nothing more.
    _require_jupyterlab()
    chapter = read_notebook(workdir / f"chapters/{CHAPTERS[0]}.ipynb")
    notebook = chapter_excerpt(chapter)
    want = expected(notebook)
    assert want["display_math"] >= 1 and want["solutions"] >= 1, want
    relpath = f"chapters/{CHAPTERS[0]}-excerpt.ipynb"
    (workdir / relpath).write_text(json.dumps(notebook))
    with JupyterLab(workdir, myst=False) as plain:
        cells, _, _ = open_notebook(browser, plain, relpath)
    problems = notebook_problems(notebook, cells)
    text = format_problems(problems)
    assert "raw MyST visible: '{eq}'" in text
    assert "a directive shown as code (language-{math})" in text
    assert "typeset display equations for" in text
    assert "solution boxes for" in text
