"""Execute the chapters into the notebook cache, in parallel, with jupyter-cache.

    .venv/bin/python tools/execute.py [--fresh]

``./course book`` runs this, then ``jupyter-book build``, which takes the outputs from
the cache (``execute_notebooks: cache``) and itself executes a chapter that failed here
(once more: it then stops the build). The test command checks a cached chapter instead
of executing it again (the root ``conftest.py``). jupyter-cache matches a chapter by its
code alone, so the cache is cleared when ``environment_key`` (what else the outputs
depend on) has changed, or with ``--fresh``.
"""

import argparse
import functools
import hashlib
import importlib.metadata
import logging
import os
import pathlib
import platform
import sys
import sysconfig

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
for _name in SETTINGS:  # one BLAS thread per process (see the root conftest.py)
    os.environ.setdefault(_name, "1")
os.environ.setdefault("ATTNCOURSE_MODELS", str(ROOT / "_build" / "models"))
# jupyter-book's default cache for this book (the tests point it elsewhere)
CACHE = pathlib.Path(os.environ.get("ATTNCOURSE_JUPYTER_CACHE",
                                    ROOT / "_build" / ".jupyter_cache"))
SOURCES = ("src/attncourse", "benchmarks/results", "pyproject.toml")
# seconds a cell may run, as in the book's own execution
TIMEOUT = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]


@functools.cache
def environment_key():
    """SHA-256 of the sources, the installed distributions, Python and the settings."""
    digest = hashlib.sha256()
    files = [p for name in SOURCES for p in [ROOT / name, *(ROOT / name).rglob("*")]
             if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(files):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    where = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {f"{d.metadata['Name']}=={d.version}"  # this environment's own
                 for d in importlib.metadata.distributions(path=where)}
    digest.update("\n".join([*sorted(installed), sys.version, platform.platform(),
                             *(f"{n}={os.environ.get(n)}" for n in SETTINGS)]).encode())
    return digest.hexdigest()


def is_current():
    """Whether the cache was filled under the current environment key."""
    key = CACHE / "environment.sha256"
    return key.is_file() and key.read_text() == environment_key()


def main():
    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="clear the cache first")
    cache = get_cache(str(CACHE))
    if parser.parse_args().fresh or not is_current():
        cache.clear_cache()
        (cache.path / "environment.sha256").write_text(environment_key())
    for record in cache.list_project_records():  # a chapter renamed or removed
        if not pathlib.Path(record.uri).is_file():
            cache.remove_nb_from_project(record.uri)
    for path in sorted((ROOT / "chapters").glob("*.ipynb"), reverse=True):
        cache.add_nb_to_project(str(path))  # the later, longer chapters first
    logging.basicConfig(format="%(message)s")
    logger = logging.getLogger("execute")
    logger.setLevel(logging.INFO)  # the pool then reports each chapter's start and end
    executor = load_executor("local-parallel", cache, logger)  # a process per core
    result = executor.run_and_cache(timeout=TIMEOUT)
    for uri in result.excepted + result.errored:
        print(f"{uri} failed: the book's build executes it once more", file=sys.stderr)


if __name__ == "__main__":
    main()
