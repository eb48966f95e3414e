"""Every page of the built book opened from disk (``file://``) in headless Chromium.

A reader with the folder and no network opens the pages straight from disk. Each page
must pass the checks tests/test_browser.py makes over loopback HTTP (booksite.judge):
mathematics typeset with its fonts loaded, no raw TeX visible, every image loaded, no
console error, no request that left the machine, no local resource that failed. The
search page must find "softmax" from disk too. Planted faults opened from disk show that
the checks can fail.

This is a file of its own, with its own Chromium, so that pytest-xdist
(``--dist loadfile``) runs it beside tests/test_browser.py. Without a Chromium these
tests skip, except under CI (``CI=true``), where they fail.
"""

import pytest

import booksite
from booksite import assert_none, judge_from_disk, search

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium with a fresh profile (a playwright browser context)."""
    with booksite.chromium(booksite.LAYOUTS["laptop"]) as context:
        yield context


@pytest.fixture(scope="module")
def html():
    return booksite.built_html()


@pytest.fixture(scope="module")
def fault_folder(html, tmp_path_factory):
    return booksite.write_fault_pages(tmp_path_factory.mktemp("fault-pages"), html)


def test_every_page_works_opened_from_disk(browser, html):
    pages = booksite.book_pages(html)
    assert "index.html" in pages, pages
    assert any(p.startswith("chapters/") for p in pages), pages
    problems = []
    for rel in pages:
        checks = judge_from_disk(browser, html, rel)
        problems += [f"{rel} (file://): {p}"
                     for check in checks.values() for p in check]
    assert_none(problems)


def test_search_finds_softmax_opened_from_disk(browser, html):
    url = (html / "search.html").as_uri() + "?q=softmax"
    hits, record = search(browser, url, html.as_uri() + "/")
    assert hits, "searching for 'softmax' from disk found nothing"
    assert all((html / h["raw"].split("#")[0]).is_file() for h in hits)
    assert record.external == [] and record.console == [] and record.failed == []


def test_fault_control_faults_are_flagged_opened_from_disk(browser, fault_folder):
    # the file:// pass (judge_from_disk) must flag planted faults as the HTTP pass does
    folder = fault_folder
    clean = judge_from_disk(browser, folder, "clean.html")
    assert clean == {check: [] for check in clean}
    raw_tex = judge_from_disk(browser, folder, "raw_tex.html")
    flagged = {check for check, problems in raw_tex.items() if problems}
    assert flagged == {"math", "raw_tex"}
    image = judge_from_disk(browser, folder, "broken_image.html")
    assert image["images"] == ["image not loaded: missing.png"]
    assert any("missing.png" in f for f in image["resources"])
    fonts = judge_from_disk(browser, folder, "mathjax_font_missing.html")["fonts"]
    assert fonts[0] == "no MathJax font was loaded" and len(fonts) > 1
