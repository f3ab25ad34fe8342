"""`python -m eval.score`: one JSON object on stdout, exit 2 with a one-line message on bad input. In process
(`eval.score.main`), except one test of the process boundary itself: the exit status and stderr of the module
run as a program."""
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


def test_cli_prints_one_json_object(tmp_path, capsys):
    preds, test = _files(tmp_path)
    assert main(["sort_of_clevr", "--predictions", preds, "--annotations", test]) == 0
    out = capsys.readouterr()
    metrics = json.loads(out.out)
    assert (metrics["accuracy"], metrics["accuracy_relational"], metrics["accuracy_non_relational"]) == (50.0, 100.0, 0.0)
    assert out.err == ""


def test_cli_accepts_config_and_benchmark_names(tmp_path, capsys):
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps([{"ref_id": 1, "ann_id": 1, "image_id": 1, "split": "val", "bbox": [0, 0, 10, 10],
                                 "sentences": [{"sent_id": 5, "sent": "the box"}]}]))
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps([{"sent_id": 5, "answer": "[0, 0, 10, 10]"}]))
    for name in ("refcoco_plus", "refcoco+"):  # the YAML's file name, and the `name` it sets
        assert main([name, "--predictions", str(preds), "--annotations", str(refs)]) == 0
        assert json.loads(capsys.readouterr().out)["accuracy"] == 100.0


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
    assert "nonsense" in err and "vqav2" in err and "sort_of_clevr" in err and "refcocog" in err and "mme" in err
    assert "rollouts" not in err  # not a scored benchmark


def test_module_run_as_a_program_exits_2_with_one_line_on_bad_input(tmp_path):
    """The process boundary: `python -m eval.score` turns a ScoringError into exit status 2 and one stderr line."""
    _, test = _files(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    proc = subprocess.run([sys.executable, "-m", "eval.score", "sort_of_clevr", "--predictions", str(bad),
                           "--annotations", test], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "bad.json" in proc.stderr and "Traceback" not in proc.stderr
