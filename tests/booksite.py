"""Helpers for the tests of the built HTML book: find or build it, serve it, and judge
its pages.

The checking functions take plain data (HTML text, or facts a browser collected from a
page) and return a list of problems, so the same functions judge the real book and the
planted faults of the tests. Only ``chromium()`` imports a browser library
(playwright), when it is called.

>>> cdn_references('<script src="https://unpkg.com/thebe@0.8.2/lib/index.js"></script>')
['unpkg.com']
>>> raw_tex_fragments("Scores $$S = QK^T$$ and code") != []
True
>>> raw_tex_fragments("It costs $5, or 4 $ a month.")
[]
"""

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import html.parser
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

__all__ = [
    "ROOT", "IN_CI", "LAUNCH_FLAGS", "find_chromium", "chromium", "html_dir",
    "built_html", "course_commands", "book_pages", "chapter_pages", "LoopbackServer",
    "CDN_HOSTS", "cdn_references", "external_resources", "raw_tex_fragments",
    "element_ids", "link_problems", "page_problems", "chapter_problems",
    "unreferenced_equations", "COLLECT_FACTS_JS", "CHAPTER_FACTS_JS",
    "LAYOUTS", "LAYOUT_FACTS_JS", "layout_problems", "machine_paths",
    "absolute_path_leaks", "path_leaks_in_build",
    "Record", "open_page", "judge", "assert_none", "search", "SCREENSHOT_SUFFIX",
    "take_screenshot",
]

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_HTML = ROOT / "_build" / "html"

IN_CI = os.environ.get("CI", "").lower() == "true"

LAUNCH_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions",
    # no name resolves except the loopback address: nothing can leave the machine
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def find_chromium():
    """The Chromium executable to drive: ``$CHROMIUM``, else ``chromium`` on the PATH,
    else None."""
    for candidate in (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and pathlib.Path(candidate).is_file():
            return candidate
    return None


@contextlib.contextmanager
def chromium(viewport):
    """One headless Chromium with a fresh profile, as a playwright browser context (for
    pytest).

    Without a Chromium the calling test is skipped, except under CI (``CI=true``), where
    it fails.
    """
    import pytest

    executable = find_chromium()
    if executable is None:
        message = ("no Chromium browser found: install Debian's package `chromium` "
                   "(apt-get install -y chromium) to run the browser tests of the book")
        if IN_CI:
            pytest.fail(message + " — CI=true, so this is a failure, not a skip",
                        pytrace=False)
        pytest.skip(message)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package playwright is missing: "
                    "pip install -r requirements.txt", pytrace=False)
    with (tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile,
          sync_playwright() as pw):
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=LAUNCH_FLAGS,
            viewport=viewport, service_workers="block")
        try:
            yield context
        finally:
            context.close()


def html_dir():
    """The built HTML folder under test: ``$BOOK_HTML`` if set, else ``_build/html`` in
    the repository."""
    return pathlib.Path(os.environ.get("BOOK_HTML", DEFAULT_HTML)).resolve()


def course_commands(job, script=None):
    r"""The commands the shell function ``job`` of the ``course`` script runs (or of
    the text ``script``), in order: one string each, a line continued with ``\``
    joined, comments and blank lines left out.

    >>> script = "book() {\n    # two steps\n    a -x \\\n        y\n    b\n}\n"
    >>> course_commands("book", script)
    ['a -x y', 'b']
    """
    text = (ROOT / "course").read_text() if script is None else script
    lines = text.splitlines()
    if f"{job}() {{" not in lines:
        raise AssertionError(f"the course script has no function {job}()")
    start = lines.index(f"{job}() {{")
    body = "\n".join(lines[start + 1:lines.index("}", start)])
    body = re.sub(r"\s*\\\n\s*", " ", body)
    return [line.strip() for line in body.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _build_arguments():
    """The arguments ``./course book`` passes to ``jupyter-book`` (``build . --all -W
    ...``)."""
    for command in course_commands("book"):
        words = shlex.split(command)
        if words and words[0].endswith("jupyter-book"):
            return words[1:]
    raise AssertionError("./course book does not run jupyter-book")


_BUILD_FAILURE = []


def _is_built(html):
    return (html / "index.html").is_file() and (html / "searchindex.js").is_file()


@contextlib.contextmanager
def _build_lock(html):
    """Hold an exclusive lock on the build of ``html``: parallel pytest-xdist workers
    build it once."""
    name = ("attncourse-book-" + hashlib.sha256(str(html).encode()).hexdigest()[:16]
            + ".lock")
    with open(pathlib.Path(tempfile.gettempdir()) / name, "w") as lock:
        # another worker building the book makes this one wait here
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def built_html():
    """Return the built HTML folder, building the book first (as ``./course book``
    does) when there is none."""
    if _BUILD_FAILURE:  # build at most once per session, even when it fails
        raise AssertionError(_BUILD_FAILURE[0])
    html = html_dir()
    # under pytest-xdist, the first worker builds and the others then find it
    with _build_lock(html):
        if not _is_built(html):
            if (html == DEFAULT_HTML
                    and "tools/execute.py" in " ".join(course_commands("book"))):
                # the build command's first step: the chapters executed in parallel
                subprocess.run([sys.executable, str(ROOT / "tools" / "execute.py")],
                               cwd=ROOT, capture_output=True, text=True)
            jupyter_book = pathlib.Path(sys.executable).with_name("jupyter-book")
            args = [str(jupyter_book)] + _build_arguments()
            if html != DEFAULT_HTML:
                if html.name != "html" or html.parent.name != "_build":
                    raise AssertionError(
                        f"BOOK_HTML must end in _build/html to be built there: {html}")
                args += ["--path-output", str(html.parent.parent)]
            done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0 or not (html / "index.html").is_file():
                _BUILD_FAILURE.append(f"building the book failed ({' '.join(args)}):\n"
                                      f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
                raise AssertionError(_BUILD_FAILURE[0])
    return html


def book_pages(html):
    """Every built page, as paths relative to ``html`` (posix), found on disk, never
    listed by hand."""
    skip = {"_static", "_sources", "_images", "_downloads"}
    return sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html")
                  if not skip.intersection(p.relative_to(html).parts))


def chapter_pages(html):
    """The built pages made from the chapter notebooks (``chapters/*.html``)."""
    return [p for p in book_pages(html) if p.startswith("chapters/")]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # keep the test output readable
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    # a tab closed mid-download is no error here
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class LoopbackServer:
    """Serve a folder over HTTP on 127.0.0.1 (a free port) for as long as the ``with``
    block lasts."""

    def __init__(self, folder):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self._server = _Server(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def url(self, relpath):
        return f"{self.origin}/{urllib.parse.quote(relpath)}"


class DiskSite:
    """A folder opened straight from disk (``file://``), with LoopbackServer's
    ``origin`` and ``url``: what a reader with the folder and no network sees."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder).resolve()
        self.origin = self.folder.as_uri()

    def url(self, relpath):
        return (self.folder / relpath).as_uri()


def site_path(href, origin):
    """The path of ``href`` inside the site at ``origin`` (served or on disk), or None
    when ``href`` lies outside it.

    >>> site_path("http://127.0.0.1:8000/chapters/a%20b.html#x",
    ...           "http://127.0.0.1:8000")
    'chapters/a b.html'
    >>> site_path("file:///tmp/html/book/intro.html", "file:///tmp/html")
    'book/intro.html'
    >>> site_path("file:///tmp/other/intro.html", "file:///tmp/html") is None
    True
    """
    if not href.startswith(origin + "/"):
        return None
    base = urllib.parse.unquote(urllib.parse.urlsplit(origin).path)
    return urllib.parse.unquote(
        urllib.parse.urlsplit(href).path)[len(base):].lstrip("/")


# ----------------------------------------------------------- static checks of HTML text

#: Hosts that serve third-party files to pages (CDNs, web fonts, analytics, comments).
CDN_HOSTS = (
    "unpkg.com", "jsdelivr.net", "cdnjs.cloudflare.com", "fonts.googleapis.com",
    "fonts.gstatic.com", "ajax.googleapis.com", "code.jquery.com", "bootstrapcdn.com",
    "use.fontawesome.com", "kit.fontawesome.com", "cdn.plot.ly", "polyfill.io",
    "esm.sh", "cdn.skypack.dev", "mathjax.org", "plausible.io", "googletagmanager.com",
    "google-analytics.com", "hypothes.is", "utteranc.es",
)
_HOST_RE = re.compile("|".join(re.escape(h) for h in CDN_HOSTS), re.IGNORECASE)


def cdn_references(text):
    """The CDN host names that occur anywhere in ``text`` (tags, inline scripts,
    styles), in order."""
    return [m.group(0).lower() for m in _HOST_RE.finditer(text)]


_LOADING = {  # tag -> attributes whose URL the browser fetches by itself
    "script": ("src",), "img": ("src", "srcset"), "iframe": ("src",),
    "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
    "embed": ("src",), "object": ("data",), "track": ("src",), "input": ("src",),
}
_LINK_LOADS = {"stylesheet", "preload", "modulepreload", "prefetch", "icon", "shortcut",
               "manifest", "apple-touch-icon", "mask-icon", "dns-prefetch",
               "preconnect"}
_ABSOLUTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*"""
                      r"""((?:[a-z][a-z0-9+.-]*:)?//[^'")\s]+)""", re.IGNORECASE)


class _ResourceParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found, self._in_style = [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        names = _LOADING.get(tag, ())
        if tag == "link" and _LINK_LOADS.intersection(
                (attrs.get("rel") or "").lower().split()):
            names = ("href",)
        for name in names:
            for url in re.split(r",\s+", attrs.get(name) or ""):
                if _ABSOLUTE.match(url):
                    self.found.append(f"<{tag} {name}={url.split()[0]}>")
        self.found += [f"<{tag} style> {u}"
                       for u in _CSS_URL.findall(attrs.get("style") or "")]
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.found += [f"<style> {u}" for u in _CSS_URL.findall(data)]


def external_resources(text, css=False):
    """Resources that ``text`` (HTML, or CSS when ``css``) makes the browser load from
    another host.

    Hyperlinks (``<a href>``) are not loads and are not reported.

    >>> external_resources('<a href="https://mybinder.org/v2/gh/x">Binder</a>'
    ...                    '<img src="../_images/a.png">')
    []
    >>> external_resources('<link rel="stylesheet" href="//fonts.example.org/a.css">')
    ['<link href=//fonts.example.org/a.css>']
    """
    if css:
        return [f"css {u}" for u in _CSS_URL.findall(text)]
    parser = _ResourceParser()
    parser.feed(text)
    parser.close()
    return parser.found


# --------------------------------------------------- checks of what a browser collected

# Raw TeX a reader must never see: delimiters, environments, or a TeX command glued to a
# dollar.
_RAW_TEX = re.compile(
    r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|\\end\{|\$\\[A-Za-z]"
    r"|\\(?:frac|sqrt|displaystyle|operatorname|mathbb|mathrm|mathbf|partial|sum|top"
    r"|cdot|times|left|right)\b"
)


def raw_tex_fragments(text):
    """Pieces of ``text`` (what the page shows, code excluded) that look like untypeset
    TeX."""
    return [text[max(0, m.start() - 30):m.end() + 30].replace("\n", " ")
            for m in _RAW_TEX.finditer(text)]


class _IdParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def element_ids(path):
    """The ``id`` (and ``<a name>``) values defined in the HTML file at ``path``."""
    parser = _IdParser()
    parser.feed(pathlib.Path(path).read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return frozenset(parser.ids)


def link_problems(links, origin, folder):
    """Internal links among ``links`` that lead to no built file, or to an anchor the
    target lacks.

    ``links`` are dicts with the resolved ``href`` (as ``a.href`` gives it) and the
    ``raw`` attribute; a link is internal when its resolved URL starts with ``origin``
    (``folder`` served over HTTP, or opened from disk: see site_path). Links to other
    hosts are hyperlinks a reader may follow, not part of this check.
    """
    problems = []
    folder = pathlib.Path(folder)
    for link in links:
        href = link["href"]
        path = site_path(href, origin)
        if path is None:
            continue
        parts = urllib.parse.urlsplit(href)
        target = folder / path
        if path.endswith("/") or not path:
            target = target / "index.html"
        try:
            target.resolve().relative_to(folder.resolve())
        except ValueError:
            problems.append(f"{link['raw']!r} leaves the book")
            continue
        if not target.is_file():
            problems.append(f"{link['raw']!r} -> no built file {path}")
        elif parts.fragment and target.suffix == ".html":
            anchor = urllib.parse.unquote(parts.fragment)
            if anchor not in element_ids(str(target)):
                problems.append(f"{link['raw']!r} -> no anchor #{anchor} in {path}")
    return problems


def page_problems(facts):
    """Judge one page from the facts COLLECT_FACTS_JS gathered; returns
    {check: [problems]}."""
    problems = {"math": [], "raw_tex": [], "images": [], "fonts": []}
    if facts["mathElements"]:
        if facts["mathjax"] != "ready":
            problems["math"].append(
                f"MathJax did not finish typesetting ({facts['mathjax']})")
        problems["math"] += [f"math left untypeset: {t!r}" for t in facts["untypeset"]]
        if facts["mjxContainers"] < facts["mathElements"]:
            problems["math"].append(f"{facts['mjxContainers']} MathJax outputs for "
                                    f"{facts['mathElements']} math elements")
        if facts["mjxContainers"] and not any(f["family"].startswith("MJX")
                                              and f["status"] == "loaded"
                                              for f in facts["fonts"]):
            problems["fonts"].append("no MathJax font was loaded")
    problems["raw_tex"] = [f"raw TeX visible: {t!r}"
                           for t in raw_tex_fragments(facts["text"])]
    problems["images"] = [f"image not loaded: {i['src']}" for i in facts["images"]
                          if not i["complete"] or i["naturalWidth"] == 0]
    problems["fonts"] += [f"font failed to load: {f['family']}" for f in facts["fonts"]
                          if f["status"] == "error"]
    return problems


_SECTION_NUMBER = re.compile(r"^\s*(\d+\.)+\s*")
_SECTION_AFTER_SUMMARY = re.compile(r"^(exercises?|references|further reading)\b",
                                    re.IGNORECASE)


def chapter_problems(facts, referenced_equations):
    """Judge a chapter page from CHAPTER_FACTS_JS's facts; ``referenced_equations``
    holds the ``(page, anchor)`` pairs that prose anywhere in the book links to."""
    problems = []
    goals = facts["goals"]
    if not goals["found"]:
        problems.append("no 'Learning goals' at the top")
    else:
        if not goals["atTop"]:
            problems.append("'Learning goals' comes after the first section")
        if not goals["hasList"]:
            problems.append("'Learning goals' is not followed by a list")
    # "3.15. Summary" -> "Summary"
    h2 = [_SECTION_NUMBER.sub("", t) for t in facts["h2"]]
    summary = [i for i, t in enumerate(h2) if re.match(r"summary\b", t, re.IGNORECASE)]
    if not summary:
        problems.append("no 'Summary' section")
    else:
        late = [t for t in h2[summary[-1] + 1:] if not _SECTION_AFTER_SUMMARY.match(t)]
        if late:
            problems.append(f"sections after the Summary other than Exercises: {late}")
    if not facts["equations"]:
        problems.append("no numbered equation")
    elif (len(unreferenced_equations(facts, referenced_equations))
          == len(facts["equations"])):
        problems.append("no numbered equation is referenced from the prose")
    if not facts["exercises"]:
        problems.append("no exercise (sphinx-exercise)")
    solved = {s["target"] for s in facts["solutions"]}
    problems += [f"exercise #{e} has no solution" for e in facts["exercises"]
                 if e not in solved]
    for s in facts["solutions"]:
        if not s["dropdown"]:
            problems.append(f"solution to #{s['target']} is not a dropdown")
        elif not (s["hiddenAtFirst"] and s["shownOnClick"]):
            problems.append(f"solution to #{s['target']} does not open and close as a "
                            f"dropdown (hidden at first: {s['hiddenAtFirst']}, "
                            f"shown on click: {s['shownOnClick']})")
    return problems


def unreferenced_equations(facts, referenced_equations):
    """The numbered equations of a chapter page (CHAPTER_FACTS_JS) that no prose links
    to."""
    return [a for a in facts["equations"]
            if (facts["page"], a) not in referenced_equations]


# JavaScript run in the page (playwright's page.evaluate); waits for MathJax, images and
# fonts.
COLLECT_FACTS_JS = r"""
async () => {
  const within = (p, ms, late) =>
    Promise.race([p, new Promise(r => setTimeout(() => r(late), ms))]);
  let mathjax = 'absent';
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    mathjax = await within(
      MathJax.startup.promise.then(() => 'ready', e => 'failed: ' + e),
      20000, 'timed out');
  }
  for (const img of document.images) img.loading = 'eager';
  await within(Promise.all([...document.images].map(i => i.complete ? null :
    new Promise(r => {
      i.addEventListener('load', r); i.addEventListener('error', r);
    }))), 10000, null);
  await within(document.fonts.ready, 10000, null);
  const skip =
    'script,style,noscript,template,pre,code,textarea,mjx-container,.highlight';
  const texts = [];
  const walker = document.createTreeWalker(
    document.body || document.documentElement, NodeFilter.SHOW_TEXT, {
      acceptNode: n => n.parentElement && n.parentElement.closest(skip)
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  while (walker.nextNode()) texts.push(walker.currentNode.nodeValue);
  const math = [...document.querySelectorAll('.math')];
  return {
    mathjax,
    mathElements: math.length,
    untypeset: math.filter(e => !e.querySelector('mjx-container'))
      .map(e => e.textContent.trim().slice(0, 80)),
    mjxContainers: document.querySelectorAll('mjx-container').length,
    text: texts.join(' '),
    images: [...document.images].map(i => ({src: i.getAttribute('src'),
      complete: i.complete, naturalWidth: i.naturalWidth})),
    fonts: [...document.fonts].map(f => ({family: f.family, status: f.status})),
    links: [...document.querySelectorAll('a[href]')].map(a => ({href: a.href,
      raw: a.getAttribute('href'), headerlink: a.classList.contains('headerlink')})),
  };
}
"""

# JavaScript that reads a chapter page's structure; it clicks each solution's title to
# see the dropdown open (run it after the screenshot).
CHAPTER_FACTS_JS = r"""
(page) => {
  const article = document.querySelector('article') || document.body;
  const clean = e => e.textContent.replace(/#\s*$/, '').trim();
  const isGoals = e => /^learning goals\b/i.test(clean(e));
  const markers = [...article.querySelectorAll('h2, h3, h4, p, .rubric')]
    .filter(isGoals);
  const marker = markers[0];
  const firstSection = [...article.querySelectorAll('h2')].find(h => !isGoals(h));
  let hasList = false;
  if (marker) {
    if (/^H\d$/.test(marker.tagName))
      hasList = !!marker.parentElement.querySelector(':scope > ul, :scope > ol');
    else hasList = !!marker.nextElementSibling &&
      /^(UL|OL)$/.test(marker.nextElementSibling.tagName);
  }
  const atTop = !!marker && (!firstSection ||
    !!(marker.compareDocumentPosition(firstSection) &
       Node.DOCUMENT_POSITION_FOLLOWING));
  const visible = e => !!e && e.getClientRects().length > 0 &&
    getComputedStyle(e).visibility !== 'hidden';
  const solutions = [...article.querySelectorAll('.solution.admonition')].map(s => {
    const title = s.querySelector(':scope > .admonition-title');
    const link = title && title.querySelector('a[href*="#"]');
    const body = [...s.children].find(c => !c.classList.contains('admonition-title'));
    const hiddenAtFirst = !!body && !visible(body);
    let shownOnClick = false;
    if (title && body) { title.click(); shownOnClick = visible(body); title.click(); }
    return {target: link
              ? decodeURIComponent(link.getAttribute('href').split('#')[1]) : null,
            dropdown: s.classList.contains('dropdown'), hiddenAtFirst, shownOnClick};
  });
  return {
    page,
    goals: {found: !!marker, atTop, hasList},
    h2: [...article.querySelectorAll('h2')].map(clean),
    equations: [...article.querySelectorAll('div.math[id^="equation-"]')]
      .filter(e => e.querySelector('.eqno')).map(e => e.id),
    exercises: [...article.querySelectorAll('.exercise.admonition')].map(e => e.id),
    solutions,
  };
}
"""


# ----------------------------------------------------------- layout: does the page fit?

#: The two widths every page is measured at: a laptop window and a phone.
LAYOUTS = {"laptop": {"width": 1280, "height": 800},
           "phone": {"width": 390, "height": 844}}

# JavaScript that unfolds what a reader can unfold (solutions, <details>) and measures,
# for every display equation, code block, cell output, table and image of the article,
# its content width against its own box and against the text column, and the page's
# width against the viewport.
LAYOUT_FACTS_JS = r"""
async () => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  for (const t of document.querySelectorAll('.toggle.toggle-hidden, .toggle-hidden')) {
    const button =
      t.querySelector(':scope > .toggle-button, :scope > .admonition-title');
    if (button) button.click();
    t.classList.remove('toggle-hidden');
  }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const viewport = document.documentElement.clientWidth;
  const article = document.querySelector('article.bd-article') ||
    document.querySelector('article') || document.body;
  const box = article.getBoundingClientRect(), style = getComputedStyle(article);
  const column = [box.left + parseFloat(style.paddingLeft),
                  box.right - parseFloat(style.paddingRight)];
  const scrollsX = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const clipsX = e => ['hidden', 'clip'].includes(getComputedStyle(e).overflowX);
  const describe = e => {
    const anchor = e.closest('[id]');
    return (anchor ? '#' + anchor.id + ': ' : '') +
      (e.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 60);
  };
  // the nearest ancestor inside the article (or the element itself) that scrolls or
  // clips sideways
  const container = e => {
    for (let a = e; a && a !== article && a !== document.body; a = a.parentElement) {
      if (scrollsX(a) || clipsX(a)) return a;
    }
    return null;
  };
  const kinds = [
    ['equation', 'mjx-container[display="true"]'],
    ['output', '.cell_output pre, div.output pre'],
    ['code', 'div.highlight > pre'],
    ['table', 'table'],
    ['image', 'img'],
  ];
  const seen = new Set(), boxes = [];
  for (const [kind, selector] of kinds) {
    for (const e of article.querySelectorAll(selector)) {
      if (seen.has(e)) continue;
      seen.add(e);
      const r = e.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;  // not displayed
      // a display equation's content is its mjx-math child; a box's is its scroll width
      const content = kind === 'equation'
        ? Math.max(e.scrollWidth,
                   ...[...e.children].map(c => c.getBoundingClientRect().width))
        : e.scrollWidth;
      const holder = container(e);
      const hr = holder ? holder.getBoundingClientRect() : null;
      boxes.push({
        kind, where: describe(e),
        content: Math.round(content), room: e.clientWidth,
        left: Math.round(r.left), right: Math.round(r.right),
        // who shows the overflow: the box itself or an ancestor that scrolls or clips
        // sideways
        holder: holder ? {self: holder === e, scrolls: scrollsX(holder),
                          clips: clipsX(holder),
                          left: Math.round(hr.left), right: Math.round(hr.right),
                          content: holder.scrollWidth, room: holder.clientWidth} : null,
      });
    }
  }
  // the elements that push the page sideways: the deepest ones reaching past the
  // viewport (an element's reach includes text that overflows its box, as a long
  // unbreakable word does)
  const reach = e => {
    const r = e.getBoundingClientRect();
    return scrollsX(e) || clipsX(e) ? r.right
      : r.left + Math.max(r.width, e.scrollWidth);
  };
  const spill = [];
  if (document.documentElement.scrollWidth > viewport + 1) {
    for (const e of document.body.querySelectorAll('*')) {
      const right = reach(e);
      if (right <= viewport + 1 || !e.getClientRects().length ||
          container(e.parentElement || e)) continue;
      if ([...e.children].some(c => reach(c) > viewport + 1)) continue;
      spill.push(e.tagName.toLowerCase() + ' ' + describe(e) +
                 ` (reaching ${Math.round(right)} px)`);
    }
  }
  return {viewport, pageWidth: document.documentElement.scrollWidth,
          column: column.map(Math.round), boxes, spill: spill.slice(0, 10)};
}
"""

#: Boxes that may scroll sideways inside their own frame on a phone (never on a
#: laptop).
SCROLL_ON_PHONE = {"equation", "code", "table"}


def layout_problems(facts, layout):
    """Judge one page's LAYOUT_FACTS_JS at ``layout`` ("laptop" or "phone"); returns
    problems.

    Every width: the page is no wider than the viewport, and no content is cut off (an
    overflowing box scrolls, it is never clipped). Laptop: no equation, code block,
    output, table or image is wider than its box or the text column. Phone: cell outputs
    and images still fit (outputs wrap); code blocks, display equations and tables may
    scroll sideways, each inside its own frame.

    >>> fits = {"kind": "code", "where": "x", "content": 600, "room": 600, "left": 10,
    ...         "right": 610, "holder": None}
    >>> page = {"viewport": 1280, "pageWidth": 1280, "column": [10, 700],
    ...         "boxes": [fits], "spill": []}
    >>> layout_problems(page, "laptop")
    []
    >>> wide = dict(fits, content=900, holder={"self": True, "scrolls": True,
    ...                                        "clips": False, "left": 10, "right": 610,
    ...                                        "content": 900, "room": 600})
    >>> layout_problems(dict(page, boxes=[wide]), "laptop")
    ['code wider than its box (900 px of content in 600 px, scrolls sideways) at x']
    >>> layout_problems(dict(page, boxes=[wide], viewport=390, pageWidth=390), "phone")
    []
    """
    problems = []
    if facts["pageWidth"] > facts["viewport"] + 1:
        problems.append(f"the page is {facts['pageWidth']} px wide in a "
                        f"{facts['viewport']} px window"
                        + "".join(f"\n      pushed by {s}" for s in facts["spill"]))
    left, right = facts["column"]
    for b in facts["boxes"]:
        holder = b["holder"]
        scrolls_inside = bool(holder and holder["scrolls"]
                              and holder["left"] >= left - 1
                              and holder["right"] <= right + 1)
        allowed = layout == "phone" and b["kind"] in SCROLL_ON_PHONE and scrolls_inside
        overflow = []
        if b["content"] > b["room"] + 1:
            how = ("scrolls sideways" if holder and holder["scrolls"]
                   else "cut off" if holder and holder["clips"] else "spills out")
            overflow.append(f"wider than its box ({b['content']} px of content in "
                            f"{b['room']} px, {how})")
        if b["left"] < left - 1 or b["right"] > right + 1:
            overflow.append(f"outside the text column ({b['left']}..{b['right']} px, "
                            f"column {left}..{right} px)")
        if holder and holder["clips"] and holder["content"] > holder["room"] + 1:
            overflow.append("cut off by a frame that hides what does not fit")
            allowed = False
        if overflow and not allowed:
            problems += [f"{b['kind']} {o} at {b['where']}" for o in overflow]
    return problems


# ------------------------------------------------------- driving a page in the browser
# Shared by the browser tests (test_browser*.py); ``context`` is what chromium() yields.

REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.IGNORECASE)


@dataclasses.dataclass
class Record:
    """What one page did while it loaded."""
    # requests that would leave the machine
    external: list = dataclasses.field(default_factory=list)
    # console errors and uncaught exceptions
    console: list = dataclasses.field(default_factory=list)
    # local resources that failed to load
    failed: list = dataclasses.field(default_factory=list)
    # local resources that loaded
    local: list = dataclasses.field(default_factory=list)


def open_page(context, url, local_prefix, source="", viewport=None):
    """Open ``url`` in a new tab, refusing every request outside ``local_prefix``.

    ``source`` is the page's HTML as stored (to recognise a redirect page, whose target
    is judged); ``viewport`` a window size other than the context's. Returns the tab,
    its Record and the facts of COLLECT_FACTS_JS. Close the tab after use.
    """
    page = context.new_page()
    if viewport:
        page.set_viewport_size(viewport)
    record = Record()

    def is_local(u):
        return u.startswith(local_prefix) or u.startswith(("data:", "blob:", "about:"))

    def on_request(request):
        if not is_local(request.url):
            record.external.append(request.url)

    def on_response(response):
        if is_local(response.url) and response.url.startswith(("http", "file")):
            (record.failed if response.status >= 400 else record.local).append(
                f"{response.status} {response.url}")

    def on_failed(request):
        if is_local(request.url):
            record.failed.append(f"{request.failure} {request.url}")

    def on_console(message):
        if message.type == "error":
            where = message.location.get("url", "")
            record.console.append(f"console error: {message.text}"
                                  + (f" (at {where})" if where else ""))

    page.on("request", on_request)
    page.on("response", on_response)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror",
            lambda error: record.console.append(f"uncaught exception: {error}"))
    page.route(lambda u: not is_local(u), lambda route: route.abort("blockedbyclient"))
    page.goto(url, wait_until="load", timeout=30_000)
    # a redirect page (index.html is one): judge the page it leads to
    if REFRESH.search(source):
        page.wait_for_url(lambda u: u != url, wait_until="load", timeout=30_000)
    facts = page.evaluate(COLLECT_FACTS_JS)
    return page, record, facts


def judge(record, facts, origin=None, folder=None):
    """All problems of one visit, by check; the link check runs when ``origin`` and
    ``folder`` are given."""
    problems = page_problems(facts)
    problems["console"] = list(record.console)
    problems["network"] = [f"request to the network: {u}" for u in record.external]
    problems["resources"] = [f"local resource failed: {f}" for f in record.failed]
    if origin is not None:
        problems["links"] = link_problems(facts["links"], origin, folder)
    return problems


def assert_none(problems):
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)



#: The screenshots' file type. Chromium captures and encodes a JPEG with less CPU time
#: than a PNG of the same page.
SCREENSHOT_SUFFIX = ".jpg"

#: A screenshot shows the page's first screen (the window's size). With
#: ``BOOK_SCREENSHOTS=full`` it shows the whole page: chapters are 15 000 to 40 000 px
#: tall, and capturing them whole takes about 2 to 4 s of the browser's time per
#: chapter.
FULL_SCREENSHOTS = os.environ.get("BOOK_SCREENSHOTS", "").lower() == "full"


def take_screenshot(page, path, full_page=None):
    """Write ``page`` at the window's width to ``path``: its first screen, or its whole
    height when ``full_page`` (by default FULL_SCREENSHOTS)."""
    full_page = FULL_SCREENSHOTS if full_page is None else full_page
    page.screenshot(path=str(path), full_page=full_page, type="jpeg", quality=80)


def search(browser, url, local_prefix, screenshot=None):
    """Run a search page; return (result links, problems seen while searching)."""
    page, record, _ = open_page(browser, url, local_prefix)
    try:
        page.wait_for_function(
            "() => { const h = document.querySelector('#search-results h2');"
            " return h && h.textContent.trim() === 'Search Results'; }", timeout=20_000)
        hits = page.eval_on_selector_all(
            "#search-results ul.search li a",
            "as => as.map(a => ({href: a.href, raw: a.getAttribute('href')}))")
        if screenshot:
            take_screenshot(page, screenshot)
    finally:
        page.close()
    return hits, record


_TEXT_SUFFIXES = {".html", ".js", ".css", ".txt", ".ipynb", ".md", ".json", ".svg",
                  ".xml", ".inv"}


def machine_paths(html):
    """Absolute paths of the machine that built ``html`` that no page may show: the
    repository, the build folder, the Python environment, the home and temporary
    folders, installed packages."""
    import site
    import sys

    roots = {str(ROOT), str(pathlib.Path(html).resolve().parents[1]), sys.prefix,
             sys.base_prefix, str(pathlib.Path.home()), tempfile.gettempdir(),
             *site.getsitepackages()}
    # "/" itself is no clue
    paths = {p.rstrip("/") + "/" for p in roots if p and p.strip("/")}
    return sorted(paths | {"/site-packages/", "/dist-packages/"}, key=len, reverse=True)


def absolute_path_leaks(text, paths):
    """The places in ``text`` that show one of ``paths`` (see machine_paths), with some
    context.

    >>> absolute_path_leaks('File <span>/home/ci/repo/src/x.py:3</span> in f',
    ...                     ["/home/ci/repo/"])
    ['/home/ci/repo/src/x.py:3']
    >>> absolute_path_leaks("a relative ../_static/x.js and /usr/share/x",
    ...                     ["/home/ci/repo/"])
    []
    """
    pattern = re.compile("(?:" + "|".join(re.escape(p) for p in paths)
                         + r")[^\s<>\"',]*")
    return [m.group(0) for m in pattern.finditer(text)]


def path_leaks_in_build(html, paths=None):
    """Every built text file under ``html`` that shows a build-machine path:
    ``{file: [leaks]}``."""
    html = pathlib.Path(html)
    paths = paths or machine_paths(html)
    found = {}
    for path in sorted(html.rglob("*")):
        if path.suffix in _TEXT_SUFFIXES and path.is_file():
            leaks = absolute_path_leaks(
                path.read_text(encoding="utf-8", errors="replace"), paths)
            if leaks:
                found[path.relative_to(html).as_posix()] = leaks
    return found
