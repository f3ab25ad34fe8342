"""refract.vlm: image encoders × projectors × language backbones.

`vlm.load(run_dir)` returns a trained model whose `generate(images, prompts,
max_new_tokens=..., do_sample=False)` returns answers as strings. Loading runs none of the run's own code;
`trust_remote_code=True` lets a backbone that asks for it run its model's code (vlm/inference.py).
"""


def load(run_dir, device="cpu", trust_remote_code: bool = False):
    from vlm.inference import load as _load

    return _load(run_dir, device, trust_remote_code=trust_remote_code)
