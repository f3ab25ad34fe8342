"""Plain progress lines when stdout is not a terminal (SLURM, nohup, CI logs)."""

import io

from core.progress import eta_line, track


def test_off_a_terminal_track_writes_plain_lines_with_counts_and_a_final_line():
    out = io.StringIO()  # not a TTY
    assert list(track(range(5), "tokenizing", every_seconds=0.0, stream=out)) == list(range(5))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("tokenizing: 1/5 (20%)") and lines[-1].startswith("tokenizing: 5/5 (100%)")
    assert len(lines) == 6  # one per item (every_seconds=0) and the final one


def test_eta_line_hand_computed():
    assert eta_line("step", 25, 100, 50.0) == "step: 25/100 (25%), 50 s, ETA 150 s"
    assert eta_line("records", 7, None, 3.2) == "records: 7, 3 s"
