"""Every page of the built book, opened in headless Chromium with the network off.

The book (``_build/html``, or ``$BOOK_HTML``) is built first if it is missing, then served from a
loopback HTTP server; every request to anywhere else is recorded and refused. For each page the
tests assert: mathematics typeset by MathJax with its fonts loaded locally and no raw TeX left
visible, every image loaded, no console error, no request that left the machine, every internal
link leading to a built page and an existing anchor. Each page is also opened from disk
(``file://``), as a reader with the folder and no network would. The search page must find
"softmax", and each chapter page must have learning goals, a summary, referenced numbered
equations, and exercises whose solutions open as dropdowns. Every page must fit a 1280 px window
and a 390 px phone (the criteria are written above ``layouts`` below). One screenshot per page is
written to ``_build/screenshots/``. Planted faults show that each check can fail.

Without a Chromium these tests skip, except under CI (``CI=true``), where they fail.
"""

import dataclasses
import re
import shutil
import urllib.parse

import pytest

import booksite

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"

VIEWPORT = booksite.LAYOUTS["laptop"]  # pages are judged and measured at this size
REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.IGNORECASE)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium with a fresh profile (a playwright browser context)."""
    with booksite.chromium(VIEWPORT) as context:
        yield context


@dataclasses.dataclass
class Record:
    """What one page did while it loaded."""
    external: list = dataclasses.field(default_factory=list)   # requests that would leave the machine
    console: list = dataclasses.field(default_factory=list)    # console errors and uncaught exceptions
    failed: list = dataclasses.field(default_factory=list)     # local resources that failed to load
    local: list = dataclasses.field(default_factory=list)      # local resources that loaded


def open_page(context, url, local_prefix, source="", viewport=None):
    """Open ``url`` in a new tab, refusing every request outside ``local_prefix``.

    ``source`` is the page's HTML as stored (to recognise a redirect page, whose target is judged);
    ``viewport`` a window size other than VIEWPORT. Returns the tab, its Record and the facts of
    booksite.COLLECT_FACTS_JS. Close the tab after use.
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
            (record.failed if response.status >= 400 else record.local).append(f"{response.status} {response.url}")

    def on_failed(request):
        if is_local(request.url):
            record.failed.append(f"{request.failure} {request.url}")

    def on_console(message):
        if message.type == "error":
            where = message.location.get("url", "")
            record.console.append(f"console error: {message.text}" + (f" (at {where})" if where else ""))

    page.on("request", on_request)
    page.on("response", on_response)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror", lambda error: record.console.append(f"uncaught exception: {error}"))
    page.route(lambda u: not is_local(u), lambda route: route.abort("blockedbyclient"))
    page.goto(url, wait_until="load", timeout=30_000)
    if REFRESH.search(source):  # a redirect page (index.html is one): judge the page it leads to
        page.wait_for_url(lambda u: u != url, wait_until="load", timeout=30_000)
    facts = page.evaluate(booksite.COLLECT_FACTS_JS)
    return page, record, facts


def judge(record, facts, origin=None, folder=None):
    """All problems of one visit, by check; the link check runs when ``origin`` and ``folder`` are given."""
    problems = booksite.page_problems(facts)
    problems["console"] = list(record.console)
    problems["network"] = [f"request to the network: {u}" for u in record.external]
    problems["resources"] = [f"local resource failed: {f}" for f in record.failed]
    if origin is not None:
        problems["links"] = booksite.link_problems(facts["links"], origin, folder)
    return problems


SEARCH_SHOT = "search__softmax-results.png"


def screenshot_name(relpath):
    return relpath.replace("/", "__").removesuffix(".html") + ".png"


@dataclasses.dataclass
class Visit:
    problems: dict
    facts: dict
    record: Record
    chapter: dict = None
    layout: dict = None  # LAYOUT_FACTS_JS at VIEWPORT


@pytest.fixture(scope="module")
def html():
    return booksite.built_html()


@pytest.fixture(scope="module")
def site(html):
    with booksite.LoopbackServer(html) as server:
        yield server


@pytest.fixture(scope="module")
def screenshots(html):
    folder = html.parent / "screenshots"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    return folder


@pytest.fixture(scope="module")
def visits(browser, site, html, screenshots):
    """Open every built page once over loopback HTTP: judge it, screenshot it, read chapter facts,
    then measure its layout (last, since measuring unfolds the solutions)."""
    result = {}
    for rel in booksite.book_pages(html):
        page, record, facts = open_page(browser, site.url(rel), site.origin + "/", (html / rel).read_text())
        try:
            page.screenshot(path=str(screenshots / screenshot_name(rel)), full_page=True)
            chapter = page.evaluate(booksite.CHAPTER_FACTS_JS, rel) if rel.startswith("chapters/") else None
            layout = page.evaluate(booksite.LAYOUT_FACTS_JS)
        finally:
            page.close()
        result[rel] = Visit(judge(record, facts, site.origin, html), facts, record, chapter, layout)
    return result


def report(visits, check):
    """One line per problem of ``check``, prefixed with its page; empty when every page passes."""
    return [f"{page}: {p}" for page, visit in visits.items() for p in visit.problems[check]]


def assert_none(problems):
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_the_book_has_its_pages(visits):
    pages = set(visits)
    assert {"index.html", "search.html", "book/intro.html", "book/notation.html", "book/glossary.html",
            "book/references.html"} <= pages
    assert any(p.startswith("chapters/") for p in pages), "no chapter page was built"


def test_mathematics_is_typeset(visits):
    assert visits["book/notation.html"].facts["mathElements"] > 0, "the notation page should hold math"
    assert_none(report(visits, "math"))


def test_no_raw_tex_is_visible(visits):
    assert_none(report(visits, "raw_tex"))


def test_fonts_load_from_the_book(visits):
    assert_none(report(visits, "fonts"))
    fonts = [r for v in visits.values() for r in v.record.local if r.endswith((".woff", ".woff2"))]
    assert any("/_static/mathjax/" in f for f in fonts), "MathJax fonts were never fetched from _static"


def test_every_image_loads(visits):
    assert any(v.facts["images"] for v in visits.values()), "no page has an image: the check saw nothing"
    assert_none(report(visits, "images"))


def test_no_console_errors(visits):
    assert_none(report(visits, "console"))


def test_nothing_is_requested_from_the_network(visits):
    assert_none(report(visits, "network"))
    assert_none(report(visits, "resources"))


def test_internal_links_lead_to_pages_and_anchors(visits):
    assert_none(report(visits, "links"))


def test_one_screenshot_per_page(visits, screenshots):
    for page in visits:
        shot = screenshots / screenshot_name(page)
        assert shot.is_file(), f"no screenshot of {page}"
        head = shot.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{shot} is not a PNG"
        assert int.from_bytes(head[16:20], "big") == VIEWPORT["width"]
    stray = {p.name for p in screenshots.glob("*.png")} - {screenshot_name(p) for p in visits} - {SEARCH_SHOT}
    assert not stray, f"screenshots of no built page: {sorted(stray)}"


def equation_references(visits, origin):
    """(page, anchor) of every numbered equation that prose somewhere in the book links to."""
    refs = set()
    for visit in visits.values():
        for link in visit.facts["links"]:
            parts = urllib.parse.urlsplit(link["href"])
            if not link["headerlink"] and link["href"].startswith(origin) and parts.fragment.startswith("equation-"):
                refs.add((urllib.parse.unquote(parts.path).lstrip("/"), urllib.parse.unquote(parts.fragment)))
    return refs


def test_chapter_pages_have_goals_summary_equations_and_exercises(visits, site):
    refs = equation_references(visits, site.origin)
    problems = [f"{page}: {p}" for page, visit in visits.items() if visit.chapter
                for p in booksite.chapter_problems(visit.chapter, refs)]
    assert_none(problems)


def test_every_numbered_equation_is_referenced_from_the_prose(visits, site):
    # An equation gets a number so that the prose can point to it; a number nobody cites is noise.
    refs = equation_references(visits, site.origin)
    problems = [f"{page}: numbered equation #{a} is never referenced from the prose"
                for page, visit in visits.items() if visit.chapter
                for a in booksite.unreferenced_equations(visit.chapter, refs)]
    assert_none(problems)


# ------------------------------------------------------------------------ pages that fit
# Criteria (booksite.layout_problems), measured on every page at 1280x800 and at 390x844 with every
# solution and <details> unfolded:
# - at both widths the page itself is never wider than the window, and nothing is cut off (a box
#   whose content does not fit scrolls; it never hides the rest);
# - at 1280 px no display equation, code block, cell output, table or image is wider than its box
#   or the text column: nothing scrolls sideways (long equations are split, code lines are short);
# - at 390 px cell outputs and images still fit (outputs wrap), while a code block, a display
#   equation or a table may scroll sideways inside its own frame within the column: re-wrapping
#   code or mathematics to a phone's 40-odd characters would make it harder, not easier, to read.

@pytest.fixture(scope="module")
def layouts(browser, site, html, visits):
    """LAYOUT_FACTS_JS of every page at each of booksite.LAYOUTS, by (layout, page); the size of
    VIEWPORT was measured during the visits."""
    result = {}
    for layout, viewport in booksite.LAYOUTS.items():
        if viewport == VIEWPORT:
            result.update({(layout, rel): visit.layout for rel, visit in visits.items()})
            continue
        for rel in booksite.book_pages(html):
            page, _, _ = open_page(browser, site.url(rel), site.origin + "/", (html / rel).read_text(), viewport)
            try:
                result[layout, rel] = page.evaluate(booksite.LAYOUT_FACTS_JS)
            finally:
                page.close()
    return result


def layout_report(layouts, layout):
    return [f"{rel} at {booksite.LAYOUTS[layout]['width']} px: {p}" for (name, rel), facts in layouts.items()
            if name == layout for p in booksite.layout_problems(facts, layout)]


def test_layouts_measured_what_they_should(layouts):
    kinds = {b["kind"] for (layout, rel), facts in layouts.items() for b in facts["boxes"]}
    assert {"equation", "code", "output", "table", "image"} <= kinds, kinds
    for (layout, rel), facts in layouts.items():
        assert facts["viewport"] == booksite.LAYOUTS[layout]["width"], (layout, rel, facts["viewport"])


def test_pages_fit_a_laptop_window(layouts):
    assert_none(layout_report(layouts, "laptop"))


def test_pages_fit_a_phone(layouts):
    assert_none(layout_report(layouts, "phone"))


PLANT_WIDE_CONTENT_JS = r"""
async () => {
  const article = document.querySelector('article.bd-article');
  const plant = html => { const d = document.createElement('div'); d.innerHTML = html; article.appendChild(d); return d; };
  plant('<div class="highlight"><pre id="planted-code">x = ' + '1 + '.repeat(40) + '1</pre></div>');
  plant('<div class="highlight"><pre id="planted-clipped" style="overflow-x: hidden">y = ' + '2 + '.repeat(40) + '2</pre></div>');
  plant('<div class="cell_output"><div class="output stream highlight-myst-ansi"><div class="highlight">'
        + '<pre id="planted-output" style="white-space: pre">' + 'word '.repeat(60) + '</pre></div></div></div>');
  plant('<div class="pst-scrollable-table-container"><table id="planted-table"><tr>'
        + '<td>a_table_cell</td>'.repeat(40) + '</tr></table></div>');
  plant('<p id="planted-word">' + 'unbreakable'.repeat(5) + '</p>');
  const math = plant('<div class="math notranslate nohighlight" id="planted-equation">\\[' + 'a_1 + '.repeat(50) + 'a_2\\]</div>');
  await MathJax.typesetPromise([math]);
  return math.querySelectorAll('mjx-container[display="true"]').length;  // typeset: 1
}
"""
PLANTED = {"laptop": {"planted-code", "planted-clipped", "planted-output", "planted-table", "planted-equation"},
           # on a phone code, equations and tables may scroll in their own frame; a clipped
           # block, an output that does not wrap and a word that pushes the page may not
           "phone": {"planted-clipped", "planted-output", "planted-word"}}


@pytest.mark.parametrize("layout", sorted(booksite.LAYOUTS))
def test_fault_control_wide_content_is_flagged(browser, site, html, layout):
    rel = booksite.chapter_pages(html)[0]
    page, _, _ = open_page(browser, site.url(rel), site.origin + "/", viewport=booksite.LAYOUTS[layout])
    try:
        before = booksite.layout_problems(page.evaluate(booksite.LAYOUT_FACTS_JS), layout)
        assert page.evaluate(PLANT_WIDE_CONTENT_JS) == 1, "the planted equation was not typeset"
        after = booksite.layout_problems(page.evaluate(booksite.LAYOUT_FACTS_JS), layout)
    finally:
        page.close()
    new = [p for p in after if p not in before]
    flagged = {name for name in PLANTED["laptop"] | PLANTED["phone"] if any(name in p for p in new)}
    assert flagged == PLANTED[layout], "\n".join(new)


def search(browser, url, local_prefix, screenshot=None):
    """Run a search page; return (result links, problems seen while searching)."""
    page, record, _ = open_page(browser, url, local_prefix)
    try:
        page.wait_for_function(
            "() => { const h = document.querySelector('#search-results h2');"
            " return h && h.textContent.trim() === 'Search Results'; }", timeout=20_000)
        hits = page.eval_on_selector_all("#search-results ul.search li a",
                                         "as => as.map(a => ({href: a.href, raw: a.getAttribute('href')}))")
        if screenshot:
            page.screenshot(path=str(screenshot), full_page=True)
    finally:
        page.close()
    return hits, record


def test_search_finds_softmax(browser, site, html, screenshots):
    hits, record = search(browser, site.url("search.html") + "?q=softmax", site.origin + "/",
                          screenshots / SEARCH_SHOT)
    assert hits, "searching for 'softmax' found nothing"
    assert booksite.link_problems(hits, site.origin, html) == []
    assert any("searchindex.js" in r for r in record.local), "the search index was not loaded from the book"
    assert record.external == [] and record.console == [] and record.failed == []


def test_search_finds_softmax_opened_from_disk(browser, html):
    hits, record = search(browser, (html / "search.html").as_uri() + "?q=softmax", html.as_uri() + "/")
    assert hits, "searching for 'softmax' from disk found nothing"
    assert all((html / h["raw"].split("#")[0]).is_file() for h in hits)
    assert record.external == [] and record.console == [] and record.failed == []


def test_search_check_sees_a_word_the_book_lacks(browser, site):
    # fault control: the same check reports no hits for a word that appears on no page
    hits, _ = search(browser, site.url("search.html") + "?q=zqxjvw", site.origin + "/")
    assert hits == []


def test_mathjax_accessibility_tools_load_from_the_book(browser, site, html):
    # A reader may switch on MathJax's explorer and collapsible maths from its menu; MathJax then
    # loads more components and speech-rule data, which must come from _static, never a CDN.
    page, record, _ = open_page(browser, site.url("book/glossary.html"), site.origin + "/")
    try:
        settings = page.evaluate("""() => {
            const pool = MathJax.startup.document.menu.menu.pool;
            for (const name of ['explorer', 'collapsible']) pool.lookup(name).setValue(true);
            return ['explorer', 'collapsible'].map(name => pool.lookup(name).getValue());
        }""")
        wanted = ("/_static/mathjax/a11y/explorer.js", "/_static/mathjax/sre/mathmaps/")
        for _ in range(75):  # MathJax loads the components and speech-rule data in the background
            if all(any(w in r for r in record.local) for w in wanted):
                break
            page.wait_for_timeout(200)
        page.wait_for_timeout(500)
    finally:
        page.close()
    assert settings == [True, True]
    for w in wanted:
        assert any(w in r for r in record.local), f"nothing from {w} was loaded"
    assert record.external == [] and record.console == [] and record.failed == []


def judge_from_disk(browser, folder, rel):
    """Open ``folder/rel`` from disk (``file://``) and judge it; returns {check: [problems]}."""
    page, record, facts = open_page(browser, (folder / rel).as_uri(), folder.as_uri() + "/",
                                    (folder / rel).read_text())
    page.close()
    return judge(record, facts)


def test_every_page_works_opened_from_disk(browser, html, visits):
    problems = []
    for rel in visits:
        checks = judge_from_disk(browser, html, rel)
        problems += [f"{rel} (file://): {p}" for check in checks.values() for p in check]
    assert_none(problems)


# ------------------------------------------------------------------------ fault controls
# Small synthetic pages with planted faults, served like the book, must be flagged by the same
# functions; a clean page must pass. The pages borrow the book's _static (MathJax, togglebutton).

def synthetic(body, head=""):
    return f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>t</title>{head}</head><body>{body}</body></html>"


MATHJAX = "<script defer src='_static/mathjax/tex-chtml.js'></script>"
TOGGLE = ("<link rel='stylesheet' href='_static/togglebutton.css'>"
          "<script>let toggleHintShow = 'Click to show'; let toggleHintHide = 'Click to hide';"
          " let toggleOpenOnPrint = 'true'; var togglebuttonSelector = '.toggle, .admonition.dropdown';</script>"
          "<script src='_static/togglebutton.js'></script>")

GOALS = "<h1>Chapter 9</h1><p>Why.</p><p><strong>Learning goals</strong></p><ul><li>one</li></ul>"
EQUATION = ("<section id='s'><h2>Scores</h2><div class='math notranslate nohighlight' id='equation-eq-s'>"
            "<span class='eqno'>(1)</span>\\[S = QK^\\top\\]</div>"
            "<p>By <a class='reference internal' href='#equation-eq-s'>(1)</a>.</p></section>")
SUMMARY = "<section id='summary'><h2>Summary</h2><p>Done.</p></section>"
EXERCISE = ("<div class='exercise admonition' id='ex-1'><p class='admonition-title'>Exercise 1</p>"
            "<section><p>Do it.</p></section></div>")
SOLUTION = ("<div class='solution dropdown admonition' id='sol-1'><p class='admonition-title'>Solution to"
            "<a class='reference internal' href='#ex-1'> Exercise 1</a></p><section><p>Answer.</p></section></div>")


def chapter_page(goals=GOALS, equation=EQUATION, summary=SUMMARY, exercise=EXERCISE, solution=SOLUTION):
    body = f"<article>{goals}{equation}{summary}<section id='ex'><h2>Exercises</h2>{exercise}{solution}</section></article>"
    return synthetic(body, MATHJAX + TOGGLE)


FAULT_PAGES = {
    "clean.html": synthetic("<p>Inline <span class='math'>\\(x^2\\)</span>, displayed:</p>"
                            "<div class='math'>\\[\\frac{a}{b}\\]</div><p id='here'>Text, $5 and <code>$$</code>.</p>"
                            "<img src='dot.png' alt='a dot'><a href='clean.html#here'>ok</a><a href='#here'>ok</a>"
                            "<a href='https://example.org/elsewhere'>a hyperlink elsewhere</a>", MATHJAX),
    "raw_tex.html": synthetic("<p>Forgot: $$x^2$$ and \\(a\\) and \\begin{align}b\\end{align} and $\\alpha$.</p>"
                              "<span class='math'>\\(y\\)</span>"),
    "broken_image.html": synthetic("<img src='missing.png' alt='gone'>"),
    # MathJax typesets, but its fonts are looked for in a folder that does not exist
    "mathjax_font_missing.html": synthetic("<p>Inline <span class='math'>\\(x^2\\)</span>.</p>",
                                           "<script>MathJax = {chtml: {fontURL: '_static/mathjax/no-such-fonts'}};"
                                           "</script>" + MATHJAX),
    # visible text set in a web font whose file is missing
    "font_missing.html": synthetic("<p style='font-family: PlantedFace'>Visible text.</p>",
                                   "<style>@font-face { font-family: PlantedFace;"
                                   " src: url('no-such-font.woff2') format('woff2'); }</style>"),
    "dead_links.html": synthetic("<a href='nowhere.html'>dead page</a> <a href='clean.html#no-such-anchor'>dead anchor</a>"
                                 " <a href='clean.html#here'>fine</a> <a href='https://example.org/'>external hyperlink</a>"),
    "console_error.html": synthetic("<script>console.error('planted');</script><script>throw new Error('planted throw');</script>"),
    "external.html": synthetic("<p>loads</p>", "<script src='https://unpkg.com/thebe@0.8.2/lib/index.js'></script>"
                               "<link rel='stylesheet' href='https://fonts.googleapis.com/css?family=Roboto'>"),
    "chapter_good.html": chapter_page(),
    "chapter_numbered.html": chapter_page(summary=SUMMARY.replace(
        "<h2>Summary</h2>", "<h2><span class='section-number'>9.3. </span>Summary</h2>")),
    "chapter_no_goals.html": chapter_page(goals="<h1>Chapter 9</h1><p>Why.</p>"),
    "chapter_late_goals.html": chapter_page(goals="<h1>Chapter 9</h1>", summary=SUMMARY.replace(
        "<p>Done.</p>", "<p><strong>Learning goals</strong></p><ul><li>one</li></ul>")),
    "chapter_goals_no_list.html": chapter_page(goals="<h1>Chapter 9</h1><p><strong>Learning goals</strong></p><p>prose</p>"),
    "chapter_no_summary.html": chapter_page(summary=""),
    "chapter_section_after_summary.html": chapter_page(summary=SUMMARY + "<section id='more'><h2>More derivations</h2></section>"),
    "chapter_no_equation.html": chapter_page(equation="<section id='s'><h2>Scores</h2><p>No maths.</p></section>"),
    "chapter_unreferenced_equation.html": chapter_page(equation=EQUATION.replace(
        "<a class='reference internal' href='#equation-eq-s'>(1)</a>", "equation one")),
    "chapter_one_equation_uncited.html": chapter_page(equation=EQUATION + EQUATION.replace("eq-s", "eq-t").replace(
        "<a class='reference internal' href='#equation-eq-t'>(1)</a>", "equation two")),
    "chapter_no_exercise.html": chapter_page(exercise="", solution=""),
    "chapter_no_solution.html": chapter_page(solution=""),
    "chapter_solution_not_dropdown.html": chapter_page(solution=SOLUTION.replace("solution dropdown admonition",
                                                                                  "solution admonition")),
}


@pytest.fixture(scope="module")
def fault_site(html, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fault-pages")
    (folder / "_static").symlink_to(html / "_static", target_is_directory=True)
    shutil.copy(next((html / "_static").rglob("*.png")), folder / "dot.png")
    for name, text in FAULT_PAGES.items():
        (folder / name).write_text(text)
    with booksite.LoopbackServer(folder) as server:
        yield server, folder


@pytest.fixture(scope="module")
def fault_visits(browser, fault_site):
    server, folder = fault_site
    result = {}
    for name in FAULT_PAGES:
        page, record, facts = open_page(browser, server.url(name), server.origin + "/")
        try:
            chapter = page.evaluate(booksite.CHAPTER_FACTS_JS, name) if name.startswith("chapter_") else None
        finally:
            page.close()
        result[name] = Visit(judge(record, facts, server.origin, folder), facts, record, chapter)
    return result


def flagged(visit):
    return {check for check, problems in visit.problems.items() if problems}


def test_fault_control_clean_page_passes_every_check(fault_visits):
    visit = fault_visits["clean.html"]
    assert visit.facts["mjxContainers"] == 2
    assert visit.problems == {check: [] for check in visit.problems}


def test_fault_control_raw_tex_is_flagged(fault_visits):
    visit = fault_visits["raw_tex.html"]
    assert flagged(visit) == {"math", "raw_tex"}
    assert len(visit.problems["raw_tex"]) >= 5  # $$, \(, \), \begin, \end, $\alpha ...


def test_fault_control_broken_image_is_flagged(fault_visits):
    visit = fault_visits["broken_image.html"]
    assert visit.problems["images"] == ["image not loaded: missing.png"]
    assert visit.problems["resources"] and visit.problems["console"]  # the 404 shows there too


def test_fault_control_missing_mathjax_fonts_are_flagged(fault_visits):
    visit = fault_visits["mathjax_font_missing.html"]
    assert visit.facts["mathjax"] == "ready" and visit.facts["mjxContainers"] == 1
    assert visit.problems["math"] == []  # typeset, but in no font
    fonts = visit.problems["fonts"]
    assert fonts[0] == "no MathJax font was loaded"
    assert fonts[1:] and all(p.startswith("font failed to load: MJX") for p in fonts[1:]), fonts
    assert any("/_static/mathjax/no-such-fonts/" in f for f in visit.problems["resources"])


def test_fault_control_missing_web_font_is_flagged(fault_visits):
    visit = fault_visits["font_missing.html"]
    assert visit.problems["fonts"] == ["font failed to load: PlantedFace"]
    assert any("no-such-font.woff2" in f for f in visit.problems["resources"])


def test_fault_control_dead_internal_links_are_flagged(fault_visits):
    problems = fault_visits["dead_links.html"].problems["links"]
    assert len(problems) == 2
    assert "'nowhere.html' -> no built file" in problems[0]
    assert "no anchor #no-such-anchor" in problems[1]


def test_fault_control_console_errors_are_flagged(fault_visits):
    problems = fault_visits["console_error.html"].problems["console"]
    assert any("planted" in p and p.startswith("console error") for p in problems)
    assert any("planted throw" in p and p.startswith("uncaught exception") for p in problems)


def test_fault_control_external_requests_are_flagged_and_refused(fault_visits):
    visit = fault_visits["external.html"]
    assert sorted(visit.record.external) == ["https://fonts.googleapis.com/css?family=Roboto",
                                             "https://unpkg.com/thebe@0.8.2/lib/index.js"]
    assert len(visit.problems["network"]) == 2


@pytest.mark.parametrize("name, expected", [
    ("chapter_no_goals.html", "no 'Learning goals' at the top"),
    ("chapter_late_goals.html", "'Learning goals' comes after the first section"),
    ("chapter_goals_no_list.html", "'Learning goals' is not followed by a list"),
    ("chapter_no_summary.html", "no 'Summary' section"),
    ("chapter_section_after_summary.html", "sections after the Summary other than Exercises: ['More derivations']"),
    ("chapter_no_equation.html", "no numbered equation"),
    ("chapter_unreferenced_equation.html", "no numbered equation is referenced from the prose"),
    ("chapter_no_exercise.html", "no exercise (sphinx-exercise)"),
    ("chapter_no_solution.html", "exercise #ex-1 has no solution"),
    ("chapter_solution_not_dropdown.html", "solution to #ex-1 is not a dropdown"),
])
def test_fault_control_chapter_structure_is_checked(fault_visits, fault_site, name, expected):
    server, _ = fault_site
    refs = equation_references(fault_visits, server.origin)
    assert booksite.chapter_problems(fault_visits["chapter_good.html"].chapter, refs) == []
    assert booksite.chapter_problems(fault_visits["chapter_numbered.html"].chapter, refs) == []
    assert booksite.chapter_problems(fault_visits[name].chapter, refs) == [expected]


def test_fault_control_an_uncited_equation_is_flagged(fault_visits, fault_site):
    server, _ = fault_site
    refs = equation_references(fault_visits, server.origin)
    facts = fault_visits["chapter_one_equation_uncited.html"].chapter
    assert facts["equations"] == ["equation-eq-s", "equation-eq-t"]
    assert booksite.chapter_problems(facts, refs) == []  # one equation is cited: the minimum holds
    assert booksite.unreferenced_equations(facts, refs) == ["equation-eq-t"]
    assert booksite.unreferenced_equations(fault_visits["chapter_good.html"].chapter, refs) == []


def test_fault_control_faults_are_flagged_opened_from_disk(browser, fault_site):
    # the book's file:// pass (judge_from_disk) must flag planted faults as the HTTP pass does
    _, folder = fault_site
    clean = judge_from_disk(browser, folder, "clean.html")
    assert clean == {check: [] for check in clean}
    raw_tex = judge_from_disk(browser, folder, "raw_tex.html")
    assert {check for check, problems in raw_tex.items() if problems} == {"math", "raw_tex"}
    image = judge_from_disk(browser, folder, "broken_image.html")
    assert image["images"] == ["image not loaded: missing.png"]
    assert any("missing.png" in f for f in image["resources"])
    fonts = judge_from_disk(browser, folder, "mathjax_font_missing.html")["fonts"]
    assert fonts[0] == "no MathJax font was loaded" and len(fonts) > 1
