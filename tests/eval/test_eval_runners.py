"""Benchmark runners end to end: for every benchmark config in conf/benchmark/ (found by glob), a fixture in
the benchmark's published layout under `benchmark.root`, answered by an oracle stand-in for the model
(exact metrics); a tiny trained run (the real path: `evaluate` writes results.json); the resumable
predictions log."""
import copy
import json
import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image

import vlm
from core.run import evaluate, train
from eval.runners.base import MODES, read_log
from tests.conftest import SCRATCH_SMALL, SMALL, compose_cfg
from tests.eval.benchmarks import EVAL_BENCHMARKS, EVAL_CONFIGS


def write(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def image(path: Path, colour=(200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (24, 16), colour).save(path)


# --------------------------------------------------------------------- fixtures in the official layouts
# Each builder writes its files under `root` and returns {first prompt line: correct answer/option};
# `fixture_for` registers it for a benchmark config with the metrics a correct oracle gets.
FIXTURES: dict = {}


def fixture_for(config: str, total: int, **expected):
    """Register a builder as the fixture of `conf/benchmark/<config>.yaml`: `total` items, `expected` metrics."""

    def register(build):
        FIXTURES[config] = (build, total, expected)
        return build

    return register


@fixture_for("vqav2", 3, accuracy=100.0, n=3)
def make_vqav2(root: Path) -> dict:
    qs = [(10, 1, "What color is the car?", "red"), (11, 1, "How many dogs?", "2"), (12, 2, "Is it sunny?", "yes")]
    write(root / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json",
          {"questions": [{"image_id": i, "question": q, "question_id": qid} for qid, i, q, _ in qs]})
    write(root / "vqav2/v2_mscoco_val2014_annotations.json", {"annotations": [
        {"question_id": qid, "image_id": i, "answer_type": "other", "question_type": "what",
         "answers": [{"answer": a, "answer_id": k + 1} for k in range(10)]} for qid, i, _, a in qs]})
    for i in (1, 2):
        image(root / f"vqav2/val2014/COCO_val2014_{i:012d}.jpg")
    return {q: a for _, _, q, a in qs}


@fixture_for("textvqa", 2, accuracy=100.0)
def make_textvqa(root: Path) -> dict:
    data = [{"question_id": 5, "question": "What brand?", "image_id": "abc1", "answers": ["nike"] * 10},
            {"question_id": 6, "question": "What number?", "image_id": "abc2", "answers": ["7"] * 10}]
    write(root / "textvqa/TextVQA_0.5.1_val.json", {"data": data})
    for d in data:
        image(root / f"textvqa/train_images/{d['image_id']}.jpg")
    return {d["question"]: d["answers"][0] for d in data}


@fixture_for("vizwiz", 2, accuracy=100.0)
def make_vizwiz(root: Path) -> dict:
    data = [{"image": f"VizWiz_val_0000000{k}.jpg", "question": q, "answer_type": "other", "answerable": 1,
             "answers": [{"answer": a, "answer_confidence": "yes"}] * 10}
            for k, (q, a) in enumerate([("What is this?", "soup"), ("What colour is the shirt?", "blue")])]
    write(root / "vizwiz/val.json", data)
    for d in data:
        image(root / "vizwiz/val" / d["image"])
    return {d["question"]: d["answers"][0]["answer"] for d in data}


@fixture_for("gqa", 2, accuracy=100.0)
def make_gqa(root: Path) -> dict:
    data = {"201": {"imageId": "n1", "question": "Is the cup white?", "answer": "yes",
                    "types": {"structural": "verify", "semantic": "attr"}},
            "202": {"imageId": "n2", "question": "Which side is the cat on?", "answer": "left",
                    "types": {"structural": "query", "semantic": "rel"}}}
    write(root / "gqa/testdev_balanced_questions.json", data)
    for q in data.values():
        image(root / f"gqa/images/{q['imageId']}.jpg")
    return {q["question"]: q["answer"] for q in data.values()}


@fixture_for("tallyqa", 2, accuracy_simple=100.0, accuracy_complex=100.0)
def make_tallyqa(root: Path) -> dict:
    data = [{"question_id": 1, "image": "VG_100K/1.jpg", "question": "How many cats?", "answer": 3, "issimple": True},
            {"question_id": 2, "image": "val2014/COCO_val2014_000000000002.jpg", "question": "How many red cars?",
             "answer": 0, "issimple": False}]
    write(root / "tallyqa/test.json", data)
    for d in data:
        image(root / "tallyqa/images" / d["image"])
    return {d["question"]: str(d["answer"]) for d in data}


@fixture_for("pope", 6, accuracy=100.0, f1=100.0, n=6)
def make_pope(root: Path) -> dict:
    oracle = {}
    for split, things in (("random", ["dog", "cat", "car"]), ("popular", ["bus"]), ("adversarial", ["cup", "tie"])):
        recs = [{"question_id": k + 1, "image": f"COCO_val2014_00000000000{k}.jpg", "text": f"Is there a {t} in the image?",
                 "label": "yes" if k % 2 == 0 else "no"} for k, t in enumerate(things)]
        write_jsonl(root / f"pope/coco/coco_pope_{split}.json", recs)
        for r in recs:
            image(root / "pope/val2014" / r["image"])
            oracle[r["text"]] = r["label"]
    return oracle


@fixture_for("vsr", 3, accuracy=100.0)
def make_vsr(root: Path) -> dict:
    recs = [{"image": "000000000001.jpg", "caption": "The cat is on the bed.", "label": 1, "relation": "on"},
            {"image": "000000000002.jpg", "caption": "The dog is under the car.", "label": 0, "relation": "under"},
            {"image": "000000000001.jpg", "caption": "The bed is under the cat.", "label": 1, "relation": "under"}]
    write_jsonl(root / "vsr/random/test.jsonl", recs)
    for r in recs:
        image(root / "vsr/images" / r["image"])
    return {f"Is the following statement about the image true? {r['caption']}": "yes" if r["label"] else "no" for r in recs}


@fixture_for("ai2d", 3, accuracy=100.0, n=3)
def make_ai2d(root: Path) -> dict:
    docs = {"1.png": {"What eats grass?": ("1.png-0", ["lion", "cow", "A", "sun"], 1),
                      "Which label is the sun?": ("1.png-1", ["A", "B", "C", "D"], 2)},
            "2.png": {"What is D?": ("2.png-0", ["leaf", "root"], 0)},
            "3.png": {"Not in the test set?": ("3.png-0", ["x", "y"], 1)}}
    for name, qs in docs.items():
        write(root / f"ai2d/questions/{name}.json", {"imageName": name, "questions": {
            t: {"questionId": qid, "answerTexts": opts, "correctAnswer": c, "abcLabel": False} for t, (qid, opts, c) in qs.items()}})
        image(root / "ai2d/images" / name)
    (root / "ai2d/ai2d_test_ids.csv").write_text("1\n2\n")
    return {t: "ABCD"[c] for name, qs in docs.items() if name != "3.png" for t, (_, _, c) in qs.items()}


@fixture_for("scienceqa", 2, accuracy=100.0, accuracy_img=100.0)
def make_scienceqa(root: Path) -> dict:
    problems = {"p1": {"question": "Which is a mammal?", "choices": ["trout", "whale"], "answer": 1, "hint": "",
                       "image": "image.png", "subject": "natural science", "split": "test"},
                "p2": {"question": "Which word is a noun?", "choices": ["run", "table", "blue"], "answer": 1,
                       "hint": "Read the words.", "image": None, "subject": "language science", "split": "test"},
                "p3": {"question": "Train question?", "choices": ["a", "b"], "answer": 0, "hint": "", "image": None,
                       "subject": "social science", "split": "train"}}
    write(root / "scienceqa/problems.json", problems)
    write(root / "scienceqa/pid_splits.json", {"test": ["p1", "p2"], "train": ["p3"]})
    image(root / "scienceqa/images/test/p1/image.png")
    return {"Which is a mammal?": "B", "Context: Read the words.": "B"}


@fixture_for("refcoco", 2, accuracy=50.0, n=2, unparsed=0)
def make_refcoco(root: Path, dataset: str = "refcoco", refs_file: str = "refs(unc).p") -> dict:
    refs = [{"ref_id": 1, "ann_id": 100, "image_id": 7, "split": "val",
             "sentences": [{"sent_id": 11, "sent": "the left dog"}, {"sent_id": 12, "sent": "dog on the left"}]},
            {"ref_id": 2, "ann_id": 101, "image_id": 7, "split": "testA", "sentences": [{"sent_id": 13, "sent": "man"}]}]
    (root / "refer" / dataset).mkdir(parents=True, exist_ok=True)
    (root / "refer" / dataset / refs_file).write_bytes(pickle.dumps(refs, protocol=2))  # as REFER ships it
    write(root / "refer" / dataset / "instances.json", {
        "images": [{"id": 7, "width": 100, "height": 200, "file_name": "COCO_train2014_000000000007.jpg"}],
        "annotations": [{"id": 100, "bbox": [10, 20, 40, 80]}, {"id": 101, "bbox": [0, 0, 10, 10]}]})
    image(root / "refer/images/mscoco/images/train2014/COCO_train2014_000000000007.jpg")
    prompt = "Please provide the bounding box coordinate of the region this sentence describes: "
    return {prompt + "the left dog": "[0.1, 0.1, 0.5, 0.5]", prompt + "dog on the left": "[0.9, 0.9, 1.0, 1.0]"}


@fixture_for("refcoco_plus", 2, accuracy=50.0, n=2)
def make_refcoco_plus(root: Path) -> dict:
    return make_refcoco(root, "refcoco+", "refs(unc).p")


@fixture_for("refcocog", 2, accuracy=50.0, n=2)
def make_refcocog(root: Path) -> dict:
    return make_refcoco(root, "refcocog", "refs(umd).p")


@fixture_for("sort_of_clevr", 2, accuracy=100.0, accuracy_relational=100.0, accuracy_non_relational=100.0)
def make_sort_of_clevr(root: Path) -> dict:
    """A generated Sort-of-CLEVR folder (`benchmark.root` replaces the run's own data)."""
    qs = [{"id": 0, "image": "images/0.png", "question": "What shape is the red object?", "answer": "circle",
           "type": "non_relational", "subtype": "shape"},
          {"id": 1, "image": "images/0.png", "question": "What colour is closest to red?", "answer": "blue",
           "type": "relational", "subtype": "closest"}]
    write(root / "test.json", qs)
    image(root / "images/0.png")
    return {q["question"]: q["answer"] for q in qs}


@fixture_for("mme", 6, accuracy=100.0, perception=400.0, cognition=200.0)
def make_mme(root: Path) -> dict:
    """Both released layouts: questions beside the images (existence, code_reasoning) or under
    questions_answers_YN/ next to images/ (artwork)."""
    release = root / "mme/MME_Benchmark_release_version"
    files = {"existence/1": ("existence", "1.jpg", [("Is there a cat? Please answer yes or no.", "Yes"),
                                                   ("Is there a dog? Please answer yes or no.", "No")]),
             "artwork/questions_answers_YN/7": ("artwork/images", "7.png", [("Is this by Monet?", "No"),
                                                                             ("Is this by Manet?", "Yes")]),
             "code_reasoning/3": ("code_reasoning", "3.png", [("Does it print 3?", "Yes"), ("Does it print 4?", "No")])}
    answers = {}
    for stem, (image_dir, image_name, qas) in files.items():
        (release / stem).parent.mkdir(parents=True, exist_ok=True)
        (release / f"{stem}.txt").write_text("".join(f"{q}\t{a}\n" for q, a in qas))
        image(release / image_dir / image_name)
        answers.update(dict(qas))
    return answers


class Oracle:
    """Stands in for the VLM: answers from {first prompt line: answer}, counts the items it was asked."""

    def __init__(self, answers: dict):
        self.answers, self.asked, self.prompts, self.generated = answers, 0, [], 0

    def _key(self, images, prompts):
        assert all(im is None or isinstance(im, Image.Image) for im in images)
        self.asked += len(prompts)
        self.prompts += prompts
        return [p.split("\n")[0] for p in prompts]

    def generate(self, images, prompts, max_new_tokens=32, do_sample=False):
        assert do_sample is False
        self.generated += len(prompts)
        return [self.answers[k] for k in self._key(images, prompts)]

    def score(self, images, prompts, options, batch_size=32):
        return [[1.0 if o == self.answers[k] else 0.0 for o in opts] for k, opts in zip(self._key(images, prompts), options)]


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
                             f"@fixture_for({config!r}, ...) to tests/eval/test_eval_runners.py")
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
