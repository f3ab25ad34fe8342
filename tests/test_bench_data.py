"""scripts/bench_data.py's memory watcher: the peaks of a process's anonymous and file-backed RSS, read from
/proc/PID/status, follow memory the process allocates, and its timeline pairs the RSS with the newest output line."""
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/status is Linux's")
def test_rss_timeline_shows_the_allocation_after_the_line_before_it():
    code = "import time; print('before', flush=True); time.sleep(0.6); b = bytes([1]) * (200 * 2**20); time.sleep(0.6)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    peaks, stop, timeline, last = {}, threading.Event(), [], [""]
    watcher = threading.Thread(target=_watch_rss_parts, args=(child.pid, peaks, stop, 0.01, timeline, last, 0.1))
    watcher.start()
    last[0] = child.stdout.readline().strip()
    child.wait()
    stop.set()
    watcher.join(timeout=5)
    assert [len(row) for row in timeline] == [5] * len(timeline) and len(timeline) >= 8
    seconds, rss = [row[0] for row in timeline], [row[1] for row in timeline]
    assert seconds == sorted(seconds) and max(rss) - min(rss) >= 190  # MB: the allocation shows up in the timeline
    assert timeline[-1][4] == "before" and max(rss) == max(r[1] for r in timeline if r[4] == "before")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/status is Linux's")
def test_watcher_returns_on_a_zombie_without_empty_rows():
    # an exited child that nobody has reaped yet still has /proc/PID/status, with no memory lines
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    status = f"/proc/{child.pid}/status"
    deadline = time.monotonic() + 30
    while "State:\tZ" not in open(status).read():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    peaks, stop, timeline = {}, threading.Event(), []
    watcher = threading.Thread(target=_watch_rss_parts, args=(child.pid, peaks, stop, 0.01, timeline, [""], 0.0))
    watcher.start()
    watcher.join(timeout=5)
    alive = watcher.is_alive()
    stop.set()
    child.wait()
    assert not alive and timeline == [] and peaks == {}
