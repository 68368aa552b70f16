"""The test harness itself: a test stopped midway leaves no rank running."""

import os
import signal
import subprocess

import pytest
from harness import launch


class _Stopped(Exception):
    pass


def test_launch_stopped_midway_leaves_no_rank():
    # what pytest-timeout does to a test at its limit: an exception from
    # SIGALRM while launch waits for the ranks
    marker = f"orphan_probe_{os.getpid()}"

    def stop(signum, frame):
        raise _Stopped

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(3)
    try:
        with pytest.raises(_Stopped):
            launch(f"import time; {marker} = 1; time.sleep(120)", 2, timeout=60)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert not left, f"ranks {left} outlived the stopped test"
