"""The built book opened from disk (``file://``) in headless Chromium: search, and the
checks' fault controls.

A reader with the folder and no network opens the pages straight from disk.
tests/test_browser.py opens every page that way and judges it (booksite.judge:
mathematics typeset with its fonts loaded, no raw TeX visible, every image loaded, no
console error, no request that left the folder, no local resource that failed, every
internal link and anchor resolving). Here the search page must find "softmax" from disk,
and planted faults opened from disk show that those checks can fail there.

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
    links = judge_from_disk(browser, folder, "dead_links.html")["links"]
    assert len(links) == 2, links
    assert "'nowhere.html' -> no built file" in links[0]
    assert "no anchor #no-such-anchor" in links[1]
    console = judge_from_disk(browser, folder, "console_error.html")["console"]
    assert any("planted throw" in p and p.startswith("uncaught exception")
               for p in console)
    network = judge_from_disk(browser, folder, "external.html")["network"]
    assert len(network) == 2 and any("unpkg.com" in p for p in network), network


def test_fault_control_a_path_from_the_root_fails_only_from_disk(browser, fault_folder):
    # Why every page is judged from disk: served from the folder's root, an image at
    # "/dot.png" loads; opened from disk, the same page looks for it at the root of the
    # file system and fails.
    (fault_folder / "root_path.html").write_text(
        booksite.synthetic("<img src='/dot.png' alt='dot'>"))
    with booksite.LoopbackServer(fault_folder) as server:
        page, record, facts = booksite.open_page(browser, server.url("root_path.html"),
                                                 server.origin + "/")
        page.close()
    served = booksite.judge(record, facts, server.origin, fault_folder)
    assert served == {check: [] for check in served}
    from_disk = judge_from_disk(browser, fault_folder, "root_path.html")
    assert from_disk["images"] == ["image not loaded: /dot.png"], from_disk
