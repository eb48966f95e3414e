"""Execute every chapter of the book, several at once, into the build's notebook cache.

    .venv/bin/python tools/execute.py

The README's build command runs this first: the chapters are executed in parallel (one
process per core, by jupyter-cache's ``local-parallel`` executor), always afresh, and
the executed notebooks are stored in ``_build/.jupyter_cache``. ``jupyter-book build``
then reads them from there (``execute_notebooks: cache`` in ``_config.yml``) instead of
executing the chapters one after another. A notebook whose code changed after this ran
is executed by the build itself, so the book never shows stale outputs of an edited
chapter.

A chapter that fails stops the build: its traceback is printed and the exit status is 1.
No cell may raise: an unfinished exercise's checker prints one line instead of raising.
"""

import argparse
import os
import pathlib
import sys
import time

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # one BLAS thread per kernel, as in the tests

from jupyter_cache import get_cache  # noqa: E402
from jupyter_cache.executors import load_executor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from toc import toc_notebooks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"  # jupyter-book's default for this book


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args()
    notebooks = toc_notebooks(ROOT)
    cache = get_cache(str(CACHE))
    cache.clear_cache()  # every run executes afresh
    for path in notebooks:
        cache.add_nb_to_project(str(path))
    executor = load_executor("local-parallel", cache=cache)
    start = time.perf_counter()
    result = executor.run_and_cache(
        timeout=args.timeout, allow_errors=False, force=True
    )
    print(
        f"executed {len(result.succeeded)} of {len(notebooks)} notebooks in "
        f"{time.perf_counter() - start:.0f} s, {os.cpu_count()} at a time"
    )
    if result.errored or result.excepted or len(result.succeeded) != len(notebooks):
        for record in cache.list_project_records():
            if record.traceback:
                print(f"\n{record.uri} failed:\n{record.traceback}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
