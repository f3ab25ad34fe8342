"""Demonstrations → VLA training samples: (camera frame, instruction prompt, action tokens), labels on the actions.

A sample is one frame of a LeRobot-format demonstration (behavior/dataset.py reads it: the action chunk t..t+H-1,
normalised with the dataset's q01/q99 and tokenised by the run's `ActionCodec`), shown to the VLM as

    input_ids = prompt_ids(instruction) + action_tokens        labels = [IGNORE_INDEX] * len(prompt) + action_tokens

`prompt_ids` is the backbone's prompt format for one user turn, up to the assistant cue, exactly the ids generation
starts from (`PromptFormat.build(..., generation=True)`), with the OpenVLA question `PROMPT`; the action tokens follow
as ids (vla/actions.py), never as text (a round trip through text would re-tokenize them). Nothing but the action
tokens is trained (no BOS, prompt, patches or end-of-turn token), OpenVLA's "loss on the action tokens" with its
stop token left out: an action chunk has a fixed number of tokens, which decoding generates and stops at.
A variable-length tokenizer (FAST) ends its tokens with the end-of-turn token, which is then trained too.

The frame (the env's camera, `env.cameras[0]`) goes where the VLM puts a single image, right after BOS. Frames are
kept as uint8 and transformed by the encoder's own transform per sample (`VLADataset`), as the VLM task does.

Instructions: a Meta-World task name becomes its words (`instruction_of`: "pick-place-v3" → "pick place", the
version dropped and dashes as spaces); any other dataset's task strings are used as they are.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from vlm.prompting import IGNORE_INDEX

PROMPT = "What action should the robot take to {instruction}?"  # OpenVLA's prompt
METAWORLD_TASK = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)-v\d+$")


def instruction_of(task: str) -> str:
    """The instruction for a task string: a Meta-World name's words ("button-press-topdown-v3" → "button press
    topdown"), else the string itself."""
    match = METAWORLD_TASK.match(task)
    return match.group(1).replace("-", " ") if match else task.strip()


def prompt_ids(prompt_format, instruction: str) -> list[int]:
    """The ids of the prompt for `instruction`, up to the assistant cue (what generation continues)."""
    ids, _ = prompt_format.build([("human", PROMPT.format(instruction=instruction))], generation=True)
    return ids


def training_row(prompt: list[int], action_tokens) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one sample: the prompt then the action tokens (IGNORE padding dropped); labels
    IGNORE_INDEX everywhere but on the action tokens."""
    tokens = [int(t) for t in action_tokens if int(t) != IGNORE_INDEX]
    return list(prompt) + tokens, [IGNORE_INDEX] * len(prompt) + tokens


class VLADataset(Dataset):
    """Samples of the frames `rows`: uint8 frames (N, H, W, 3), task indices (N,), action tokens (N, T)."""

    def __init__(self, frames: np.ndarray, task: np.ndarray, tokens: np.ndarray, prompts: list[list[int]],
                 transform, image_position: int):
        self.frames, self.task, self.tokens, self.prompts = frames, task, tokens, prompts
        self.transform, self.image_position = transform, int(image_position)

    def __len__(self) -> int:
        return len(self.task)

    def __getitem__(self, index: int) -> dict:
        ids, labels = training_row(self.prompts[int(self.task[index])], self.tokens[index])
        pixels = self.transform(Image.fromarray(np.asarray(self.frames[index], dtype=np.uint8)))
        return {"input_ids": ids, "labels": labels, "pixel_values": pixels, "image_positions": [self.image_position]}


def frame_pixels(transform, frames) -> torch.Tensor:
    """uint8 frames (B, H, W, 3) or PIL images → the encoder's inputs (B, 3, h, w)."""
    images = [f if isinstance(f, Image.Image) else Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    return torch.stack([transform(im) for im in images])
