"""The text every tiny tokenizer is trained on: the embedded benchmark's language, prompt formats, plain English.

`corpus()` is the `tiny_llama` tokenizer's training text; `chat_corpus()` adds the
chat-template role words that the other tiny language families' templates use.
"""

from __future__ import annotations

from data import sort_of_clevr
from vlm.prompting import VICUNA_SYSTEM

CHAT_ROLES = ["system", "user", "assistant", "model", "You are a helpful assistant.", "Input: \nOutput:"]


def corpus() -> list[str]:
    """Sort-of-CLEVR questions, answers and captions, the prompt formats' fixed text, and two English sentences."""
    lines = [VICUNA_SYSTEM, "In: \nOut:", " USER: ASSISTANT:", "[INST] [/INST]", sort_of_clevr.CAPTION_PROMPT]
    answers = [*sort_of_clevr.SHAPES, "left", "right", "top", "bottom", *"123456"]
    for color in sort_of_clevr.COLORS:
        for template in sort_of_clevr.TEMPLATES.values():
            lines += [f"In: {template.format(c=color)}\nOut: {a}" for a in answers]
        for shape in sort_of_clevr.SHAPES:
            lines += [f"{color} {v} {h} {shape}." for v in ("top", "bottom") for h in ("left", "right")]
    lines += ["The quick brown fox jumps over the lazy dog.", "What is in the picture? A cat sitting on a mat."]
    return lines * 4


def chat_corpus() -> list[str]:
    """`corpus()` and the chat templates' role words."""
    return corpus() + CHAT_ROLES * 4
