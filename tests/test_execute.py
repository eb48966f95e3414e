"""tools/execute.py: a chapters' run that stalls is killed, its kernels too, and run
once more; a run that prints is left alone, whatever its length."""

import os
import pathlib
import sys
import textwrap
import time

import pytest

import execute

# A stand-in for a kernel: a process in a session of its own (as jupyter_client starts
# kernels) that writes its id to a file and sleeps, holding the run's output pipe.
KERNEL = textwrap.dedent("""
    import subprocess, sys
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    open(sys.argv[1], "w").write(str(kernel.pid))
    print("kernel started", flush=True)
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


def kernel_pid(path):
    return int(path.read_text())


@pytest.fixture
def stalls(tmp_path):
    """A command that starts a kernel, prints once and then sleeps; yields (command,
    the file holding the kernel's id) and kills the kernel if a test left it."""
    pid_file = tmp_path / "kernel.pid"
    code = KERNEL + "import time; time.sleep(60)"
    command = [sys.executable, "-c", code, str(pid_file)]
    yield command, pid_file
    if pid_file.exists() and alive(kernel_pid(pid_file)):
        os.kill(kernel_pid(pid_file), 9)


needs_proc = pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(),
                                reason="reads processes from /proc (Linux)")


@needs_proc
def test_a_silent_run_is_killed_with_the_kernels_it_started(stalls, capfd):
    command, pid_file = stalls
    start = time.monotonic()
    assert execute.run_watched(command, stall=1) is None
    assert time.monotonic() - start < 10
    assert gone_soon(kernel_pid(pid_file))
    assert "kernel started" in capfd.readouterr().out  # passed on before the stall


@needs_proc
def test_fault_control_without_its_descendants_the_kernel_survives(
        stalls, monkeypatch):
    # the check above sees a kernel that is left running: kill only the run itself
    command, pid_file = stalls
    monkeypatch.setattr(execute, "descendants", lambda pid: [])
    assert execute.run_watched(command, stall=1) is None
    assert not gone_soon(kernel_pid(pid_file), seconds=1)


def test_a_run_that_prints_is_not_stalled_and_keeps_its_status(capfd):
    # 2.5 s in all, longer than the stall, but never 1.5 s without output
    code = ("import sys, time\n"
            "for i in range(5):\n"
            "    print('cell', i, flush=True); time.sleep(0.5)\n"
            "sys.exit(3)")
    assert execute.run_watched([sys.executable, "-c", code], stall=1.5) == 3
    assert capfd.readouterr().out.split("\n")[:5] == [f"cell {i}" for i in range(5)]


@needs_proc
def test_a_kernel_left_holding_the_pipe_does_not_hold_the_run(stalls):
    command, pid_file = stalls
    command = [*command[:2], KERNEL, *command[3:]]  # exits at once, its kernel lives
    start = time.monotonic()
    assert execute.run_watched(command, stall=30) == 0
    assert time.monotonic() - start < 10
    assert alive(kernel_pid(pid_file))  # still holding the pipe: not waited for


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
