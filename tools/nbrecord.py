"""Records of the chapters' nbval runs: each chapter runs once, not once per command.

Both README commands need every chapter executed: the build to show its outputs, the
tests to run it under nbval. A chapter executed under nbval whose every cell passed is
recorded in ``_build/nbval/<chapter>.json``: its executed notebook and a key, the
SHA-256 of everything the run depended on (see ``chapter_key``). Another run whose key
is the same takes the record instead of executing the chapter again (the root
``conftest.py`` does this; ``pytest --nbval-fresh`` executes every chapter regardless),
and ``tools/execute.py`` hands the recorded notebooks to ``jupyter-book build``. Any
change to the chapter, the package, the environment or the test settings changes the
key, so a stale record is never used.
"""

import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import platform
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
# where the records are kept (the tests point it elsewhere)
RECORDS = pathlib.Path(os.environ.get("ATTNCOURSE_NBVAL_RECORDS",
                                      ROOT / "_build" / "nbval"))
CHAPTERS = ROOT / "chapters"

# What a chapter's run depends on besides the notebook itself and the environment:
# the package, the benchmark results Chapter 9 reads, and the test settings.
SOURCES = ("src/attncourse", "benchmarks/results", "conftest.py", "pyproject.toml",
           "tools/nbrecord.py")
SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def is_chapter(path):
    """Whether ``path`` is one of the book's chapter notebooks."""
    path = pathlib.Path(path).resolve()
    return path.suffix == ".ipynb" and path.parent == CHAPTERS


def _files(name):
    base = ROOT / name
    if base.is_file():
        return [base]
    return sorted(p for p in base.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


@functools.cache
def environment_digest():
    """SHA-256 of the sources, the installed distributions, Python and the settings."""
    digest = hashlib.sha256()
    for name in SOURCES:
        for path in _files(name):
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    # the environment's own distributions, whatever else is on sys.path (pytest puts
    # src/, with the editable install's egg-info, there while collecting its doctests)
    where = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = sorted({f"{dist.metadata.get('Name')}=={dist.version}"
                        for dist in importlib.metadata.distributions(path=where)})
    digest.update("\n".join(installed).encode())
    digest.update(f"{sys.version}\n{platform.platform()}\n".encode())
    for name in SETTINGS:
        digest.update(f"{name}={os.environ.get(name)}\n".encode())
    return digest.hexdigest()


def chapter_key(path):
    """The key of a run of the chapter at ``path``: its bytes and the environment."""
    digest = hashlib.sha256(environment_digest().encode())
    digest.update(pathlib.Path(path).read_bytes())
    return digest.hexdigest()


def record_path(path):
    return RECORDS / (pathlib.Path(path).stem + ".json")


def fresh_record(path):
    """The record of the chapter at ``path`` if its key is current, else None."""
    try:
        record = json.loads(record_path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != chapter_key(path):
        return None
    return record


def write_record(path, executed, seconds):
    """Record a passing nbval run of the chapter at ``path`` (its executed JSON)."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    target = record_path(path)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({
        "key": chapter_key(path),
        "seconds": round(seconds, 1),
        "executed": executed,
    }))
    partial.replace(target)  # atomic: a reader sees the old record or the new one
