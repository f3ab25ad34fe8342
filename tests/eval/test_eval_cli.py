"""`python -m eval.score`: one JSON object on stdout, exit 2 with a one-line message on bad input."""
import json
import subprocess
import sys
from pathlib import Path

from eval.score import main

REPO = Path(__file__).resolve().parents[2]


def _files(tmp_path):
    test = tmp_path / "test.json"
    test.write_text(json.dumps([
        {"id": 0, "image": "0.png", "question": "q", "answer": "red", "type": "relational", "subtype": "closest"},
        {"id": 1, "image": "0.png", "question": "q", "answer": "yes", "type": "non_relational", "subtype": "shape"}]))
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps([{"id": 0, "answer": "red"}, {"id": 1, "answer": "no"}]))
    return str(preds), str(test)


def test_cli_prints_one_json_object(tmp_path):
    preds, test = _files(tmp_path)
    out = subprocess.run([sys.executable, "-m", "eval.score", "sort_of_clevr", "--predictions", preds,
                          "--annotations", test], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    metrics = json.loads(out.stdout)
    assert (metrics["accuracy"], metrics["accuracy_relational"], metrics["accuracy_non_relational"]) == (50.0, 100.0, 0.0)


def test_cli_scoring_error_exit_2_one_line(tmp_path, capsys):
    _, test = _files(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    assert main(["sort_of_clevr", "--predictions", str(bad), "--annotations", test]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    lines = err.err.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and "not valid JSON" in lines[0] and "Traceback" not in err.err


def test_cli_unknown_benchmark_lists_choices(tmp_path, capsys):
    preds, test = _files(tmp_path)
    assert main(["nonsense", "--predictions", preds, "--annotations", test]) == 2
    err = capsys.readouterr().err
    assert "nonsense" in err and "vqav2" in err and "sort_of_clevr" in err and "refcocog" in err
