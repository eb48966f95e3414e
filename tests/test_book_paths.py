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


def test_machine_paths_cover_the_repository_and_the_environment(html):
    paths = booksite.machine_paths(html)
    assert str(booksite.ROOT) + "/" in paths and "/site-packages/" in paths
    assert "/" not in paths  # the root alone would match every URL


def test_no_built_file_shows_a_build_machine_path(html):
    leaks = booksite.path_leaks_in_build(html)
    lines = [f"{rel}: {', '.join(sorted(set(found))[:5])}"
             for rel, found in leaks.items()]
    assert not leaks, (f"{len(leaks)} built file(s) show paths of the build machine:\n"
                       + "\n".join(lines))


def test_fault_control_a_traceback_path_is_found(html, tmp_path):
    paths = booksite.machine_paths(html)
    source = booksite.ROOT / "src" / "attncourse" / "kit" / "exercises" / "_base.py"
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "leaky.html").write_text(
        f"<pre>File <span>{source}:50</span>, in <span>_call</span></pre>")
    (tmp_path / "chapters" / "installed.html").write_text(
        "<pre>/opt/py/lib/python3.12/site-packages/numpy/core/fromnumeric.py</pre>")
    (tmp_path / "clean.html").write_text(
        "<a href='../_static/x.js'>x</a> <a href='https://example.org/a/b'>b</a>"
        " <code>/usr/share/dict</code>")
    # not text: not searched
    (tmp_path / "picture.png").write_bytes(str(source).encode())
    found = booksite.path_leaks_in_build(tmp_path, paths)
    assert set(found) == {"chapters/leaky.html", "chapters/installed.html"}
    assert found["chapters/leaky.html"] == [f"{source}:50"]
