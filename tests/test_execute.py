"""tools/execute.py: a chapters' run that stalls is killed, its kernels too, and run
once more; a run that prints is left alone, whatever its length."""

import os
import pathlib
import signal
import sys
import textwrap
import time

import pytest

import execute

# Stand-ins for pytest's processes: the run starts a worker, which starts a kernel in a
# session of its own (as jupyter_client does), writes the kernel's id and its own to a
# file and prints once. The kernel ignores SIGTERM: only SIGKILL ends it. The worker's
# name holds a ")", as a process name may, to test how /proc is read.
KERNEL = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "time.sleep(60)")
WORKER = textwrap.dedent(f"""
    import os, subprocess, sys, time
    kernel = subprocess.Popen([sys.executable, "-c", {KERNEL!r}],
                              start_new_session=True)
    open(sys.argv[1], "w").write("%d %d" % (kernel.pid, os.getpid()))
    print("kernel started", flush=True)
    if sys.argv[2] == "stall":
        time.sleep(60)
""")
RUN = textwrap.dedent(f"""
    import subprocess, sys
    subprocess.run([sys.argv[1], "-c", {WORKER!r}, *sys.argv[2:]])
""")


def alive(pid):
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone_soon(pid, seconds=5):
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


needs_proc = pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(),
                                reason="reads processes from /proc (Linux)")


@pytest.fixture
def run(tmp_path):
    """``run(mode)``: the command of a run whose worker sleeps after the kernel starts
    (``"stall"``) or exits at once (``"exit"``), and the kernel's id once it runs. Kills
    a kernel that a test left."""
    worker = tmp_path / "worker (1)"
    worker.symlink_to(sys.executable)
    pid_file = tmp_path / "kernel.pid"

    def command(mode):
        return [sys.executable, "-c", RUN, str(worker), str(pid_file), mode]

    yield command, lambda: int(pid_file.read_text().split()[0])
    for pid in pid_file.read_text().split() if pid_file.exists() else []:
        if alive(int(pid)):  # the kernel, and the worker of the fault control
            os.kill(int(pid), signal.SIGKILL)


@needs_proc
def test_a_silent_run_is_killed_with_the_kernels_it_started(run, capfd):
    command, kernel = run
    start = time.monotonic()
    assert execute.run_watched(command("stall"), stall=1) is None
    assert time.monotonic() - start < 10
    assert gone_soon(kernel())
    assert "kernel started" in capfd.readouterr().out  # passed on before the stall


@needs_proc
def test_fault_control_without_its_descendants_the_kernel_survives(run, monkeypatch):
    # the check above sees a kernel that is left running: kill only the run itself
    command, kernel = run
    monkeypatch.setattr(execute, "descendants", lambda pid: [])
    assert execute.run_watched(command("stall"), stall=1) is None
    assert not gone_soon(kernel(), seconds=1)


@needs_proc
def test_a_kernel_left_holding_the_pipe_does_not_hold_the_run(run):
    command, kernel = run
    start = time.monotonic()
    assert execute.run_watched(command("exit"), stall=30) == 0
    assert time.monotonic() - start < 10
    assert alive(kernel())  # still holding the pipe: not waited for


def test_descendants_reads_every_generation_and_skips_what_it_cannot_read(tmp_path):
    # 10 -> 11 -> 12, and 20 -> 21; the name of 11 holds ") S 99"; 13, 14 and 15 ended
    # while /proc was read (their stat is a folder here)
    stats = {10: "10 (pytest) S 1", 11: "11 (a) S 99) S 10", 12: "12 (kernel) S 11",
             20: "20 (other) S 1", 21: "21 (x) S 20"}
    for pid, line in stats.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(line + " 0 0 0\n")
    for pid in (13, 14, 15):
        (tmp_path / str(pid) / "stat").mkdir(parents=True)
    assert sorted(execute.descendants(10, proc=tmp_path)) == [11, 12]
    assert execute.descendants(12, proc=tmp_path) == []


def test_a_run_that_prints_is_not_stalled_and_keeps_its_status(capfd, monkeypatch):
    # 4.8 s in all, longer than the stall, but never 2 s without output; the prints are
    # not flushed: the run must ask for unbuffered output to see them as they come
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    code = ("import sys, time\n"
            "for i in range(4):\n"
            "    print('cell', i); time.sleep(1.2)\n"
            "sys.exit(3)")
    assert execute.run_watched([sys.executable, "-c", code], stall=2) == 3
    assert capfd.readouterr().out.split("\n")[:4] == [f"cell {i}" for i in range(4)]


def test_a_stalled_run_runs_once_more_and_a_second_stall_stops_the_build(capsys):
    calls = []

    def run(outcomes):
        def fake(command, **popen):
            calls.append(command)
            return outcomes[len(calls) - 1]
        return fake

    command = ["pytest", "--nbval-fresh", "chapters/x.ipynb"]
    assert execute.run_once_more_if_stalled(command, run=run([None, 0])) == 0
    # the second run checks the chapters recorded by the first from their records
    assert calls == [command, ["pytest", "chapters/x.ipynb"]]
    assert "a kernel stalled?" in capsys.readouterr().err
    calls.clear()
    assert execute.run_once_more_if_stalled(command, run=run([1])) == 1
    assert len(calls) == 1  # a failure is not a stall: no second run
    calls.clear()
    with pytest.raises(SystemExit, match="stalled twice"):
        execute.run_once_more_if_stalled(command, run=run([None, None]))
    assert len(calls) == 2


def test_the_readme_states_the_stall_limit_the_tool_uses():
    readme = " ".join((pathlib.Path(execute.ROOT) / "README.md").read_text().split())
    assert f"prints nothing for {execute.STALL} s" in readme
