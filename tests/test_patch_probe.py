"""scripts/patch_probe.py: a tiny encoder's per-patch probes on a small world, with the sign counts it was fitted
and tested on (the probes themselves are checked by hand in tests/vlm/test_pretrain.py)."""
import json

import numpy as np

from data.mini_world import ensure
from scripts.patch_probe import feature_geometry, main


def test_patch_probe_reports_every_attribute_and_the_sign_word(tmp_path, capsys):
    from vlm.tiny import ensure_tiny

    world = ensure(tmp_path / "w", n_train=60, n_test=30, n_per_benchmark=6)
    scenes = json.loads((world / "scenes.json").read_text())
    encoder = ensure_tiny("mini_clip")
    capsys.readouterr()  # what building the smoke flavour printed
    out = main(["--encoder", f"local-dir:{encoder}", "--world", str(world), "--train", "40"])
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == out
    assert out["train_scenes"] == 40 and out["test_scenes"] == 30
    assert out["train_signs"] == sum(bool(s.get("sign")) for s in list(scenes["train"].values())[:40])
    assert out["test_signs"] == sum(bool(s.get("sign")) for s in scenes["test"].values())
    for name in ("colour", "shape", "size", "sign"):
        assert 0 <= out[f"patch_{name}_acc"] <= 100 and 0 < out[f"patch_{name}_majority"] <= 100
    assert out["feature_norm"] > 0 and 0 <= out["common_share"] <= 100 and 0 <= out["within_image_share"] <= 100


def test_feature_geometry_by_hand():
    # two images of two 2-d patches: image 0 is (1, 0), (3, 0); image 1 is (1, 2), (3, 2). The mean patch is (2, 1):
    # energy (1 + 9 + 5 + 13) / 4 = 7, of which |mean|^2 = 5; variance about the mean (1 + 1) = 2 per patch, of
    # which about each image's own mean (1 + 0) = 1.
    f = np.array([[[1, 0], [3, 0]], [[1, 2], [3, 2]]])
    g = feature_geometry(f)
    assert abs(g["feature_norm"] - (1 + 3 + 5 ** 0.5 + 13 ** 0.5) / 4) < 1e-12
    assert abs(g["common_share"] - 100 * 5 / 7) < 1e-9 and abs(g["within_image_share"] - 50.0) < 1e-9
    same = np.repeat(f[:, :1], 2, axis=1)  # every patch of an image the same
    assert feature_geometry(same)["within_image_share"] == 0.0
