"""What a frozen encoder's patches carry: linear probes of colour, shape and size at each object's centre patch and
of the sign's word at the sign's centre patch (vlm/pretrain/quality.py `patch_scores`, the figures `encoder_probe`
reports for a pretraining run), for any encoder folder or tiny flavour, on a mini world.

    python scripts/patch_probe.py --encoder tiny:mini_clip --world ~/.cache/refract/datasets/mini_world-8f4a94a0dc5f

Fitted on the first `--train` training scenes, tested on the world's probe scenes (scenes.json "test"); the
cells' preprocessing (letterbox) and feature layer (-2) by default. Prints one JSON object, with the test
features' geometry (`feature_geometry`): their mean norm, the share of their energy in the one vector common to all
patches, and the share of their variance that is between the patches of one image (0 when every patch of an image is
the same: an image whose patches do not differ has no position to read).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def feature_geometry(features) -> dict[str, float]:
    """Of (images, patches, width) features: `feature_norm` (mean patch norm), `common_share` (|mean patch|^2 over
    the mean |patch|^2) and `within_image_share` (variance about each image's mean patch over variance about the
    overall mean patch), the last two in percent."""
    import numpy as np

    f = np.asarray(features, dtype=np.float64)
    mean = f.mean(axis=(0, 1))
    energy = (f ** 2).sum(-1).mean()
    total = ((f - mean) ** 2).sum(-1).mean()
    within = ((f - f.mean(axis=1, keepdims=True)) ** 2).sum(-1).mean()
    return {"feature_norm": float(np.linalg.norm(f, axis=-1).mean()), "common_share": float(100 * (mean ** 2).sum() / energy),
            "within_image_share": float(100 * within / total)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", required=True, help="a timm encoder folder (local-dir:PATH) or tiny:NAME")
    p.add_argument("--world", type=Path, required=True, help="a mini world folder (data/mini_world.py)")
    p.add_argument("--train", type=int, default=2000, help="training scenes the probes are fitted on (the first N)")
    p.add_argument("--image-strategy", default="letterbox", choices=["letterbox", "resize-naive"])
    p.add_argument("--feature-layer", type=int, default=-2)
    args = p.parse_args(argv)
    import torch

    from vlm.encoders import TimmEncoder
    from vlm.pretrain.quality import patch_features, patch_scores
    from vlm.pretrain.world import scenes

    torch.set_num_threads(1)
    train, test = scenes(args.world, "train"), scenes(args.world, "test")
    fit, held = list(train)[: args.train], list(test)
    encoder = TimmEncoder(model_id=args.encoder, image_strategy=args.image_strategy, feature_layer=args.feature_layer)
    held_features = patch_features(encoder, args.world, held)
    scores = patch_scores(patch_features(encoder, args.world, fit), [train[r] for r in fit],
                          held_features, [test[r] for r in held], encoder.grid_size, args.image_strategy)
    scores.update(feature_geometry(held_features))
    out = {"encoder": args.encoder, "train_scenes": len(fit), "test_scenes": len(held),
           "train_signs": sum(bool(train[r].get("sign")) for r in fit),
           "test_signs": sum(bool(test[r].get("sign")) for r in held), **{k: round(v, 1) for k, v in scores.items()}}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
