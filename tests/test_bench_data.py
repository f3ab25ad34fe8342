"""scripts/bench_data.py's memory watcher: the peaks of a process's anonymous and file-backed RSS, read from
/proc/PID/status, follow memory the process allocates."""
import subprocess
import sys
import threading
import time

import pytest

from scripts.bench_data import _watch_rss_parts


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/status is Linux's")
def test_rss_parts_see_an_allocation_and_stop_at_exit():
    # a child that holds 200 MB of touched anonymous memory for a moment, then exits
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytes([1]) * (200 * 2**20); time.sleep(1.0)"])
    peaks, stop = {}, threading.Event()
    watcher = threading.Thread(target=_watch_rss_parts, args=(child.pid, peaks, stop, 0.01))
    watcher.start()
    child.wait()
    time.sleep(0.1)
    stop.set()
    watcher.join(timeout=5)
    assert not watcher.is_alive()
    assert peaks["RssAnon"] >= 200  # MB: every page of the bytes was written
    assert 0 < peaks["RssFile"] < peaks["RssAnon"]  # the interpreter's mapped files, well under the allocation
    assert peaks["VmHWM"] >= peaks["RssAnon"]  # the peak of the whole RSS
    assert set(peaks) == {"VmHWM", "RssAnon", "RssFile", "RssShmem"}
