"""A signal to a script's ``plexus.launch`` (Ctrl-C reaches every process of the job; a
scheduler's SIGTERM reaches the launcher) ends it with one line and the shell's status for the
signal, 128 + its number (issue 56, item 5), not a page of the elastic agent's traceback nor one
per worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import REPO

SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import plexus

    def body(grid, ready):
        Path(ready, f"rank{grid.rank}").write_text("up")
        time.sleep(120)

    if __name__ == "__main__":
        plexus.launch(body, sys.argv[1], grid="2x1x1")
""")


@pytest.mark.slow  # a two-rank world in a child process
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signalled_launch_is_one_line(tmp_path, sig, group):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    ready = tmp_path / "ready"
    ready.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(ready)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(list(ready.iterdir())) < 2 and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(list(ready.iterdir())) == 2, proc.communicate(timeout=60)
        if group:  # Ctrl-C: the terminal signals the whole process group
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line for line in err.splitlines() if "Warning" not in line
             and not line.startswith("  ")]
    assert proc.returncode == 128 + sig, err[-3000:]
    assert lines == [f"plexus: stopped by {sig.name}: the job's 2 workers were stopped with it"], \
        err[-3000:]
    assert "Traceback" not in err


def test_a_signal_that_surfaces_as_another_error_is_still_the_signal():
    """A SIGINT landing inside torch's metrics wrapper before its start time is set surfaced as
    an UnboundLocalError raised while handling the SignalException (a traceback instead of the
    one line, 1 run of the suite's ~1,000 launches)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from plexus.runtime.local import signal_of

    def wrapper():
        try:
            raise SignalException("Process 1 got signal: 2", sigval=signal.SIGINT)
        except SignalException:
            raise UnboundLocalError("cannot access local variable 'start'") from None

    with pytest.raises(UnboundLocalError) as raised:
        wrapper()
    assert signal_of(raised.value) == 2
    assert signal_of(SignalException("x", sigval=signal.SIGTERM)) == 15
    assert signal_of(RuntimeError("a worker failed")) is None
