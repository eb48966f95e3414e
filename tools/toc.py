"""The chapter notebooks ``_toc.yml`` lists: shared by the scripts in ``tools/``."""

import pathlib

import yaml


def toc_notebooks(root):
    """The notebooks ``root/_toc.yml`` lists, in order (pages that are not notebooks
    skipped)."""
    root = pathlib.Path(root)
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load((root / "_toc.yml").read_text()))
    paths = [root / f"{name}.ipynb" for name in found]
    return [path for path in paths if path.is_file()]
