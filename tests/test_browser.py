"""Every page of the built book, opened in headless Chromium with the network off.

The book (``_build/html``, or ``$BOOK_HTML``) is built first if it is missing. One
browser opens every page once, straight from disk (``file://``), as a reader with the
folder and no network opens it; every request that leaves the folder is recorded and
refused. For each page the tests assert: mathematics typeset by MathJax with its fonts
loaded locally and no raw TeX left visible, every image loaded, no console error, no
request that left the folder, every internal link leading to a built page and an
existing anchor. Each chapter page must have learning goals, a summary, referenced
numbered equations, and exercises whose solutions open as dropdowns. Every page must fit
a 1280 px window and a 390 px phone (the criteria are written above ``layouts`` below),
measured in the same tab, resized. One screenshot per page (a JPEG of its first screen,
or of the whole page with ``BOOK_SCREENSHOTS=full``) is written to
``_build/screenshots/``. Served from a loopback HTTP server, as it is published, the
search page finds "softmax" and MathJax's accessibility tools load (their speech-rule
data is fetched, which a page opened from disk may not do); tests/test_browser_disk.py
searches from disk.

Without a Chromium these tests skip, except under CI (``CI=true``), where they fail.
"""

import dataclasses
import urllib.parse

import pytest

import booksite
from booksite import Record, assert_none, judge, open_page, search

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
    unfolds the solutions: run it last."""
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


def test_search_finds_softmax(browser, site, html, screenshots):
    hits, record = search(browser, site.url("search.html") + "?q=softmax",
                          site.origin + "/", screenshots / SEARCH_SHOT)
    assert hits, "searching for 'softmax' found nothing"
    assert booksite.link_problems(hits, site.origin, html) == []
    assert any("searchindex.js" in r for r in record.local), (
        "the search index was not loaded from the book")
    assert record.external == [] and record.console == [] and record.failed == []


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
