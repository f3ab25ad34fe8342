"""Prompt formats: a conversation → `input_ids` and `labels`, tokenized turn by turn.

Every format renders a conversation as a list of segments (text, trained?);
each segment is tokenized on its own and the ids are concatenated, so the
label mask lines up with the tokens by construction (no "tokenization
mismatch" can silently zero a sample). Labels are -100 on BOS, the system
prompt and user turns; assistant tokens and their end-of-turn token are kept.

Formats (`backbone.prompt_format`):
- `base`: `<s>In: {q}\\nOut: {a}</s>` per turn (base LMs, Prismatic's "pure" prompt);
- `vicuna`: Vicuna v1.5's system line, then ` USER: {q} ASSISTANT: {a}</s>`;
- `chat_template`: the tokenizer's own chat template (instruct models); the
  assistant span is the text the template adds for the assistant message.
The `<image>` placeholder is removed from the text: the VLM splices the image
patches right after BOS.
"""

from __future__ import annotations

import re

IGNORE_INDEX = -100
IMAGE_PLACEHOLDER = re.compile(r"\s*<image>\s*")
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def strip_image_placeholder(text: str) -> str:
    return IMAGE_PLACEHOLDER.sub(" ", text).strip()


class PromptFormat:
    """Base class: subclasses turn (role, text) turns into (text, trained) segments."""

    add_bos = True  # prepend the tokenizer's BOS id
    appends_eos = True  # append the EOS id to each assistant turn (the end-of-turn token that is trained)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def segments(self, turns: list[tuple[str, str]], generation: bool) -> list[tuple[str, bool]]:
        raise NotImplementedError

    def build(self, turns: list[tuple[str, str]], generation: bool = False) -> tuple[list[int], list[int]]:
        """turns: [("human"|"gpt", text), ...] → (input_ids, labels).

        With `generation=True` the turns end with a human message and the ids end
        with the prompt for the assistant's answer (no labels are meaningful)."""
        tok = self.tokenizer
        ids: list[int] = []
        labels: list[int] = []
        if self.add_bos and tok.bos_token_id is not None:
            ids.append(tok.bos_token_id)
            labels.append(IGNORE_INDEX)
        for text, trained in self.segments([(r, strip_image_placeholder(t)) for r, t in turns], generation):
            piece = tok(text, add_special_tokens=False)["input_ids"] if text else []
            if trained and self.appends_eos:
                piece = piece + [tok.eos_token_id]
            ids += piece
            labels += piece if trained else [IGNORE_INDEX] * len(piece)
        return ids, labels

    @property
    def image_position(self) -> int:
        """Index in `input_ids` where the image patches are spliced in (right after BOS)."""
        return 1 if self.add_bos and self.tokenizer.bos_token_id is not None else 0


class BaseFormat(PromptFormat):
    def segments(self, turns, generation):
        out = []
        for role, text in turns:
            out.append((f"In: {text}\nOut:", False) if role == "human" else (f" {text}", True))
        return out


class VicunaFormat(PromptFormat):
    def segments(self, turns, generation):
        out = [(VICUNA_SYSTEM, False)]
        for role, text in turns:
            out.append((f" USER: {text} ASSISTANT:", False) if role == "human" else (f" {text}", True))
        return out


class ChatTemplateFormat(PromptFormat):
    """Uses `tokenizer.apply_chat_template`; the template itself writes BOS and end-of-turn tokens."""

    add_bos = False
    appends_eos = False

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"prompt_format=chat_template needs a tokenizer with a chat template ({tokenizer.name_or_path} has none)")

    def _render(self, messages, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def segments(self, turns, generation):
        messages: list[dict] = []
        out: list[tuple[str, bool]] = []
        rendered = ""
        for role, text in turns:
            messages.append({"role": "user" if role == "human" else "assistant", "content": text})
            full = self._render(messages, generation_prompt=(role == "human"))
            if not full.startswith(rendered):
                raise ValueError(
                    f"the chat template of {self.tokenizer.name_or_path} re-renders earlier turns differently, "
                    "so turn-by-turn label masks would drift; use prompt_format=base or vicuna for this backbone"
                )
            out.append((full[len(rendered):], role == "gpt"))
            rendered = full
        if not generation and out and not out[-1][1]:
            raise ValueError("a training conversation must end with an assistant turn")
        return out

    @property
    def image_position(self) -> int:
        return 1 if self.tokenizer.bos_token_id is not None and self._starts_with_bos() else 0

    def _starts_with_bos(self) -> bool:
        ids, _ = self.build([("human", "x")], generation=True)
        return bool(ids) and ids[0] == self.tokenizer.bos_token_id


FORMATS = {"base": BaseFormat, "vicuna": VicunaFormat, "chat_template": ChatTemplateFormat}


def build_prompt_format(name: str, tokenizer) -> PromptFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown prompt_format {name!r}; choose from {sorted(FORMATS)}")
    return FORMATS[name](tokenizer)
