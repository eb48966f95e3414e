"""What a reader sees of each chapter: ``python tools/lesson_share.py [_build/html]``.

For every chapter page of the built book (or the one page given), counts

- **visible code lines**: lines of code-cell input a reader sees without opening a fold
  (inputs inside a collapsed ``<details>`` — myst-nb's ``hide-input``/``hide-cell``, a
  dropdown — or a folded solution are folded, as are removed cells); code quoted in
  the prose and the package's source a cell displays (``kit.source``) count too;
- **prose paragraphs** outside folds, and among them those **about checking** (a
  paragraph that mentions a check, a fault, a witness, a planted mistake, finite
  differences, an assertion, a tolerance or a conformance test);
- whether the **import cell** (the first code cell) is folded.

Prints one row per chapter; ``--max-code N`` and ``--max-check PERCENT`` exit 1 when a
chapter is above either. The course's presentation rule (book/intro.md, "How to read
this book") asks for at most 200 visible code lines and at most 20 % check paragraphs.
"""

import argparse
import pathlib
import re
import sys

from bs4 import BeautifulSoup

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKING = re.compile(
    r"\b(check(s|ed|er|ers|ing)?|fault(s|y)?|witness(es)?|planted|plant(s|ing)?|"
    r"finite[- ]difference(s)?|assert(s|ed|ion|ions)?|tolerance(s)?|conformance|"
    r"caught|catch(es)?)\b", re.I)


def folded(tag):
    """Is ``tag`` inside a fold a reader must open: a closed ``<details>``, or a
    dropdown admonition (a solution, which sphinx-exercise folds with a toggle)?"""
    return any((p.name == "details" and not p.has_attr("open"))
               or "dropdown" in (p.get("class") or []) for p in tag.parents)


def chapter_counts(html):
    soup = BeautifulSoup(html, "html.parser")
    main = soup.find("main") or soup
    inputs = main.select("div.cell_input")
    code = sum(len(i.get_text().strip("\n").splitlines())
               for i in inputs if not folded(i))
    # code quoted in the prose, and the package's source a cell displays (kit.source)
    quoted = sum(len(b.get_text().strip("\n").splitlines())
                 for b in main.select("div.highlight")
                 if (not b.find_parent("div", class_="cell")
                     or (b.find_parent("div", class_="cell_output")
                         and "highlight-python" in (b.parent.get("class") or [])))
                 and not folded(b))
    paragraphs = [p.get_text(" ", strip=True) for p in main.find_all("p")
                  if not folded(p) and not p.find_parent("div", class_="cell_output")
                  and not p.find_parent("div", class_="solution")]
    paragraphs = [p for p in paragraphs if len(p.split()) >= 8]
    checking = sum(bool(CHECKING.search(p)) for p in paragraphs)
    return {"code": code + quoted, "paragraphs": len(paragraphs),
            "checking": checking,
            "imports_folded": bool(inputs) and folded(inputs[0])}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", nargs="?", default=ROOT / "_build" / "html",
                        type=pathlib.Path)
    parser.add_argument("--max-code", type=int)
    parser.add_argument("--max-check", type=float)
    args = parser.parse_args(argv)
    # the whole book, or one page built alone (jupyter-book build chapters/NN.ipynb)
    pages = ([args.html] if args.html.is_file()
             else sorted((args.html / "chapters").glob("*.html")))
    if not pages:
        parser.error(f"no chapter pages under {args.html}/chapters: build the book")
    over = False
    print(f"{'chapter':36} {'code':>5} {'paras':>6} {'check':>6} {'share':>6}  imports")
    for page in pages:
        c = chapter_counts(page.read_text(encoding="utf-8"))
        share = 100 * c["checking"] / c["paragraphs"] if c["paragraphs"] else 0.0
        print(f"{page.stem:36} {c['code']:5} {c['paragraphs']:6} {c['checking']:6} "
              f"{share:5.1f} %  {'folded' if c['imports_folded'] else 'shown'}")
        over |= args.max_code is not None and c["code"] > args.max_code
        over |= args.max_check is not None and share > args.max_check
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
