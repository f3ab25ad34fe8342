"""Benchmark runners end to end: for every benchmark config in conf/benchmark/ (found by glob), a fixture in
the benchmark's published layout under `benchmark.root` (tests/eval/fixtures.py), answered by an oracle stand-in for the model
(exact metrics); a tiny trained run (the real path: `evaluate` writes results.json); the resumable
predictions log."""
import copy
import json

import pytest
from omegaconf import OmegaConf

import vlm
from core.run import evaluate, train
from eval.runners.base import MODES, read_log
from tests.conftest import SCRATCH_SMALL, SMALL, compose_cfg
from tests.eval.benchmarks import EVAL_BENCHMARKS, EVAL_CONFIGS
from tests.eval.fixtures import FIXTURES, Oracle, make_ai2d, make_gqa, make_pope, make_scienceqa, make_vqav2


@pytest.fixture
def bench_run(tmp_path, monkeypatch):
    """(run_dir, evaluate-with-an-oracle) for a fake run directory."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("{}\n")

    def run(config, root, answers, **settings):
        """`evaluate.py run=RUN_DIR benchmark=CONFIG benchmark.root=ROOT KEY=VALUE...` with the oracle as the model."""
        oracle = Oracle(answers)
        monkeypatch.setattr(vlm, "load", lambda *a, **k: oracle)
        cfg = copy.deepcopy(EVAL_CONFIGS[config])  # composed once per session
        cfg.run, cfg.benchmark.root = str(run_dir), str(root)
        for key, value in settings.items():
            OmegaConf.update(cfg, key, value)
        return evaluate(cfg), oracle

    return run_dir, run


def fixture_of(config: str):
    if config not in FIXTURES:
        raise AssertionError(f"conf/benchmark/{config}.yaml has no test fixture: add a builder decorated with "
                             f"@fixture_for({config!r}, ...) to tests/eval/fixtures.py")
    return FIXTURES[config]


# every benchmark config, and each with a `mode` key (answer options) in both modes
CASES = [(c, m) for c in EVAL_BENCHMARKS for m in ((None,) if "mode" not in EVAL_CONFIGS[c].benchmark else MODES)]


@pytest.mark.parametrize(("config", "mode"), CASES)
def test_runner_reads_the_official_layout_and_scores(config, mode, bench_run, tmp_path):
    run_dir, run = bench_run
    build, total, expected = fixture_of(config)
    answers = build(tmp_path / "bench")
    settings = {"benchmark.mode": mode} if mode else {}
    metrics, oracle = run(config, tmp_path / "bench", answers, **settings)
    assert oracle.asked == total and metrics["n"] == total and metrics.get("missing", 0) == 0
    for key, value in expected.items():
        assert metrics[key] == value, (key, metrics)
    name = EVAL_CONFIGS[config].benchmark.name
    assert json.loads((run_dir / "results.json").read_text())["benchmarks"][name] == metrics
    official = json.loads((run_dir / "predictions" / f"{name}.json").read_text())
    assert len(official) == total
    # a second evaluation answers nothing again: everything is in the log
    metrics2, oracle2 = run(config, tmp_path / "bench", answers, **settings)
    assert oracle2.asked == 0 and metrics2 == metrics
    if mode:  # the other mode is other settings: the log starts over
        _, oracle3 = run(config, tmp_path / "bench", answers, **{"benchmark.mode": next(m for m in MODES if m != mode)})
        assert oracle3.asked == total and oracle3.generated == (total if mode == "likelihood" else 0)


@pytest.mark.parametrize(("config", "mode"), CASES)
def test_limit_scores_only_the_items_asked(config, mode, bench_run, tmp_path):
    _, run = bench_run
    build, _, _ = fixture_of(config)
    settings = {"benchmark.mode": mode} if mode else {}
    metrics, oracle = run(config, tmp_path / "bench", build(tmp_path / "bench"), limit=1, **settings)
    assert oracle.asked == 1 and metrics["n"] == 1 and metrics.get("missing", 0) == 0


def test_prompts_follow_the_conventions(bench_run, tmp_path):
    _, run = bench_run
    _, oracle = run("vqav2", tmp_path / "b", make_vqav2(tmp_path / "b"), limit=1)
    assert oracle.prompts == ["What color is the car?\nAnswer the question using a single word or phrase."]
    _, oracle = run("scienceqa", tmp_path / "b", make_scienceqa(tmp_path / "b"))
    assert oracle.prompts[1] == ("Context: Read the words.\nWhich word is a noun?\nA. run\nB. table\nC. blue\n"
                                 "Answer with the option's letter from the given choices directly.")


def test_multiple_choice_writes_option_indices(bench_run, tmp_path):
    run_dir, run = bench_run
    run("ai2d", tmp_path / "b", make_ai2d(tmp_path / "b"), **{"benchmark.mode": "likelihood"})
    official = json.loads((run_dir / "predictions" / "ai2d.json").read_text())
    assert [p["answer"] for p in official] == [1, 2, 0]  # index, even where an option text is a letter
    log = [json.loads(line) for line in (run_dir / "predictions" / "ai2d.jsonl").read_text().splitlines()]
    assert "_meta" in log[0] and log[1]["probs"] == [0.0, 1.0, 0.0, 0.0]


def test_generate_mode_parses_answers_as_the_published_evaluations(bench_run, tmp_path):
    """Generated text through the official parsers: LLaVA's for ScienceQA, lmms-eval's for AI2D, LLaVA's eval_pope
    rule (in the scorer) for POPE; the raw text stays in the log, an answer naming no option is -1 and unparsed."""
    run_dir, run = bench_run
    answers = make_scienceqa(tmp_path / "s")
    answers.update({"Which is a mammal?": "B. whale", "Context: Read the words.": "The answer is B"})  # LLaVA: B, FAILED
    metrics, oracle = run("scienceqa", tmp_path / "s", answers)
    assert oracle.generated == 2 and (metrics["accuracy"], metrics["unparsed"]) == (50.0, 1)
    assert [p["answer"] for p in json.loads((run_dir / "predictions" / "scienceqa.json").read_text())] == [1, -1]
    log = [json.loads(line) for line in (run_dir / "predictions" / "scienceqa.jsonl").read_text().splitlines()[1:]]
    assert [r["text"] for r in log] == ["B. whale", "The answer is B"]
    answers = make_ai2d(tmp_path / "a")
    answers.update({"What eats grass?": "(B)", "Which label is the sun?": "C. sun", "What is D?": "leaf"})  # B, C, none
    metrics, _ = run("ai2d", tmp_path / "a", answers)
    assert (metrics["accuracy"], metrics["unparsed"]) == (pytest.approx(200 / 3, abs=0.01), 1)
    answers = make_pope(tmp_path / "p")
    answers = {q: ("Yes, there is." if a == "yes" else "There is not a single one.") for q, a in answers.items()}
    metrics, _ = run("pope", tmp_path / "p", answers)
    assert metrics["accuracy"] == 100.0 and metrics["n"] == 6


def test_missing_root_and_missing_files_are_clear(bench_run, tmp_path):
    _, run = bench_run
    with pytest.raises(FileNotFoundError, match="vqav2/v2_OpenEnded_mscoco_val2014_questions.json"):
        run("vqav2", tmp_path / "empty", {})
    answers = make_gqa(tmp_path / "b")
    (tmp_path / "b/gqa/images/n1.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="n1.jpg"):
        run("gqa", tmp_path / "b", answers)


# --------------------------------------------------------------------- the predictions log
def test_log_keeps_a_clean_prefix_and_starts_over_on_other_settings(tmp_path):
    log, meta = tmp_path / "x.jsonl", {"benchmark": "x", "settings": "s1", "weights": "w"}
    assert read_log(log, meta) == {} and log.read_text().count("\n") == 1
    with open(log, "a") as f:
        f.write(json.dumps({"id": "a", "answer": "1"}) + "\n" + json.dumps({"id": "b", "answer": "2"}) + "\n" + '{"id": "c", "ans')
    assert sorted(read_log(log, meta)) == ["a", "b"]
    assert all(json.loads(line) for line in log.read_text().splitlines()) and log.read_text().endswith("\n")
    assert read_log(log, {**meta, "weights": "other"}) == {}
    assert len(log.read_text().splitlines()) == 1
    log.write_text('{"id": "a", "answer": "1"}\nnot json\n{"id": "b", "answer": "2"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_log(log, meta)


# --------------------------------------------------------------------- a tiny trained run, for real
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalruns")
    cfg = compose_cfg(*SMALL, *SCRATCH_SMALL, f"run.root={root}", "trainer.max_steps=2", "run.name=tiny")
    train(cfg)
    return root / "tiny"


def test_tiny_run_on_the_embedded_benchmark(tiny_run):
    metrics = evaluate(compose_cfg(f"run={tiny_run}", "limit=5", "batch_size=2", config="eval"))
    assert metrics["n"] == 5 and 0.0 <= metrics["accuracy"] <= 100.0
    assert {"accuracy_relational", "accuracy_non_relational"} <= set(metrics)
    assert any(k.startswith("accuracy_") and k not in ("accuracy_relational", "accuracy_non_relational") for k in metrics)
    preds = json.loads((tiny_run / "predictions" / "sort_of_clevr.json").read_text())
    assert len(preds) == 5 and all(isinstance(p["answer"], str) for p in preds)


def test_tiny_run_on_vqav2_and_pope(tiny_run, tmp_path):
    make_vqav2(tmp_path)
    make_pope(tmp_path)
    m = evaluate(compose_cfg(f"run={tiny_run}", "benchmark=vqav2", f"benchmark.root={tmp_path}", "benchmark.max_new_tokens=4",
                             config="eval"))
    results = json.loads((tiny_run / "results.json").read_text())
    assert results["benchmarks"]["vqav2"]["accuracy"] == m["accuracy"] and m["n"] == 3
    assert len(json.loads((tiny_run / "predictions" / "vqav2.json").read_text())) == 3
    p = evaluate(compose_cfg(f"run={tiny_run}", "benchmark=pope", f"benchmark.root={tmp_path}", "benchmark.mode=likelihood",
                             config="eval"))
    assert p["n"] == 6 and set(p["per_split"]) == {"random", "popular", "adversarial"}
    assert {r["answer"] for r in json.loads((tiny_run / "predictions" / "pope.json").read_text())} <= {"yes", "no"}
    results = json.loads((tiny_run / "results.json").read_text())
    assert set(results["benchmarks"]) >= {"vqav2", "pope"} and results["benchmarks"]["pope"]["f1"] == p["f1"]


def test_tiny_run_resumes_a_partial_predictions_file(tiny_run, tmp_path, monkeypatch):
    base = ["benchmark=sort_of_clevr", "batch_size=3"]
    (tiny_run / "predictions" / "sort_of_clevr.jsonl").unlink(missing_ok=True)  # other tests share the run
    evaluate(compose_cfg(f"run={tiny_run}", *base, "limit=4", config="eval"))  # the first 4 answered
    log = tiny_run / "predictions" / "sort_of_clevr.jsonl"
    with open(log, "a") as f:
        f.write('{"id": "999", "answ')  # a crash mid-write
    asked = []
    real_load = vlm.load

    def load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        generate = model.generate
        model.generate = lambda images, prompts, **kw: asked.extend(prompts) or generate(images, prompts, **kw)
        return model

    monkeypatch.setattr(vlm, "load", load)
    metrics = evaluate(compose_cfg(f"run={tiny_run}", *base, "limit=9", config="eval"))
    assert len(asked) == 5 and metrics["n"] == 9
    records = [json.loads(line) for line in log.read_text().splitlines()]
    ids = [r["id"] for r in records if "_meta" not in r]
    assert len(ids) == len(set(ids)) >= 9 and "999" not in ids
