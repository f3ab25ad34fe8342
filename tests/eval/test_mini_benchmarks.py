"""The mini world's seven benchmark analogs through the REAL runners and scorers (`python evaluate.py run=RUN
benchmark=mini_X`, the root made by `benchmark.generator`): a fake model answering from the annotation files scores
100; one answering a constant scores what a hand count over the annotation files gives; the prompts the world
trains are the YAMLs' own; Hydra places the world at `benchmark.generator`."""
import hashlib
import json
import pickle

import pytest
from omegaconf import OmegaConf

import vlm
from core.run import evaluate
from data.mini_world import ensure
from data.mini_world_questions import PROMPTS, prompt
from tests.conftest import compose_cfg

SMALL_WORLD = {"n_train": 40, "n_test": 8, "n_per_benchmark": 24}
FAMILIES = ("vqav2", "gqa", "tallyqa", "vsr", "pope", "refcoco", "textvqa")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, ensure(cache / "datasets", **SMALL_WORLD)


def image_key(image) -> str:
    return hashlib.sha1(image.convert("RGB").tobytes()).hexdigest()


def load_key(path) -> str:
    from PIL import Image
    with Image.open(path) as im:
        return image_key(im)


def expected_answers(family: str, root) -> dict:
    """{(image key, prompt): correct answer}, read straight from the benchmark's files."""
    out = {}
    if family == "vqav2":
        qs = json.loads((root / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json").read_text())["questions"]
        anns = {a["question_id"]: a for a in json.loads((root / "vqav2/v2_mscoco_val2014_annotations.json").read_text())["annotations"]}
        for q in qs:
            key = load_key(root / f"vqav2/val2014/COCO_val2014_{q['image_id']:012d}.jpg")
            out[key, prompt("vqav2", q["question"])] = anns[q["question_id"]]["multiple_choice_answer"]
    elif family == "gqa":
        for q in json.loads((root / "gqa/testdev_balanced_questions.json").read_text()).values():
            out[load_key(root / f"gqa/images/{q['imageId']}.jpg"), prompt("gqa", q["question"])] = q["answer"]
    elif family == "tallyqa":
        for q in json.loads((root / "tallyqa/test.json").read_text()):
            out[load_key(root / "tallyqa/images" / q["image"]), prompt("tallyqa", q["question"])] = str(q["answer"])
    elif family == "vsr":
        for line in (root / "vsr/random/test.jsonl").read_text().splitlines():
            r = json.loads(line)
            out[load_key(root / "vsr/images" / r["image"]), prompt("vsr", r["caption"])] = "yes" if r["label"] else "no"
    elif family == "pope":
        for split in ("random", "popular", "adversarial"):
            for line in (root / f"pope/coco/coco_pope_{split}.json").read_text().splitlines():
                r = json.loads(line)
                out[load_key(root / "pope/val2014" / r["image"]), prompt("pope", r["text"])] = r["label"]
    elif family == "refcoco":
        inst = json.loads((root / "refer/refcoco/instances.json").read_text())
        boxes, images = {a["id"]: a["bbox"] for a in inst["annotations"]}, {i["id"]: i for i in inst["images"]}
        for ref in pickle.loads((root / "refer/refcoco/refs(unc).p").read_bytes()):
            im = images[ref["image_id"]]
            x, y, w, h = boxes[ref["ann_id"]]
            box = f"[{x / im['width']}, {y / im['height']}, {(x + w) / im['width']}, {(y + h) / im['height']}]"
            key = load_key(root / "refer/images/mscoco/images/train2014" / im["file_name"])
            for s in ref["sentences"]:
                out[key, prompt("refcoco", s["sent"])] = box
    elif family == "textvqa":
        for d in json.loads((root / "textvqa/TextVQA_0.5.1_val.json").read_text())["data"]:
            answer = max(set(d["answers"]), key=d["answers"].count)
            out[load_key(root / f"textvqa/train_images/{d['image_id']}.jpg"), prompt("textvqa", d["question"])] = answer
    return out


class FakeModel:
    """Stands in for the VLM: `answer(image key, prompt)` for each item."""

    def __init__(self, answer):
        self.answer, self.asked = answer, 0

    def generate(self, images, prompts, max_new_tokens=16, do_sample=False):
        self.asked += len(prompts)
        return [self.answer(image_key(im), p) for im, p in zip(images, prompts)]

    def score(self, images, prompts, options, batch_size=32):
        answers = self.generate(images, prompts)
        return [[1.0 if o == a else 0.0 for o in opts] for a, opts in zip(answers, options)]


def run_benchmark(family, world, tmp_path, monkeypatch, answer, name="run"):
    cache, _ = world
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("{}\n")
    model = FakeModel(answer)
    monkeypatch.setattr(vlm, "load", lambda *a, **k: model)
    overrides = [f"++benchmark.generator.{k}={v}" for k, v in SMALL_WORLD.items()]
    cfg = compose_cfg(f"benchmark=mini_{family}", f"run={run_dir}", f"cache_dir={cache}", *overrides, config="eval")
    return evaluate(cfg), model


@pytest.mark.parametrize("family", FAMILIES)
def test_an_oracle_scores_100_through_the_real_runner_and_scorer(family, world, tmp_path, monkeypatch):
    answers = expected_answers(family, world[1])
    metrics, model = run_benchmark(family, world, tmp_path, monkeypatch, lambda k, p: answers[k, p])
    main = {"pope": "f1"}.get(family, "accuracy")
    assert metrics[main] == 100.0 and model.asked == metrics["n"] and len(answers) > 0
    assert metrics["n"] >= SMALL_WORLD["n_per_benchmark"] * (3 if family == "pope" else 1)
    if family == "tallyqa":
        assert metrics["accuracy_simple"] == metrics["accuracy_complex"] == 100.0


def vqa_constant(answers: list[str], matches) -> float:
    """VQA accuracy of a constant against ten answers: the mean over leave-one-out subsets of min(1, matches / 3)."""
    m = sum(matches(a) for a in answers)
    return sum(min(1.0, (m - matches(a)) / 3) for a in answers) / len(answers)


def constant_expected(family, root, constant):
    if family == "vqav2":
        anns = json.loads((root / "vqav2/v2_mscoco_val2014_annotations.json").read_text())["annotations"]
        words = {"2": {"2", "two"}, "yes": {"yes"}}[constant]
        per = [vqa_constant([a["answer"] for a in ann["answers"]], lambda a: a in words) for ann in anns]
        return round(100 * sum(per) / len(per), 2)
    if family == "textvqa":
        data = json.loads((root / "textvqa/TextVQA_0.5.1_val.json").read_text())["data"]
        per = [vqa_constant(d["answers"], lambda a: a.lower() == constant) for d in data]
        return round(100 * sum(per) / len(per), 2)
    if family == "gqa":
        qs = list(json.loads((root / "gqa/testdev_balanced_questions.json").read_text()).values())
        return round(100 * sum(q["answer"] == constant for q in qs) / len(qs), 2)
    if family == "tallyqa":
        qs = json.loads((root / "tallyqa/test.json").read_text())
        return round(100 * sum(q["answer"] == int(constant) for q in qs) / len(qs), 2)
    if family == "vsr":
        labels = [json.loads(line)["label"] for line in (root / "vsr/random/test.jsonl").read_text().splitlines()]
        return round(100 * sum(labels) / len(labels), 2)
    if family == "pope":  # "yes" everywhere: precision = share of yes labels, recall 1; F1 averaged over splits
        f1s = []
        for split in ("random", "popular", "adversarial"):
            labels = [json.loads(x)["label"] for x in (root / f"pope/coco/coco_pope_{split}.json").read_text().splitlines()]
            p = labels.count("yes") / len(labels)
            f1s.append(100 * 2 * p / (p + 1))
        return round(sum(f1s) / 3, 2)
    raise AssertionError(family)


CONSTANTS = [("vqav2", "2"), ("vqav2", "yes"), ("gqa", "yes"), ("tallyqa", "2"), ("vsr", "yes"), ("pope", "yes"),
             ("textvqa", "cat")]


@pytest.mark.parametrize(("family", "constant"), CONSTANTS)
def test_a_constant_answer_scores_its_hand_count(family, constant, world, tmp_path, monkeypatch):
    metrics, _ = run_benchmark(family, world, tmp_path, monkeypatch, lambda k, p: constant)
    main = {"pope": "f1"}.get(family, "accuracy")
    expected = constant_expected(family, world[1], constant)
    assert metrics[main] == pytest.approx(expected, abs=0.011)
    if family == "pope":
        assert expected == pytest.approx(66.67, abs=0.01)  # 50/50 yes/no in every split


def test_refcoco_a_constant_box_scores_the_share_it_overlaps(world, tmp_path, monkeypatch):
    """The first referent's own box as the answer to everything: right exactly where IoU >= 0.5 (hand IoU)."""
    root = world[1]
    inst = json.loads((root / "refer/refcoco/instances.json").read_text())
    boxes, sizes = {a["id"]: a["bbox"] for a in inst["annotations"]}, {i["id"]: (i["width"], i["height"]) for i in inst["images"]}
    refs = pickle.loads((root / "refer/refcoco/refs(unc).p").read_bytes())
    W, H = sizes[refs[0]["image_id"]]
    x, y, w, h = boxes[refs[0]["ann_id"]]
    answer = f"[{x / W}, {y / H}, {(x + w) / W}, {(y + h) / H}]"

    def iou(a, b):
        ix = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
        iy = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
        return ix * iy / (a[2] * a[3] + b[2] * b[3] - ix * iy)

    hits = [iou(boxes[r["ann_id"]], (x, y, w, h)) >= 0.5 for r in refs for _ in r["sentences"]]
    metrics, _ = run_benchmark("refcoco", world, tmp_path, monkeypatch, lambda k, p: answer)
    assert 0 < sum(hits) < len(hits)
    assert metrics["accuracy"] == round(100 * sum(hits) / len(hits), 2) and metrics["unparsed"] == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_the_benchmark_composes_with_the_world_and_asks_the_trained_prompts(family):
    cfg = compose_cfg(f"benchmark=mini_{family}", "run=x", config="eval")
    real = compose_cfg(f"benchmark={family}", "run=x", config="eval").benchmark
    bench = cfg.benchmark
    assert bench.name == f"mini_{family}" and bench.root is None
    assert bench.generator._target_ == "data.mini_world.ensure" and bench._target_ == real._target_
    assert OmegaConf.to_container(bench.scorer) == OmegaConf.to_container(real.scorer)
    assert bench.get("main_metric", "accuracy") == ("f1" if family == "pope" else "accuracy")
    template, suffix = PROMPTS[family]
    assert suffix == bench.prompt_suffix
    if "template" in bench:
        assert template == bench.template.replace("{caption}", "{q}").replace("{sentence}", "{q}")
    data = compose_cfg("data=mini_world").data
    assert OmegaConf.to_container(data.generator) == OmegaConf.to_container(bench.generator)


def test_the_blind_prior_answers_from_training_text_and_scores_through_the_real_scorers(world, tmp_path):
    from scripts.blind_prior import Prior, blind_prior, template

    root = world[1]
    prior = blind_prior(root, tmp_path)
    assert sorted(prior) == sorted(f"mini_{f}/{'f1' if f == 'pope' else 'accuracy'}" for f in FAMILIES)
    assert all(0.0 <= v < 100.0 for v in prior.values())
    # the VSR prior by hand: each statement answered with the majority training answer of its template
    instruct = json.loads((root / "instruct.json").read_text())
    answer = Prior(instruct)
    records = [json.loads(x) for x in (root / "vsr/random/test.jsonl").read_text().splitlines()]
    right = sum((answer(prompt("vsr", r["caption"])) == "yes") == bool(r["label"]) for r in records)
    assert prior["mini_vsr/accuracy"] == round(100 * right / len(records), 2)
    assert template(prompt("vsr", "The red circle is left of the blue squares.")) == prompt(
        "vsr", "The <color> <shape> is left of the <color> <shape>.")
    preds = json.loads((tmp_path / "mini_refcoco.json").read_text())
    assert len(preds) >= SMALL_WORLD["n_per_benchmark"] and all(p["answer"].startswith("[") for p in preds)


def test_the_blind_prior_answers_each_template_at_the_level_its_held_out_questions_choose():
    """By hand, holding out every 2nd pair: presence questions recur with one answer each, so the exact prompt
    wins (4 of 4 held out right against the template majority's 3 and the suffix majority's 3); the size
    question's exact prompts disagree between their two askings, so the template majority "small" wins (3 of 4
    against the prompt's 2 and the suffix majority "no"'s 0) and answers even the prompt whose own answers are a
    tie that the prompt level would break as "large"."""
    from scripts.blind_prior import LEVELS, Prior, agrees, template

    def record(q, a):
        return {"conversations": [{"from": "human", "value": "<image>\n" + prompt("vqav2", q)},
                                  {"from": "gpt", "value": a}]}
    presence = [("Is there a red circle?", "yes"), ("Is there a blue square?", "no"),
                ("Is there a green triangle?", "no"), ("Is there a blue star?", "no")]
    size = {"red circle": ("small", "large"), "blue square": ("small", "small"), "green star": ("small", "small"),
            "red square": ("large", "small")}  # (held-out asking, fitted asking)
    instruct = [record(q, a) for q, a in presence for _ in range(2)]
    instruct += [record(f"What size is the {o}?", a) for o, pair in size.items() for a in pair]
    prior = Prior(instruct, holdout_every=2)
    assert prior.level[template(prompt("vqav2", "Is there a red circle?"))] == LEVELS.index("prompt")
    assert prior.level[template(prompt("vqav2", "What size is the red circle?"))] == LEVELS.index("template")
    assert [prior(prompt("vqav2", q)) for q, _ in presence] == ["yes", "no", "no", "no"]
    assert prior(prompt("vqav2", "What size is the red circle?")) == "small"
    assert prior(prompt("vqav2", "What size is the blue circle?")) == "small"  # unseen prompt, seen template
    assert agrees("[0.10, 0.10, 0.50, 0.50]", "[0.12, 0.10, 0.50, 0.52]")  # IoU 0.91
    assert not agrees("[0.10, 0.10, 0.30, 0.30]", "[0.20, 0.20, 0.40, 0.40]") and not agrees(None, "yes")


def test_the_runner_resolves_its_root_from_the_generator_lazily(world, tmp_path):
    from hydra.utils import instantiate

    cache, root = world
    overrides = [f"++benchmark.generator.{k}={v}" for k, v in SMALL_WORLD.items()]
    cfg = compose_cfg("benchmark=mini_gqa", "run=x", f"cache_dir={cache}", *overrides, config="eval")
    runner = instantiate(cfg.benchmark, _recursive_=False)
    assert runner.root is None  # nothing generated when the runner is built
    assert runner.path("annotations") == root / "gqa/testdev_balanced_questions.json" and runner.root == root
    built = instantiate(cfg.benchmark)  # Hydra's default recursion hands the runner the folder itself
    assert built.path("annotations") == root / "gqa/testdev_balanced_questions.json"
    cfg.benchmark.generator = None
    with pytest.raises(FileNotFoundError, match="needs benchmark.root=PATH"):
        instantiate(cfg.benchmark, _recursive_=False).path("annotations")


def test_a_tiny_run_trained_on_the_world_evaluates_on_its_benchmarks(world, tmp_path):
    """The real path: `train.py data=mini_world` (2 steps) then `evaluate.py benchmark=mini_*` with the real model."""
    from core.run import train

    cache, _ = world
    data = [f"++data.generator.{k}={v}" for k, v in SMALL_WORLD.items()]
    train(compose_cfg("logger=csv", "trainer.progress_bar=false", "data=mini_world", f"cache_dir={cache}", *data,
                      "~stage.phases.scratch_captions", "stage.phases.scratch.global_batch_size=4",
                      f"run.root={tmp_path}", "trainer.max_steps=2", "run.name=tiny"))
    bench = [f"++benchmark.generator.{k}={v}" for k, v in SMALL_WORLD.items()]
    for family in ("refcoco", "vsr", "textvqa"):
        metrics = evaluate(compose_cfg(f"run={tmp_path / 'tiny'}", f"benchmark=mini_{family}", f"cache_dir={cache}",
                                       *bench, "limit=4", "batch_size=4", config="eval"))
        assert metrics["n"] == 4 and metrics["missing"] == 0 and 0.0 <= metrics["accuracy"] <= 100.0
        results = json.loads((tmp_path / "tiny/results.json").read_text())
        assert results["benchmarks"][f"mini_{family}"]["accuracy"] == metrics["accuracy"]
