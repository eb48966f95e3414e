"""The package's two layers: the core (the mathematics) never imports the kit (what
checks it), and ``import attncourse`` loads the core alone."""

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "src" / "attncourse"
KIT = "attncourse.kit"


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source, name, is_package):
    """Every module an ``import`` or ``from … import`` in ``source`` names, relative
    imports resolved against the module ``name``."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append(target)
            found += [f"{target}.{alias.name}" for alias in node.names]
    return found


def kit_imports(path):
    name = module_name(path)
    found = imported_modules(path.read_text(), name, path.stem == "__init__")
    return [m for m in found if m == KIT or m.startswith(KIT + ".")]


CORE = sorted(
    p for p in PACKAGE.rglob("*.py") if "kit" not in p.relative_to(PACKAGE).parts
)


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_never_imports_the_kit(path):
    assert kit_imports(path) == []


@pytest.mark.parametrize("source", [
    "from ..kit import conformance",
    "from ..kit.conformance import FAST",
    "def f():\n    from ..kit import exercises",
    "import attncourse.kit.faults",
    "from attncourse import kit",
])
def test_a_kit_import_in_the_core_is_found(source):
    planted = PACKAGE / "layers" / "planted.py"  # named as a core module, never written
    found = [m for m in imported_modules(source, module_name(planted), False)
             if m.startswith("attncourse.kit")]
    assert found


def test_the_kit_imports_the_core():
    kit = sorted((PACKAGE / "kit").rglob("*.py"))
    core = [
        m
        for p in kit
        for m in imported_modules(p.read_text(), module_name(p), p.stem == "__init__")
        if m.startswith("attncourse.") and not m.startswith("attncourse.kit")
    ]
    assert kit and core


CORE_MODULES = 26  # the modules `import attncourse` loads (stated in the package map)


def test_import_attncourse_loads_the_core_alone():
    code = (
        "import sys, attncourse; print(' '.join(sorted(m for m in sys.modules "
        "if m.startswith(('attncourse', 'sympy', 'matplotlib')))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], check=True,
                            capture_output=True, text=True).stdout.split()
    assert [m for m in loaded if not m.startswith("attncourse")] == []
    assert [m for m in loaded if m.startswith("attncourse.kit")] == []
    assert len(loaded) == CORE_MODULES, loaded


CHAPTERS = sorted((PACKAGE.parents[1] / "chapters").glob("*.ipynb"))


def private_imports(source):
    """The ``attncourse`` modules and names a cell's source imports that are private (a
    part of the dotted path, or the name, starts with ``_``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an IPython magic: no import of the package there
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "attncourse"):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_")]
            found += [node.module] * any(p.startswith("_")
                                         for p in node.module.split("."))
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("attncourse")
                      and any(p.startswith("_") for p in a.name.split("."))]
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapters_import_public_names_only(chapter):
    import json

    cells = json.loads(chapter.read_text())["cells"]
    found = [m for c in cells if c["cell_type"] == "code"
             for m in private_imports("".join(c["source"]))]
    assert found == []


@pytest.mark.parametrize("source", [
    "from attncourse.kit.faults._registry import table",
    "from attncourse.kit.exercises import _base",
    "import attncourse._validate",
    "from attncourse.layers.head import _as_inputs",
])
def test_a_private_import_in_a_chapter_is_found(source):
    assert private_imports(source)
