"""refract.vlm: image encoders × projectors × language backbones.

`vlm.load(run_dir)` returns a trained model whose `generate(images, prompts,
max_new_tokens=..., do_sample=False)` returns answers as strings.
"""


def load(run_dir, device="cpu"):
    from vlm.inference import load as _load

    return _load(run_dir, device)
