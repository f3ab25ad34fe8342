"""Behavior models: action tokenizers, GPT and MLP policies, Meta-World demonstrations and rollouts (docs/behavior.md)."""
