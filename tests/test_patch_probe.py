"""scripts/patch_probe.py: a tiny encoder's per-patch probes on a small world, with the sign counts it was fitted
and tested on (the probes themselves are checked by hand in tests/vlm/test_pretrain.py)."""
import json

from data.mini_world import ensure
from scripts.patch_probe import main


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
