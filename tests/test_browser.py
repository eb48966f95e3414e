"""Every page of the built book, opened in headless Chromium with the network off.

The book (``_build/html``, or ``$BOOK_HTML``) is built first if it is missing. Every
page is opened straight from disk (``file://``), as a reader with the folder and no
network opens it; every request that leaves the folder is recorded and refused. From
disk is the stricter setting: a path from the site's root (``/_static/...``), which a
server at the site's root answers, fails there (test_browser_disk.py shows it). For each
page the tests assert: mathematics typeset by MathJax with its fonts loaded locally and
no raw TeX left visible, every image loaded, no console error, no request that left the
folder, every internal link leading to a built page and an existing anchor. Each chapter
page must have learning goals, a summary, referenced numbered equations, and exercises
whose solutions open as dropdowns. Every page must fit a 1280 px window and a 390 px
phone (the criteria are written above ``layouts`` below). One screenshot per page (a
JPEG of its first screen, or of the whole page with ``BOOK_SCREENSHOTS=full``) is
written to ``_build/screenshots/``. The book served from a loopback HTTP server, as it
is published, is tested too: the front page and a chapter pass the same checks, the
search page finds "softmax", and MathJax's accessibility tools load. Planted faults show
that each check can fail, served (here) and from disk (tests/test_browser_disk.py, with
the search from disk: a file of its own, so that pytest-xdist runs it beside this one).

Without a Chromium these tests skip, except under CI (``CI=true``), where they fail.
"""

import dataclasses
import urllib.parse

import pytest

import booksite
from booksite import FAULT_PAGES, Record, assert_none, judge, open_page, search

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"

VIEWPORT = booksite.LAYOUTS["laptop"]  # pages are judged and measured at this size


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium with a fresh profile (a playwright browser context)."""
    with booksite.chromium(VIEWPORT) as context:
        yield context


SEARCH_SHOT = "search__softmax-results" + booksite.SCREENSHOT_SUFFIX


def screenshot_name(relpath):
    return relpath.replace("/", "__").removesuffix(".html") + booksite.SCREENSHOT_SUFFIX


def jpeg_size(data):
    """(width, height) from the frame header of the JPEG ``data``; None for no JPEG.

    >>> jpeg_size(bytes.fromhex("ffd8ffe000044a46ffc0000b08034d050001011100ffd9"))
    (1280, 845)
    >>> jpeg_size(b"\\x89PNG\\r\\n\\x1a\\n") is None
    True
    """
    if data[:3] != b"\xff\xd8\xff":
        return None
    at = 2
    while at + 9 <= len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte before a marker
            at += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a frame
            height = int.from_bytes(data[at + 5:at + 7], "big")
            return int.from_bytes(data[at + 7:at + 9], "big"), height
        at += 2 + int.from_bytes(data[at + 2:at + 4], "big")
    return None


@dataclasses.dataclass
class Visit:
    problems: dict
    facts: dict
    record: Record
    chapter: dict = None
    layouts: dict = None  # LAYOUT_FACTS_JS by layout name (see measure_layouts)


@pytest.fixture(scope="module")
def html():
    return booksite.built_html()


@pytest.fixture(scope="module")
def site(html):
    """The book served over loopback HTTP, as it is published."""
    with booksite.LoopbackServer(html) as server:
        yield server


@pytest.fixture(scope="module")
def disk(html):
    """The book opened from disk, as a reader with the folder reads it."""
    return booksite.DiskSite(html)


@pytest.fixture(scope="module")
def screenshots(html):
    folder = html.parent / "screenshots"
    folder.mkdir(exist_ok=True)
    for old in [*folder.glob("*.png"), *folder.glob("*.jpg")]:
        old.unlink()
    return folder


def measure_layouts(page):
    """LAYOUT_FACTS_JS of a tab opened at VIEWPORT, measured at that size and then, the
    same tab resized, at each other size of booksite.LAYOUTS; by layout name. Measuring
    unfolds the solutions: run it last. test_one_tab_measures_what_a_fresh_window_does
    checks that a tab opened at a size measures the same facts."""
    result = {}
    first_laptop = sorted(booksite.LAYOUTS.items(), key=lambda kv: kv[1] != VIEWPORT)
    for layout, viewport in first_laptop:
        if page.viewport_size != viewport:
            page.set_viewport_size(viewport)
        result[layout] = page.evaluate(booksite.LAYOUT_FACTS_JS)
    return result


@pytest.fixture(scope="module")
def visits(browser, disk, html, screenshots):
    """Open every built page once from disk: judge it, screenshot it, read chapter
    facts, then measure its layout at every size (last: measuring unfolds the
    solutions)."""
    result = {}
    for rel in booksite.book_pages(html):
        page, record, facts = open_page(browser, disk.url(rel), disk.origin + "/",
                                        (html / rel).read_text())
        try:
            booksite.take_screenshot(page, screenshots / screenshot_name(rel))
            chapter = (page.evaluate(booksite.CHAPTER_FACTS_JS, rel)
                       if rel.startswith("chapters/") else None)
            layouts = measure_layouts(page)
        finally:
            page.close()
        problems = judge(record, facts, disk.origin, html)
        result[rel] = Visit(problems, facts, record, chapter, layouts)
    return result


def report(visits, check):
    """One line per problem of ``check``, prefixed with its page; empty when every page
    passes."""
    return [f"{page}: {p}" for page, visit in visits.items()
            for p in visit.problems[check]]


def test_the_book_has_its_pages(visits):
    pages = set(visits)
    assert {"index.html", "search.html", "book/intro.html", "book/notation.html",
            "book/glossary.html", "book/references.html"} <= pages
    assert any(p.startswith("chapters/") for p in pages), "no chapter page was built"


def test_mathematics_is_typeset(visits):
    assert visits["book/notation.html"].facts["mathElements"] > 0, (
        "the notation page should hold math")
    assert_none(report(visits, "math"))


def test_no_raw_tex_is_visible(visits):
    assert_none(report(visits, "raw_tex"))


def test_fonts_load_from_the_book(visits):
    assert_none(report(visits, "fonts"))
    fonts = [r for v in visits.values() for r in v.record.local
             if r.endswith((".woff", ".woff2"))]
    assert any("/_static/mathjax/" in f for f in fonts), (
        "MathJax fonts were never fetched from _static")


def test_every_image_loads(visits):
    assert any(v.facts["images"] for v in visits.values()), (
        "no page has an image: the check saw nothing")
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
        size = jpeg_size(shot.read_bytes())
        assert size is not None, f"{shot} is not a JPEG"
        assert size[0] == VIEWPORT["width"], (shot, size)
        if not booksite.FULL_SCREENSHOTS:
            assert size[1] == VIEWPORT["height"], (shot, size)
    shots = [*screenshots.glob("*.png"), *screenshots.glob("*.jpg")]
    expected = {screenshot_name(p) for p in visits} | {SEARCH_SHOT}
    stray = {p.name for p in shots} - expected
    assert not stray, f"screenshots of no built page: {sorted(stray)}"


def test_a_screenshot_shows_the_first_screen_or_the_whole_page(browser, tmp_path):
    page = browser.new_page()
    try:
        page.set_content(
            "<body style='margin: 0'><div style='height: 3000px'>tall</div></body>")
        for full_page, height in ((False, VIEWPORT["height"]), (True, 3000)):
            shot = tmp_path / f"full-{full_page}{booksite.SCREENSHOT_SUFFIX}"
            booksite.take_screenshot(page, shot, full_page=full_page)
            assert jpeg_size(shot.read_bytes()) == (VIEWPORT["width"], height), (
                full_page)
    finally:
        page.close()


def equation_references(visits, origin):
    """(page, anchor) of every numbered equation that prose somewhere in the book links
    to."""
    refs = set()
    for visit in visits.values():
        for link in visit.facts["links"]:
            path = booksite.site_path(link["href"], origin)
            fragment = urllib.parse.unquote(
                urllib.parse.urlsplit(link["href"]).fragment)
            if (not link["headerlink"] and path is not None
                    and fragment.startswith("equation-")):
                refs.add((path, fragment))
    return refs


def test_chapter_pages_have_goals_summary_equations_and_exercises(visits, disk):
    refs = equation_references(visits, disk.origin)
    problems = [f"{page}: {p}" for page, visit in visits.items() if visit.chapter
                for p in booksite.chapter_problems(visit.chapter, refs)]
    assert_none(problems)


def test_every_numbered_equation_is_referenced_from_the_prose(visits, disk):
    # An equation gets a number so that the prose can point to it; a number nobody cites
    # is noise.
    refs = equation_references(visits, disk.origin)
    problems = [f"{page}: numbered equation #{a} is never referenced from the prose"
                for page, visit in visits.items() if visit.chapter
                for a in booksite.unreferenced_equations(visit.chapter, refs)]
    assert_none(problems)


# -------------------------------------------------------------------- pages that fit
# Criteria (booksite.layout_problems), measured on every page at 1280x800 and at 390x844
# with every solution and <details> unfolded:
# - at both widths the page itself is never wider than the window, and nothing is cut
#   off (a box whose content does not fit scrolls; it never hides the rest);
# - at 1280 px no display equation, code block, cell output, table or image is wider
#   than its box or the text column: nothing scrolls sideways (long equations are split,
#   code lines are short);
# - at 390 px cell outputs and images still fit (outputs wrap), while a code block, a
#   display equation or a table may scroll sideways inside its own frame within the
#   column: re-wrapping code or mathematics to a phone's 40-odd characters would make it
#   harder, not easier, to read.

@pytest.fixture(scope="module")
def layouts(visits):
    """LAYOUT_FACTS_JS of every page at each of booksite.LAYOUTS, by (layout, page),
    measured during the visits (measure_layouts: one tab, resized from VIEWPORT)."""
    return {(layout, rel): facts for rel, visit in visits.items()
            for layout, facts in visit.layouts.items()}


def layout_report(layouts, layout):
    return [f"{rel} at {booksite.LAYOUTS[layout]['width']} px: {p}"
            for (name, rel), facts in layouts.items()
            if name == layout for p in booksite.layout_problems(facts, layout)]


def test_layouts_measured_what_they_should(layouts):
    kinds = {b["kind"] for (layout, rel), facts in layouts.items()
             for b in facts["boxes"]}
    assert {"equation", "code", "output", "table", "image"} <= kinds, kinds
    for (layout, rel), facts in layouts.items():
        assert facts["viewport"] == booksite.LAYOUTS[layout]["width"], (
            layout, rel, facts["viewport"])


def test_pages_fit_a_laptop_window(layouts):
    assert_none(layout_report(layouts, "laptop"))


def test_pages_fit_a_phone(layouts):
    assert_none(layout_report(layouts, "phone"))


PLANT_WIDE_CONTENT_JS = r"""
async () => {
  const article = document.querySelector('article.bd-article');
  const plant = html => {
    const d = document.createElement('div'); d.innerHTML = html; article.appendChild(d);
    return d;
  };
  plant('<div class="highlight"><pre id="planted-code">x = ' + '1 + '.repeat(40) +
        '1</pre></div>');
  plant('<div class="highlight">'
        + '<pre id="planted-clipped" style="overflow-x: hidden">y = '
        + '2 + '.repeat(40) + '2</pre></div>');
  plant('<div class="cell_output"><div class="output stream highlight-myst-ansi">'
        + '<div class="highlight">'
        + '<pre id="planted-output" style="white-space: pre">' + 'word '.repeat(60)
        + '</pre></div></div></div>');
  plant('<div class="pst-scrollable-table-container"><table id="planted-table"><tr>'
        + '<td>a_table_cell</td>'.repeat(40) + '</tr></table></div>');
  plant('<p id="planted-word">' + 'unbreakable'.repeat(5) + '</p>');
  const math = plant(
    '<div class="math notranslate nohighlight" id="planted-equation">\\['
    + 'a_1 + '.repeat(50) + 'a_2\\]</div>');
  await MathJax.typesetPromise([math]);
  return math.querySelectorAll('mjx-container[display="true"]').length;  // typeset: 1
}
"""
PLANTED = {"laptop": {"planted-code", "planted-clipped", "planted-output",
                      "planted-table", "planted-equation"},
           # on a phone code, equations and tables may scroll in their own frame; a
           # clipped block, an output that does not wrap and a word that pushes the page
           # may not
           "phone": {"planted-clipped", "planted-output", "planted-word"}}


@pytest.fixture(scope="module")
def fresh_windows(browser, disk, html):
    """The first chapter opened in a tab of each size of booksite.LAYOUTS, by layout:
    the page, LAYOUT_FACTS_JS, what PLANT_WIDE_CONTENT_JS returned, LAYOUT_FACTS_JS
    again."""
    rel = booksite.chapter_pages(html)[0]
    result = {}
    for layout, viewport in booksite.LAYOUTS.items():
        page, _, _ = open_page(browser, disk.url(rel), disk.origin + "/",
                               viewport=viewport)
        try:
            before = page.evaluate(booksite.LAYOUT_FACTS_JS)
            typeset = page.evaluate(PLANT_WIDE_CONTENT_JS)
            after = page.evaluate(booksite.LAYOUT_FACTS_JS)
        finally:
            page.close()
        result[layout] = rel, before, typeset, after
    return result


@pytest.mark.parametrize("layout", sorted(booksite.LAYOUTS))
def test_fault_control_wide_content_is_flagged(fresh_windows, layout):
    _, before, typeset, after = fresh_windows[layout]
    assert typeset == 1, "the planted equation was not typeset"
    before = booksite.layout_problems(before, layout)
    after = booksite.layout_problems(after, layout)
    new = [p for p in after if p not in before]
    flagged = {name for name in PLANTED["laptop"] | PLANTED["phone"]
               if any(name in p for p in new)}
    assert flagged == PLANTED[layout], "\n".join(new)


@pytest.mark.parametrize("layout", sorted(booksite.LAYOUTS))
def test_one_tab_measures_what_a_fresh_window_does(layouts, fresh_windows, layout):
    # The visits measure every size in the tab that opened the page at VIEWPORT, after
    # its screenshot and chapter facts, resizing it for the phone (measure_layouts); a
    # tab opened at the size itself must measure the very same facts, box by box.
    rel, fresh, _, _ = fresh_windows[layout]
    width = booksite.LAYOUTS[layout]["width"]
    assert layouts[layout, rel] == fresh, f"{rel} at {width} px"



def test_pages_served_over_http_pass_every_check(browser, site, html, visits):
    # The pages opened from disk above are the stricter test; served as published, the
    # front page (a redirect) and a chapter must pass the same checks, links included.
    served = {}
    for rel in ("index.html", booksite.chapter_pages(html)[0]):
        page, record, facts = open_page(browser, site.url(rel), site.origin + "/",
                                        (html / rel).read_text())
        page.close()
        served[rel] = judge(record, facts, site.origin, html)
        assert facts["links"] and visits[rel].facts["links"], rel
        assert len(facts["links"]) == len(visits[rel].facts["links"]), rel
    assert_none([f"{rel} (http): {p}" for rel, checks in served.items()
                 for problems in checks.values() for p in problems])


def test_search_finds_softmax(browser, site, html, screenshots):
    hits, record = search(browser, site.url("search.html") + "?q=softmax",
                          site.origin + "/", screenshots / SEARCH_SHOT)
    assert hits, "searching for 'softmax' found nothing"
    assert booksite.link_problems(hits, site.origin, html) == []
    assert any("searchindex.js" in r for r in record.local), (
        "the search index was not loaded from the book")
    assert record.external == [] and record.console == [] and record.failed == []


def test_search_check_sees_a_word_the_book_lacks(browser, site):
    # fault control: the same check reports no hits for a word that appears on no page
    hits, _ = search(browser, site.url("search.html") + "?q=zqxjvw", site.origin + "/")
    assert hits == []


def test_mathjax_accessibility_tools_load_from_the_book(browser, site, html):
    # A reader may switch on MathJax's explorer and collapsible maths from its menu;
    # MathJax then loads more components and speech-rule data, which must come from
    # _static, never a CDN.
    page, record, _ = open_page(browser, site.url("book/glossary.html"),
                                site.origin + "/")
    try:
        settings = page.evaluate("""() => {
            const pool = MathJax.startup.document.menu.menu.pool;
            for (const name of ['explorer', 'collapsible'])
              pool.lookup(name).setValue(true);
            return ['explorer', 'collapsible']
              .map(name => pool.lookup(name).getValue());
        }""")
        wanted = ("/_static/mathjax/a11y/explorer.js", "/_static/mathjax/sre/mathmaps/")
        # MathJax loads the components and speech-rule data in the background
        for _ in range(75):
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


# -------------------------------------------------------------------- fault controls
# Small synthetic pages with planted faults (booksite.FAULT_PAGES), served like the
# book, must be flagged by the same functions; a clean page must pass.

@pytest.fixture(scope="module")
def fault_site(html, tmp_path_factory):
    folder = booksite.write_fault_pages(tmp_path_factory.mktemp("fault-pages"), html)
    with booksite.LoopbackServer(folder) as server:
        yield server, folder


@pytest.fixture(scope="module")
def fault_visits(browser, fault_site):
    server, folder = fault_site
    result = {}
    for name in FAULT_PAGES:
        page, record, facts = open_page(browser, server.url(name), server.origin + "/")
        try:
            chapter = (page.evaluate(booksite.CHAPTER_FACTS_JS, name)
                       if name.startswith("chapter_") else None)
        finally:
            page.close()
        result[name] = Visit(judge(record, facts, server.origin, folder), facts, record,
                             chapter)
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
    # the 404 shows there too
    assert visit.problems["resources"] and visit.problems["console"]


def test_fault_control_missing_mathjax_fonts_are_flagged(fault_visits):
    visit = fault_visits["mathjax_font_missing.html"]
    assert visit.facts["mathjax"] == "ready" and visit.facts["mjxContainers"] == 1
    assert visit.problems["math"] == []  # typeset, but in no font
    fonts = visit.problems["fonts"]
    assert fonts[0] == "no MathJax font was loaded"
    assert fonts[1:] and all(p.startswith("font failed to load: MJX")
                             for p in fonts[1:]), fonts
    assert any("/_static/mathjax/no-such-fonts/" in f
               for f in visit.problems["resources"])


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
    assert any("planted throw" in p and p.startswith("uncaught exception")
               for p in problems)


def test_fault_control_external_requests_are_flagged_and_refused(fault_visits):
    visit = fault_visits["external.html"]
    assert sorted(visit.record.external) == [
        "https://fonts.googleapis.com/css?family=Roboto",
        "https://unpkg.com/thebe@0.8.2/lib/index.js"]
    assert len(visit.problems["network"]) == 2


@pytest.mark.parametrize("name, expected", [
    ("chapter_no_goals.html", "no 'Learning goals' at the top"),
    ("chapter_late_goals.html", "'Learning goals' comes after the first section"),
    ("chapter_goals_no_list.html", "'Learning goals' is not followed by a list"),
    ("chapter_no_summary.html", "no 'Summary' section"),
    ("chapter_section_after_summary.html",
     "sections after the Summary other than Exercises: ['More derivations']"),
    ("chapter_no_equation.html", "no numbered equation"),
    ("chapter_unreferenced_equation.html",
     "no numbered equation is referenced from the prose"),
    ("chapter_no_exercise.html", "no exercise (sphinx-exercise)"),
    ("chapter_no_solution.html", "exercise #ex-1 has no solution"),
    ("chapter_solution_not_dropdown.html", "solution to #ex-1 is not a dropdown"),
])
def test_fault_control_chapter_structure_is_checked(fault_visits, fault_site, name,
                                                    expected):
    server, _ = fault_site
    refs = equation_references(fault_visits, server.origin)
    assert booksite.chapter_problems(fault_visits["chapter_good.html"].chapter,
                                     refs) == []
    assert booksite.chapter_problems(fault_visits["chapter_numbered.html"].chapter,
                                     refs) == []
    assert booksite.chapter_problems(fault_visits[name].chapter, refs) == [expected]


def test_fault_control_an_uncited_equation_is_flagged(fault_visits, fault_site):
    server, _ = fault_site
    refs = equation_references(fault_visits, server.origin)
    facts = fault_visits["chapter_one_equation_uncited.html"].chapter
    assert facts["equations"] == ["equation-eq-s", "equation-eq-t"]
    # one equation is cited: the minimum holds
    assert booksite.chapter_problems(facts, refs) == []
    assert booksite.unreferenced_equations(facts, refs) == ["equation-eq-t"]
    assert booksite.unreferenced_equations(fault_visits["chapter_good.html"].chapter,
                                           refs) == []
