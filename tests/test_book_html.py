"""The built HTML book read as files: complete, free of CDNs, and wired to the
repository once.

The book (``_build/html``, or ``$BOOK_HTML``) is built first if it is missing.
"""

import json
import pathlib
import re
import urllib.parse

import pytest
import yaml

import booksite

pytestmark = pytest.mark.book  # slow: the fast set is pytest -m "not book"

ROOT = booksite.ROOT
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


@pytest.fixture(scope="module")
def html():
    return booksite.built_html()


def toc_files(entry):
    """Every ``file:`` named in a _toc.yml structure, in order."""
    if isinstance(entry, dict):
        found = [entry["file"]] if "file" in entry else []
        for key in ("root", "parts", "chapters", "sections"):
            value = entry.get(key)
            if key == "root" and value:
                found.append(value)
            elif isinstance(value, list):
                for item in value:
                    found += toc_files(item)
        return found
    return []


def test_every_toc_entry_has_a_built_page(html):
    files = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    assert "book/intro" in files and "book/glossary" in files
    missing = [
        f
        for f in files
        if not (
            html / (pathlib.PurePosixPath(f).with_suffix("").as_posix() + ".html")
        ).is_file()
    ]
    assert not missing, (
        f"not in the build {html} (stale build? rebuild the book): {missing}"
    )


def offline_problems(html):
    """CDN host names and loads from other hosts, in every HTML page and every
    stylesheet."""
    problems = []
    for rel in booksite.book_pages(html):
        text = (html / rel).read_text(encoding="utf-8")
        problems += [f"{rel}: names the CDN {h}" for h in booksite.cdn_references(text)]
        problems += [f"{rel}: loads {r}" for r in booksite.external_resources(text)]
    for css in sorted(html.glob("_static/**/*.css")):
        problems += [
            f"{css.relative_to(html)}: loads {r}"
            for r in booksite.external_resources(
                css.read_text(encoding="utf-8", errors="replace"), css=True
            )
        ]
    return problems


def test_no_page_names_a_cdn_or_loads_from_another_host(html):
    problems = offline_problems(html)
    assert not problems, "\n".join(problems)


def test_repository_url_is_written_once():
    url = CONFIG["repository"]["url"]
    slug = urllib.parse.urlsplit(url).path.strip("/")
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", slug), url
    assert (ROOT / "_config.yml").read_text().count(slug) == 1
    sources = [ROOT / "_toc.yml", *sorted((ROOT / "book").glob("*.md"))]
    assert [p.name for p in sources if slug in p.read_text()] == []
    # a chapter carries it only in its setup cell, which tools/notebook_setup.py writes
    # from _config.yml (Colab cannot read _config.yml) and tests/test_notebooks.py
    # checks
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        elsewhere = [
            c.get("id")
            for c in cells
            if slug in "".join(c["source"]) and c.get("id") != "course-setup"
        ]
        assert elsewhere == [], (
            f"{path.name}: the address is written in cells {elsewhere}"
        )


def launch_problems(page_html, rel, config):
    """What a chapter page lacks of the download button and the launch links derived
    from ``config``."""
    hrefs = set(re.findall(r'href="([^"]+)"', page_html))
    repo = config["repository"]
    slug = urllib.parse.urlsplit(repo["url"]).path.strip("/")
    branch = repo.get("branch", "main")
    notebook = rel.removesuffix(".html") + ".ipynb"
    launch = config["launch_buttons"]
    expected = {
        "repository button": repo["url"],
        "Binder link": f"{launch['binderhub_url']}/v2/gh/{slug}/{branch}"
        f"?urlpath=lab/tree/{notebook}",
        # the Colab button opens the rendition tools/colab.py writes
        "Colab link": f"{launch['colab_url']}/github/{slug}/blob/{branch}/"
        f"{notebook.replace('chapters/', 'colab/', 1)}",
        "download button": "../" * rel.count("/") + f"_sources/{notebook}",
    }
    return [
        f"no {name} ({href})" for name, href in expected.items() if href not in hrefs
    ]


def test_chapter_pages_offer_download_and_launch(html):
    pages = booksite.chapter_pages(html)
    assert pages, "no chapter page was built"
    problems = []
    for rel in pages:
        problems += [
            f"{rel}: {p}"
            for p in launch_problems(
                (html / rel).read_text(encoding="utf-8"), rel, CONFIG
            )
        ]
        download = html / "_sources" / (rel.removesuffix(".html") + ".ipynb")
        source = ROOT / (rel.removesuffix(".html") + ".ipynb")
        if not download.is_file():
            problems.append(f"{rel}: the download {download.name} is missing")
        elif not source.is_file():
            problems.append(
                f"{rel}: no notebook {source.relative_to(ROOT)} in the repository "
                "(stale build?)"
            )
        elif [c["source"] for c in json.loads(download.read_text())["cells"]] != [
            c["source"] for c in json.loads(source.read_text())["cells"]
        ]:
            problems.append(
                f"{rel}: the download differs from {source.relative_to(ROOT)} "
                "(stale build?)"
            )
    assert not problems, "\n".join(problems)


def lesson_share():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "lesson_share", booksite.ROOT / "tools" / "lesson_share.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lesson_problems(page_html):
    """What breaks the presentation rule (book/intro.md, "How to read this book") on a
    chapter page, as tools/lesson_share.py measures it: more than 200 visible code
    lines, more than 20 % check paragraphs, an import cell in view."""
    counts = lesson_share().chapter_counts(page_html)
    share = 100 * counts["checking"] / max(counts["paragraphs"], 1)
    return [problem for problem, broken in [
        (f"{counts['code']} visible code lines", counts["code"] > 200),
        (f"{share:.1f} % check paragraphs", share > 20),
        ("the import cell in view", not counts["imports_folded"])] if broken]


def test_every_chapter_keeps_the_lesson_on_its_main_path(html):
    pages = sorted((html / "chapters").glob("*.html"))
    assert pages
    problems = {page.stem: lesson_problems(page.read_text(encoding="utf-8"))
                for page in pages}
    assert {page: found for page, found in problems.items() if found} == {}


def test_the_lesson_rule_sees_a_page_that_breaks_it():
    # fault control: code in view, check paragraphs, an unfolded import cell
    cell = '<div class="cell"><div class="cell_input"><pre>{}</pre></div></div>'
    words = "a paragraph of eight words or more about {}"
    page = ("<main>" + cell.format("import numpy") + cell.format("x = 1\n" * 201)
            + "".join(f"<p>{words.format('a planted fault')}</p>" for _ in range(3))
            + f"<p>{words.format('the idea')}</p></main>")
    assert lesson_problems(page) == ["202 visible code lines",
                                     "75.0 % check paragraphs",
                                     "the import cell in view"]
    folded = page.replace(cell.format("import numpy"),
                          f"<details>{cell.format('import numpy')}</details>")
    assert "the import cell in view" not in lesson_problems(folded)
