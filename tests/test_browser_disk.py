"""The search page of the built book opened from disk (``file://``) in headless
Chromium, as a reader with the folder and no network opens it: it must find "softmax".

tests/test_browser.py opens every page from disk and judges it; this is a file of its
own, with its own Chromium, so that pytest-xdist runs it beside that one. Without a
Chromium this test skips, except under CI (``CI=true``), where it fails.
"""

import pytest

import booksite
from booksite import search

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"


def test_search_finds_softmax_opened_from_disk():
    html = booksite.built_html()
    with booksite.chromium(booksite.LAYOUTS["laptop"]) as browser:
        url = (html / "search.html").as_uri() + "?q=softmax"
        hits, record = search(browser, url, html.as_uri() + "/")
    assert hits, "searching for 'softmax' from disk found nothing"
    assert all((html / h["raw"].split("#")[0]).is_file() for h in hits)
    assert record.external == [] and record.console == [] and record.failed == []
