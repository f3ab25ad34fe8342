"""Pretraining the tiny components on the synthetic world, on the shared core.

`task=encoder_pretrain` (encoder_task.py, objectives in objectives.py) and `task=lm_pretrain` (lm_task.py);
their quality figures as benchmarks (quality.py: `encoder_probe`, `lm_perplexity`); what they read from the
world folder (world.py). vlm/tiny/pretrained.py turns a run into a `tiny:mini_*` flavour.
"""
