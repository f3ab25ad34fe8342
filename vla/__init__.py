"""Vision-language-action models: a VLM of vlm/ fine-tuned to emit action tokens (OpenVLA-style) on the shared core.

`vla.load(RUN_DIR).predict_action(images, instructions)` → actions (B, H, D). The package imports `vlm/` and
`behavior/`; neither imports it. Files: actions.py (action ids ↔ backbone ids), dataset.py (samples, labels on the
action tokens), lightning.py (the task), inference.py (loading, decoding, the rollout adapter), rollout.py (the
Meta-World benchmark), export.py (HF Llava folder + action decoding). docs/vla.md.
"""


def load(run_dir, device="cpu", trust_remote_code: bool = False):
    """The trained VLA of `run_dir` (vla.inference.load)."""
    from vla.inference import load as _load

    return _load(run_dir, device=device, trust_remote_code=trust_remote_code)


__all__ = ["load"]
