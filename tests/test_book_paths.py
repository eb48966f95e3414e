"""No built file of the book shows a path of the machine that built it.

A path such as ``/home/someone/attention/src/attncourse/kit/exercises/_base.py`` in
a page (typically inside a traceback) tells the reader nothing and changes with every
build machine. Every text file of the build (``_build/html``, or ``$BOOK_HTML``; built
first if missing) is searched for the repository, build, Python environment, home and
temporary folders and for installed-package paths (``booksite.machine_paths``).
"""

import pytest

import booksite

pytestmark = pytest.mark.book  # reads the built book: the fast set is -m "not book"


@pytest.fixture(scope="module")
def html():
    return booksite.built_html()


def test_no_built_file_shows_a_build_machine_path(html):
    leaks = booksite.path_leaks_in_build(html)
    lines = [f"{rel}: {', '.join(sorted(set(found))[:5])}"
             for rel, found in leaks.items()]
    assert not leaks, (f"{len(leaks)} built file(s) show paths of the build machine:\n"
                       + "\n".join(lines))
