"""Write the Colab rendition of every chapter of _toc.yml: colab/NN_x.ipynb.

Colab renders Markdown and $-math, not MyST. A rendition keeps the chapter's code
cells (source, id, metadata; outputs empty; a folded cell also gets Colab's
``cellView: form``) and rewrites its Markdown: labelled equations as $$ with
\\tag{N.k}, references as the numbers and titles the book prints, exercises as
headings, solutions, hints and dropdowns as <details>, links to the published book.
MyST left over is an error (MystLeft).

    .venv/bin/python tools/colab.py            # write colab/*.ipynb
    .venv/bin/python tools/colab.py --check    # exit 1 if a rendition is stale
"""

import json
import posixpath
import re
import sys
import textwrap
import urllib.parse
from pathlib import Path

import yaml
from pybtex.database import parse_file
from pybtex.richtext import Text
from sphinx.util.nodes import _make_id

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
SLUG = urllib.parse.urlsplit(REPOSITORY["url"]).path.strip("/")
BRANCH = REPOSITORY.get("branch", "main")
BOOK = "https://{}.github.io/{}".format(*SLUG.split("/"))
COLAB = f"https://colab.research.google.com/github/{SLUG}/blob/{BRANCH}/colab"
FOLDED = {"hide-input", "hide-cell", "remove-cell", "remove-input"}
FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(\{[\w:-]+\})?\s*(.*)$")
OPTION = re.compile(r"^\s*:([\w-]+):\s*(.*)$")
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)\s]+)\)")
TARGET = re.compile(r"^\((\S+)\)=[ \t]*$", re.M)
DOLLAR = re.compile(r"\$\$(.+?)\$\$[ \t]*\(([\w:-]+)\)", re.S)  # labelled $$ math
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention",
               "danger", "error", "seealso", "admonition"}
MYST = re.compile(r"^\s*[`:]{3,}\s*\{|\{[\w:-]+\}`|^\s*:[\w-]+:|^\(\S+\)=\s*$|<!--",
                  re.M)
# A command that runs what only a clone has: its virtual environment or its scripts.
CLONE_ONLY = re.compile(r"\.venv/bin/\w+|\./course\b|\b(?:python3?|pytest|bash|sh)\s+"
                        r"(?:-\S+\s+)*(?:\.\./)?(?:benchmarks|tools|tests|\.ci)/\S+")
START, END = "<!-- solution -->", "<!-- end -->"
SOLUTION_CODE = "The solution's code is the next cell, folded: *Show code* opens it."


class MystLeft(ValueError):
    """A MyST construct the rendition cannot express."""


def chapters():
    """(number, path) of the numbered chapters of _toc.yml, numbered as in the book."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p["chapters"] for p in toc["parts"] if p.get("numbered")]
    files = [c["file"] for part in parts for c in part]
    return [(n, ROOT / f"{f}.ipynb") for n, f in enumerate(files, 1)]


def parse(text):
    """Markdown as blocks: ("text", s), ("code", s), ("dir", name, arg, opts, body)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if not (m := FENCE.match(lines[i])):
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1] + "\n" + lines[i])
            else:
                out.append(("text", lines[i]))
            i += 1
            continue
        close = re.compile(rf"^\s*{re.escape(m[1][0])}{{{len(m[1])},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            raise MystLeft(f"unclosed fence {lines[i].strip()!r}")
        if m[2] is None:
            out.append(("code", "\n".join(lines[i:end + 1])))
        else:
            body, opts = textwrap.dedent("\n".join(lines[i + 1:end])).split("\n"), {}
            while body and (option := OPTION.match(body[0])):
                opts[option[1]] = option[2].strip()
                body.pop(0)
            out.append(("dir", m[2][1:-1], m[3].strip(), opts, "\n".join(body).strip()))
        i = end + 1
    return out


def caption(cell):
    """The myst-nb figure metadata of a code cell that the book numbers."""
    figure = cell["metadata"].get("mystnb", {}).get("figure", {})
    shown = cell["cell_type"] == "code" and "remove-cell" not in cell["metadata"].get(
        "tags", [])
    return figure if shown and figure.get("caption") else {}


def number(chapter, path, labels):
    """Add one chapter's equations, figures, exercises and section targets to labels."""
    counts, pending = {"eq": 0, "fig": 0, "ex": 0, "sec": 0}, []

    def walk(text):
        for block in parse(text):
            for m in DOLLAR.finditer(block[1]) if block[0] == "text" else ():
                counts["eq"] += 1
                labels[m[2]] = (f"{chapter}.{counts['eq']}", "")
            for line in block[1].split("\n") if block[0] == "text" else ():
                if m := TARGET.match(line):
                    pending.append(m[1])
                elif m := re.match(r"(#+)\s+(.*)", line):
                    counts["sec"] += len(m[1]) == 2
                    labels.update({k: (f"Section {chapter}.{counts['sec']}", m[2])
                                   for k in pending})
                    pending.clear()
            if block[0] == "dir":
                kind = {"math": "eq", "exercise": "ex", "exercise-start": "ex"}
                kind, opts = kind.get(block[1]), block[3]
                numbered = "label" in opts or kind == "ex"
                if kind and numbered and "nonumber" not in opts:
                    counts[kind] += 1
                    name = "Exercise " if kind == "ex" else ""
                    labels[opts.get("label")] = (f"{name}{chapter}.{counts[kind]}",
                                                 block[2])
                walk(block[4])

    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            walk("".join(cell["source"]))
        elif figure := caption(cell):
            counts["fig"] += 1
            labels[figure.get("name")] = (f"Fig. {chapter}.{counts['fig']}",
                                          figure["caption"])


def link(target):
    """A chapter's relative link, pointed at the Colab rendition, the book or GitHub."""
    path, _, anchor = target.partition("#")
    if path.endswith(".ipynb") and "/" not in path:
        return f"{COLAB}/{path}"
    if path.startswith("../book/") and path.endswith(".md"):
        return f"{BOOK}/book/{path[8:-3]}.html" + (f"#{anchor}" if anchor else "")
    return f"https://github.com/{SLUG}/blob/{BRANCH}/" + posixpath.normpath(
        f"chapters/{path}")


class Renderer:
    """Plain Markdown from MyST, with the labels of every chapter of the book."""

    def __init__(self):
        self.labels, self.chapter, self.exercises = {}, 0, 0
        for chapter, path in chapters():
            number(chapter, path, self.labels)
        self.bib = parse_file(str(ROOT / "book" / "references.bib")).entries
        glossary = [b for b in parse((ROOT / "book" / "glossary.md").read_text())
                    if b[0] == "dir" and b[1] == "glossary"]
        self.terms = {t.lower(): t for b in glossary
                      for t in re.findall(r"^(\S.*)$", b[4], re.M)}

    def ref(self, label):
        if label not in self.labels:
            raise MystLeft(f"unknown label {label!r}")
        return self.labels[label]

    def cite(self, keys, textual):
        cited = []
        for key in (k.strip() for k in keys.split(",")):
            if key not in self.bib:
                raise MystLeft(f"unknown citation {key!r}")
            names = [Text.from_latex(" ".join(p.last_names)).render_as("text")
                     for p in self.bib[key].persons["author"]]
            who = " and ".join(names) if len(names) < 3 else f"{names[0]} *et al.*"
            cited.append((who, self.bib[key].fields["year"]))
        if textual:
            return "; ".join(f"{who} [{year}]" for who, year in sorted(cited))
        return "[" + ", ".join(f"{who}, {year}" for who, year in sorted(cited)) + "]"

    def role(self, m):
        name, content = m[1], m[2]
        text, target = (re.fullmatch(r"(.*?)\s*<([^<>]+)>", content, re.S)
                        or re.match(r"()(.*)", content, re.S)).groups()
        if name == "eq":
            return f"({self.ref(target)[0]})"
        if name == "numref":
            num = self.ref(target)[0]
            return text.replace("%s", num.split()[-1]) if text else num
        if name == "ref":
            return text or self.ref(target)[1]
        if name == "term":
            if (term := self.terms.get(target.lower())) is None:
                raise MystLeft(f"{{term}} {target!r} is not in book/glossary.md")
            anchor = _make_id(f"term-{term}")
            return f"[{text or target}]({BOOK}/book/glossary.html#{anchor})"
        if name in ("cite", "cite:p", "cite:t"):
            return self.cite(target, name == "cite:t")
        if name == "math":
            return f"${content}$"
        raise MystLeft(f"role {{{name}}}")

    def text(self, text):
        text = DOLLAR.sub(lambda m: f"$${m[1]} \\tag{{{self.ref(m[2])[0]}}}$$",
                          TARGET.sub("", text))
        text = ROLE.sub(self.role, text)
        return LINK.sub(lambda m: f"]({link(m[1])})", text)

    def markdown(self, text):
        out = [block[1] if block[0] == "code" else
               self.text(block[1]) if block[0] == "text" else self.directive(*block[1:])
               for block in parse(text)]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")

    def directive(self, name, arg, opts, body):
        inner = self.markdown(body)
        if name == "math":
            top = re.sub(r"\\begin\{(\w+)\}.*?\\end\{\1\}", "", inner, flags=re.S)
            if "\\\\" in top:
                inner = f"\\begin{{aligned}}\n{inner}\n\\end{{aligned}}"
            tag = f" \\tag{{{self.ref(opts['label'])[0]}}}" if "label" in opts else ""
            return f"$$\n{inner}{tag}\n$$"
        if name in ("exercise", "exercise-start"):
            self.exercises += "nonumber" not in opts
            num = "" if "nonumber" in opts else f" {self.chapter}.{self.exercises}"
            title = f" — {self.text(arg)}" if arg else ""
            return f"### Exercise{num}{title}\n\n{inner}"
        if name in ("solution", "solution-start", "dropdown") or name in ADMONITIONS:
            summary = {"solution": "Solution", "solution-start": "Solution",
                       "dropdown": self.text(arg) or "Details",
                       "admonition": self.text(arg)}.get(name, name.capitalize())
            if name not in ADMONITIONS or name == "hint" or "dropdown" in opts.get(
                    "class", ""):
                tag = "<details open>" if "open" in opts else "<details>"
                tail = START if name == "solution-start" else "</details>"
                return f"{tag}<summary>{summary}</summary>\n\n{inner}\n\n{tail}"
            return "\n".join(f"> {line}".rstrip()
                             for line in f"**{summary}.** {inner}".split("\n"))
        if name in ("solution-end", "exercise-end"):
            return END if name == "solution-end" else ""
        raise MystLeft(f"directive {{{name}}}")


def close_details(text):
    """Close a solution-start's <details>; fold a solution's text before its end."""
    before, end, after = text.partition(END)
    if end and START in before:
        before += "\n\n</details>"
    elif end and before.strip():
        before = f"<details><summary>Solution</summary>\n\n{before}\n\n</details>"
    text = (before + after).replace(START, "").strip("\n")
    text += "\n\n</details>" * (len(re.findall("<details[ >]", text))
                                - text.count("</details>"))
    return re.sub(r"\n{3,}", "\n\n", text)


def render(path, renderer=None):
    """The rendition of one chapter notebook, as a notebook dict."""
    renderer, nb, in_solution = renderer or Renderer(), json.loads(path.read_text()), 0
    renderer.chapter = dict((p.name, n) for n, p in chapters()).get(path.name, 0)
    renderer.exercises = 0
    book = f"{BOOK}/chapters/{path.stem}.html"
    cells = [{"cell_type": "markdown", "id": "colab-edition", "metadata": {}, "source":
              f"*The Colab edition of [Chapter {renderer.chapter}]({book}) of the "
              "book: equations, figures and exercises carry the book's numbers. Run "
              "the cells in order; the first code cell installs the course package.*"}]
    for cell, after in zip(nb["cells"], nb["cells"][1:] + [{"cell_type": None}]):
        cell, where = dict(cell), f"{path.name}, cell {cell.get('id')}"
        if cell["cell_type"] == "markdown":
            try:
                md = renderer.markdown("".join(cell["source"]))
            except MystLeft as error:
                raise MystLeft(f"{where}: {error}") from None
            in_solution = (in_solution or START in md) and END not in md
            if START in md and in_solution and after["cell_type"] == "code":
                md += "\n\n" + SOLUTION_CODE
            cell["source"] = close_details(md)
            if m := MYST.search(cell["source"]):
                raise MystLeft(f"{where}: MyST left: {m[0]!r}")
            if not cell["source"].strip():
                continue
        elif cell["cell_type"] == "code":
            meta = cell["metadata"]
            folded = FOLDED & set(meta.get("tags", [])) or in_solution or meta.get(
                "jupyter", {}).get("source_hidden")
            cell.update(outputs=[], execution_count=None,
                        metadata={**meta, "cellView": "form"} if folded else meta)
        cells.append(cell)
        if figure := caption(cell):
            num, text = renderer.ref(figure.get("name"))
            cells.append({"cell_type": "markdown", "id": f"{cell['id']}-caption",
                          "metadata": {}, "source": f"**{num}.** {text}"})
    return {**nb, "cells": cells}


def clone_only(nb):
    """(cell id, text) of each cell that tells its reader to run what a clone has."""
    return [(c.get("id"), m[0]) for c in nb["cells"] if c.get("id") != "course-setup"
            for m in CLONE_ONLY.finditer("".join(c["source"]))]


def dumps(nb):
    for cell in nb["cells"]:
        if isinstance(cell["source"], str):
            cell["source"] = cell["source"].splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv):
    renderer, stale = Renderer(), []
    for _, path in chapters():
        target, nb = ROOT / "colab" / path.name, render(path, renderer)
        for cell, found in clone_only(nb):
            print(f"{path.name}, cell {cell}: runs {found!r}, which only a clone has",
                  file=sys.stderr)
        if "--check" not in argv:
            target.parent.mkdir(exist_ok=True)
            target.write_text(dumps(nb))
        elif not (target.exists() and target.read_text() == dumps(nb)):
            stale.append(target.name)
    if stale:
        print(f"stale: {', '.join(stale)}; run .venv/bin/python tools/colab.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
