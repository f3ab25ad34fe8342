"""Benchmark fixtures in the official layouts, for the runner tests (tests/eval/test_eval_runners.py) and any test
that needs a benchmark on disk: each builder writes one benchmark's files under `root` and returns
{first prompt line: correct answer/option}; `fixture_for` registers it for a conf/benchmark config together with
the metrics a correct oracle gets (`FIXTURES[config] = (build, total, expected)`)."""

import json
import pickle
from pathlib import Path

from PIL import Image


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
