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
and the exit status is pytest's. A run that prints nothing for ``STALL`` seconds (a
kernel that hung at start-up) is killed and started once more; a second stall stops the
build.
"""

import argparse
import contextlib
import os
import pathlib
import selectors
import signal
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


#: Seconds without a byte of output after which the chapters' run counts as stalled.
#: Its progress marks come cell by cell, and the longest cell takes about 12 s. A kernel
#: was once seen to hang at start-up (its client blocked for good in ``kernel_info``);
#: the run is then killed and started once more.
STALL = 180


def descendants(pid, proc="/proc"):
    """The ids of every process below ``pid`` (Linux: read from /proc; else none)."""
    parents = {}
    for stat in pathlib.Path(proc).glob("[0-9]*/stat"):
        try:  # "pid (name) state ppid ...", and a name may hold ")"
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def run_watched(command, stall=None, **popen):
    """Run ``command``, passing its output on; its exit status, or None when it printed
    nothing for ``stall`` seconds (default STALL): then it is killed, with every process
    it started (the kernels too, which run in sessions of their own)."""
    stall = STALL if stall is None else stall
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # progress marks as they come
    process = subprocess.Popen(command, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env, **popen)
    watch = selectors.DefaultSelector()
    watch.register(process.stdout, selectors.EVENT_READ)
    last = time.monotonic()
    while True:
        if watch.select(timeout=1):
            data = os.read(process.stdout.fileno(), 65536)
            if not data:  # end of output
                break
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            last = time.monotonic()
        elif process.poll() is not None:  # exited; a kernel may still hold the pipe
            break
        elif time.monotonic() - last > stall:
            for pid in [*descendants(process.pid), process.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
            process.stdout.close()
            return None
    process.stdout.close()
    return process.wait()


def run_once_more_if_stalled(command, run=run_watched, **popen):
    """The exit status of ``run(command)``, run once more if it stalled (the chapters
    that passed are recorded by then: only the others execute again); exits when it
    stalls twice."""
    returncode = run(command, **popen)
    if returncode is None:
        print(f"\nno output from the chapters for {STALL} s: a kernel stalled? "
              "They run once more, each recorded one checked from its record",
              file=sys.stderr)
        command = [part for part in command if part != "--nbval-fresh"]
        returncode = run(command, **popen)
    if returncode is None:
        sys.exit(f"the chapters stalled twice ({STALL} s without output each): "
                 "the build stops")
    return returncode


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
    returncode = run_once_more_if_stalled(command, cwd=ROOT)
    if returncode != 0:
        print("a chapter failed under nbval: the build stops", file=sys.stderr)
        sys.exit(returncode)
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
