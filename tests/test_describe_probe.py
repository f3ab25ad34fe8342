"""scripts/describe_probe.py: the description probe scores a model that describes each scene exactly at 100 on
every attribute, and a model that always says the same thing at its hand-counted figures."""
import json

import numpy as np
import pytest

from data.mini_world import ensure
from data.mini_world_questions import caption
from scripts.describe_probe import named, probe


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("w"), n_train=2, n_test=8, n_per_benchmark=6)


class Describer:
    """Answers "Describe the image." from a fixed list, in order (the probe asks about the test scenes in order)."""

    def __init__(self, texts):
        self.texts = list(texts)

    def generate(self, images, prompts, max_new_tokens):
        assert prompts == ["Describe the image."] * len(images)
        out, self.texts = self.texts[:len(images)], self.texts[len(images):]
        return out


def test_named_splits_parts_by_their_colour():
    assert named("red top left large circle [0.1, 0.2, 0.3, 0.4], blue middle small square and a sign that says "
                 "dog.") == {"red": "top left large circle [0.1, 0.2, 0.3, 0.4]", "blue": "middle small square"}


def test_the_true_descriptions_score_100(world):
    scenes = list(json.loads((world / "scenes.json").read_text())["test"].values())
    rng = np.random.default_rng(0)
    _, figures = probe(Describer(caption(s, rng) for s in scenes), world, len(scenes), batch=3)
    n = sum(len(s["objects"]) for s in scenes)
    for key in ("color_recall", "position", "size", "shape"):
        assert figures[key] == [100.0, n]
    assert figures["color_precision"][0] == 100.0


def test_a_constant_description_scores_its_hand_count(world):
    scenes = list(json.loads((world / "scenes.json").read_text())["test"].values())
    said = "red middle small circle."
    _, figures = probe(Describer([said] * len(scenes)), world, len(scenes), batch=4)
    reds = [o for s in scenes for o in s["objects"] if o["color"] == "red"]
    n = sum(len(s["objects"]) for s in scenes)
    assert figures["color_recall"] == [round(100 * len(reds) / n, 1), n]
    assert figures["color_precision"] == [round(100 * len(reds) / len(scenes), 1), len(scenes)]
    assert figures["size"] == [round(100 * sum(o["size"] == "small" for o in reds) / len(reds), 1), len(reds)]
    assert figures["shape"] == [round(100 * sum(o["shape"] == "circle" for o in reds) / len(reds), 1), len(reds)]
