"""Prompt formats: a conversation → `input_ids` and `labels`, tokenized turn by turn.

Every format renders a conversation as a list of segments (text, trained?);
each segment is tokenized on its own and the ids are concatenated, so the
label mask lines up with the tokens by construction (no "tokenization
mismatch" can silently zero a sample). Labels are -100 on BOS, the system
prompt and user turns; assistant tokens and their end-of-turn token are kept.

Formats (`backbone.prompt_format` names one of conf/prompt_format/*.yaml, whose `_target_` is the class):
- `base`: `<s>In: {q}\\nOut: {a}</s>` per turn (base LMs, Prismatic's "pure" prompt);
- `vicuna`: Vicuna v1.5's system line, then ` USER: {q} ASSISTANT: {a}</s>`;
- `plain`: LLaVA-1.5's stage-1 (`conv_llava_plain`) sample: BOS, the image, then the caption and "\\n"; the
  human text is dropped, the caption and its "\\n" are trained (a phase selects it with `prompt_format: plain`);
- `chat_template`: the tokenizer's own chat template (instruct models); the
  assistant span is the text the template adds for the assistant message,
  up to and including the template's end-of-turn token (e.g. `<|eot_id|>`,
  `<|im_end|>`, `<end_of_turn>`; text the template writes after it, such as a
  newline, is not trained).
BOS: `base` and `vicuna` start with BOS when the tokenizer adds it itself or
has a BOS token of its own; a tokenizer without one (Qwen2) or whose "BOS" is
its EOS/document separator and is never added (phi-2, GPT-2) gets none, and the
image then goes first (`image_position` 0). `chat_template` writes what the
template writes. `stop_token_ids` (end-of-turn and EOS) end generation.
Images: with at most one image (`build`) the `<image>` placeholder is removed
from the text and the VLM splices the image patches right after BOS
(`image_position`). With several images (`build_interleaved`) each placeholder
marks where its image's patches go: the text on either side of it is
tokenized on its own (whitespace before the placeholder and one newline right
after it are dropped; LLaVA writes `<image>\n`) and
`positions[k]` is the index in `input_ids` that image k's patches are spliced
in front of. `build_with_images` picks between the two by the image count.
"""

from __future__ import annotations

import re

from hydra.utils import instantiate

from core.conf import group_option

IGNORE_INDEX = -100
IMAGE_PLACEHOLDER = re.compile(r"\s*<image>\s*")
IMAGE_SLOT = re.compile(r"\s*<image>\n?")  # where an image goes in interleaved text
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def strip_image_placeholder(text: str) -> str:
    return IMAGE_PLACEHOLDER.sub(" ", text).strip()


def tokenizer_uses_bos(tok) -> bool:
    """Whether prompts start with the tokenizer's BOS: it adds BOS itself (Llama, Mistral, Gemma), or it has a BOS
    token distinct from EOS (a tokenizer saved without a post-processor). No BOS token (Qwen2), or a "BOS" that is
    the EOS/document separator and is never added (phi-2, GPT-2, CodeGen): no BOS."""
    bos = tok.bos_token_id
    if bos is None:
        return False
    return bos != tok.eos_token_id or tok("a")["input_ids"][:1] == [bos]


class PromptFormat:
    """Base class: subclasses turn (role, text) turns into (text, trained) segments."""

    add_bos = True  # prepend the tokenizer's BOS id (when `tokenizer_uses_bos`)
    appends_eos = True  # append the EOS id to each assistant turn (the end-of-turn token that is trained)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.uses_bos = self.add_bos and tokenizer_uses_bos(tokenizer)

    @property
    def end_of_turn_id(self) -> int:
        """The token that ends an assistant turn (trained with the answer; generation stops on it)."""
        return self.tokenizer.eos_token_id

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end generation: the end-of-turn token, then EOS if different."""
        ids = [self.end_of_turn_id, self.tokenizer.eos_token_id]
        return [i for k, i in enumerate(ids) if i is not None and i not in ids[:k]]

    def segments(self, turns: list[tuple[str, str]], generation: bool) -> list[tuple[str, bool]]:
        raise NotImplementedError

    def build(self, turns: list[tuple[str, str]], generation: bool = False) -> tuple[list[int], list[int]]:
        """turns: [("human"|"gpt", text), ...] → (input_ids, labels).

        With `generation=True` the turns end with a human message and the ids end
        with the prompt for the assistant's answer (no labels are meaningful)."""
        ids, labels, _ = self._build(turns, generation, interleave=False)
        return ids, labels

    def build_interleaved(self, turns: list[tuple[str, str]], generation: bool = False) -> tuple[list[int], list[int], list[int]]:
        """Like `build`, but every `<image>` placeholder stays a place for an image: also returns, per
        placeholder in order, the index in `input_ids` its image's patches are spliced in front of."""
        return self._build(turns, generation, interleave=True)

    def build_with_images(self, turns: list[tuple[str, str]], num_images: int,
                          generation: bool = False) -> tuple[list[int], list[int], list[int]]:
        """(input_ids, labels, image positions) of a conversation with `num_images` images: none or one
        image as `build` (one image goes right after BOS, whether or not the text has a placeholder);
        several images where their placeholders are (one per image, else ValueError)."""
        if num_images <= 1:
            ids, labels = self.build(turns, generation)
            return ids, labels, [self.image_position] * num_images
        ids, labels, positions = self.build_interleaved(turns, generation)
        if len(positions) != num_images:
            raise ValueError(f"{num_images} images but {len(positions)} <image> placeholders; "
                             "put one <image> in the user turns per image")
        return ids, labels, positions

    def _build(self, turns, generation: bool, interleave: bool) -> tuple[list[int], list[int], list[int]]:
        tok = self.tokenizer
        ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        if self.uses_bos:
            ids.append(tok.bos_token_id)
            labels.append(IGNORE_INDEX)
        clean = (lambda t: t) if interleave else strip_image_placeholder
        for text, trained in self.segments([(r, clean(t)) for r, t in turns], generation):
            piece: list[int] = []
            for k, part in enumerate(IMAGE_SLOT.split(text) if interleave else [text]):
                if k:
                    positions.append(len(ids) + len(piece))
                piece += tok(part, add_special_tokens=False)["input_ids"] if part else []
            if trained and self.appends_eos:
                piece = piece + [tok.eos_token_id]
            ids += piece
            labels += piece if trained else [IGNORE_INDEX] * len(piece)
        return ids, labels, positions

    @property
    def image_position(self) -> int:
        """Index in `input_ids` where the image patches are spliced in (right after BOS; first without BOS)."""
        return 1 if self.uses_bos else 0


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


class PlainFormat(PromptFormat):
    """LLaVA's `plain` conversation (LLaVA-1.5 stage 1): `<image>` + caption + sep, sep = "\\n", no template.

    LLaVA replaces the human turn by the image alone (`source[0]['value'] = DEFAULT_IMAGE_TOKEN`), so the sample is
    BOS, the image's patches, then the gpt text followed by "\\n" (no EOS); BOS and the image are masked, the caption
    and "\\n" are trained. A record is one human turn and one caption, as in LLaVA (`assert len(source) == 2`).
    For generation the prompt is BOS and the image: the model writes a caption."""

    appends_eos = False
    sep = "\n"

    def segments(self, turns, generation):
        if generation:
            if len(turns) != 1 or turns[0][0] != "human":
                raise ValueError("the plain format prompts with one human turn (the image): the model writes a caption")
            return []
        if len(turns) != 2 or [r for r, _ in turns] != ["human", "gpt"]:
            raise ValueError(f"the plain format takes one human turn and one caption (LLaVA's conv_llava_plain); this "
                             f"record has {len(turns)} turns; use a conversational prompt format for it")
        return [(turns[1][1] + self.sep, True)]

    @property
    def stop_token_ids(self) -> list[int]:
        """A caption ends with "\\n" (its separator) or EOS."""
        newline = self.tokenizer("\n", add_special_tokens=False)["input_ids"][-1:]
        ids = [self.tokenizer.eos_token_id, *newline]
        return [i for k, i in enumerate(ids) if i is not None and i not in ids[:k]]


class ChatTemplateFormat(PromptFormat):
    """Uses `tokenizer.apply_chat_template`; the template itself writes BOS and end-of-turn tokens."""

    add_bos = False
    appends_eos = False

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"prompt_format=chat_template needs a tokenizer with a chat template ({tokenizer.name_or_path} has none)")
        self.end_of_turn, self._end_of_turn_id = self._find_end_of_turn()
        ids, _ = self.build([("human", "x")], generation=True)
        self._image_position = 1 if tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id] else 0

    def _find_end_of_turn(self) -> tuple[str, int]:
        """The first token the template writes after an assistant message's content: (text, id)."""
        probe = "refract probe answer"
        rendered = self._render([{"role": "user", "content": "x"}, {"role": "assistant", "content": probe}], False)
        after = rendered[rendered.rfind(probe) + len(probe):] if probe in rendered else ""
        ids = self.tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
        text = self.tokenizer.decode(ids[:1]) if ids else ""
        if not text or not after.startswith(text):
            raise ValueError(
                f"the chat template of {self.tokenizer.name_or_path} writes no end-of-turn token after an assistant "
                f"message (it writes {after!r}); use prompt_format=base or vicuna for this backbone"
            )
        return text, ids[0]

    @property
    def end_of_turn_id(self) -> int:
        return self._end_of_turn_id

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
            piece = full[len(rendered):]
            if role == "gpt":  # train through the end-of-turn token; what the template writes after it is context
                if self.end_of_turn not in piece:
                    raise ValueError(f"the chat template wrote no {self.end_of_turn!r} after the answer {text!r}")
                end = piece.rfind(self.end_of_turn) + len(self.end_of_turn)
                out += [(piece[:end], True)] + ([(piece[end:], False)] if piece[end:] else [])
            else:
                out.append((piece, False))
            rendered = full
        if not generation and turns and turns[-1][0] != "gpt":
            raise ValueError("a training conversation must end with an assistant turn")
        return out

    @property
    def image_position(self) -> int:
        """1 when the template starts with BOS, else 0 (the image goes first)."""
        return self._image_position


def build_prompt_format(name: str, tokenizer) -> PromptFormat:
    """The format of conf/prompt_format/NAME.yaml (its `_target_`) for `tokenizer`."""
    node = group_option("prompt_format", name)
    fmt = instantiate(node, tokenizer=tokenizer)
    if not isinstance(fmt, PromptFormat):
        raise TypeError(f"conf/prompt_format/{name}.yaml: _target_={node._target_} is not a vlm.prompting.PromptFormat")
    return fmt
