"""Execute every chapter under nbval, in parallel, and hand the outputs to the build.

    .venv/bin/python tools/execute.py [--fresh]

The README's build command runs this first. The chapters run under nbval exactly as the
test command runs them (pytest, the root ``conftest.py`` and its exercise rule, one
process per core), and each passing chapter is recorded with its executed notebook
(tools/nbrecord.py). A chapter whose record has the current key (nothing it depends on
has changed) is not executed again, here or in the test command; ``--fresh`` executes
every chapter regardless. The executed notebooks are then stored in the notebook cache
``_build/.jupyter_cache``, from which ``jupyter-book build`` takes their outputs
(``execute_notebooks: cache`` in ``_config.yml``); a chapter edited after this ran is
executed by the build itself, so the book never shows stale outputs.

A chapter that fails stops the build: nbval's report names the cell and its traceback,
and the exit status is pytest's.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import time

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # as the root conftest.py sets them (in the key)

import nbformat  # noqa: E402
from jupyter_cache import get_cache  # noqa: E402
from jupyter_cache.base import CacheBundleIn  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from nbrecord import fresh_record  # noqa: E402
from toc import toc_notebooks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"  # jupyter-book's default for this book


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true",
                        help="execute every chapter, even one with a current record")
    args = parser.parse_args()
    notebooks = toc_notebooks(ROOT)
    start = time.perf_counter()
    # Later chapters run longer (they train and time models), so they start first and
    # the short early ones fill the gaps at the end; --no-loadscope-reorder keeps this
    # order (pytest-xdist would otherwise start the chapters with the most cells first).
    command = [sys.executable, "-m", "pytest", "-n", "auto", "--dist", "loadfile",
               "--no-loadscope-reorder", "-q", "-p", "no:cacheprovider",
               *(["--nbval-fresh"] if args.fresh else []),
               *(str(path.relative_to(ROOT)) for path in reversed(notebooks))]
    done = subprocess.run(command, cwd=ROOT)
    if done.returncode != 0:
        print("a chapter failed under nbval: the build stops", file=sys.stderr)
        sys.exit(done.returncode)
    cache = get_cache(str(CACHE))
    cache.clear_cache()  # only the outputs of this run
    records = {path: fresh_record(path) for path in notebooks}
    for path, record in records.items():
        if record is None:
            sys.exit(f"{path.relative_to(ROOT)} passed but left no current record")
        executed = nbformat.reads(record["executed"], as_version=4)
        cache.cache_notebook_bundle(CacheBundleIn(executed, str(path)),
                                    check_validity=False, overwrite=True)
    seconds = sum(record["seconds"] for record in records.values())
    print(f"{len(notebooks)} chapters passed under nbval in "
          f"{time.perf_counter() - start:.0f} s ({os.cpu_count()} cores; "
          f"{seconds:.0f} s of execution recorded), and are in "
          f"{CACHE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
