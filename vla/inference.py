"""`vla.load(RUN_DIR)` → a `VLAPolicy`: `predict_action(images, instructions)` gives continuous actions (B, H, D).

Loading rebuilds the VLM with `vlm.inference.load` (the run's encoder/projector/backbone configs checked against
conf/'s, the weights checked, nothing of the run's own code run) and reads the action side from the run's files:
the action tokenizer (`action_tokenizer/`, a class of behavior.tokenizers only), `vla.json` (the normalisation
statistics, the vocabulary mapping, the tasks and instructions, the camera).

Decoding (`action_tokens`): the prompt of each instruction (vla/dataset.py), left-padded, the frame's patches
spliced after BOS (`VLM.splice`), then the backbone's HF `generate` with the KV cache for exactly the chunk's number
of tokens, every id but the action ids suppressed (`suppress_tokens`, so each generated id decodes); greedy at
temperature 0, else sampled (seeded from the caller's generator). The ids map back to the codec's
(vla/actions.py), the codec decodes normalised chunks, and the dataset's q01/q99 un-normalise them.

`RolloutPolicy(policy)` is the adapter behavior/rollout.py's `rollout` drives: no state (`state_dim` 0), one
observation, the run's camera and tasks, `vision.pixels` (the encoder's transform of a rendered frame) and `act`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from behavior.codec import ActionCodec
from behavior.normalize import ActionNormalizer
from behavior.tokenizers import load_tokenizer
from core.safe_load import UnsafeConfigError
from data.atomic import read_json
from vla.actions import ActionVocabulary
from vla.dataset import frame_pixels, instruction_of, prompt_ids
from vla.lightning import SPEC, TOKENIZER_DIR, VLASpec
from vlm.model import VLM


def read_spec(run_dir: Path, model: VLM) -> VLASpec:
    """The run's VLASpec, its vocabulary checked against the loaded backbone."""
    spec = read_json(run_dir / SPEC)
    if not isinstance(spec, dict) or "vocabulary" not in spec or "normalizer" not in spec:
        raise UnsafeConfigError(f"{run_dir / SPEC} is not a VLA spec; restore it from the run's source or retrain")
    codec = ActionCodec(load_tokenizer(str(run_dir / TOKENIZER_DIR)), spec["chunk_size"], spec["action_dim"],
                        max_tokens=spec.get("max_tokens"))
    vocabulary = ActionVocabulary.for_backbone(codec, model.backbone)
    if vocabulary.spec() != spec["vocabulary"]:
        raise ValueError(f"{run_dir / SPEC}: the vocabulary mapping {spec['vocabulary']} is not the one this backbone "
                         f"gives ({vocabulary.spec()}); the run's backbone or tokenizer changed")
    normalizer = ActionNormalizer(q01=spec["normalizer"]["q01"], q99=spec["normalizer"]["q99"])
    return VLASpec(vocabulary, normalizer, list(spec["tasks"]), list(spec["instructions"]), spec["cameras"][0],
                   spec.get("image_size"), bool(spec.get("simulated", False)), spec.get("env") or {})


def load(run_dir, device: str | torch.device = "cpu", trust_remote_code: bool = False) -> VLAPolicy:
    """The trained VLA of a run (task=vla), in eval mode."""
    from vlm.inference import load as load_vlm

    run_dir = Path(run_dir)
    for name in ("config.yaml", SPEC, "model.safetensors"):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir / name} is missing: is {run_dir} a finished VLA run (task=vla)?")
    model = load_vlm(run_dir, device=device, trust_remote_code=trust_remote_code)
    return VLAPolicy(model, read_spec(run_dir, model))


@torch.no_grad()
def generate_action_tokens(model: VLM, vocabulary: ActionVocabulary, pixels: torch.Tensor, prompts: list[list[int]],
                           temperature: float = 0.0, seed: int | None = None, use_cache: bool = True) -> list[list[int]]:
    """Backbone ids of each row's action chunk: `pixels` (B, 3, h, w) the encoder's inputs, `prompts` the prompt ids."""
    device = next(model.parameters()).device
    fmt, tok = model.prompt_format, model.tokenizer
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):  # left padding: every row's last prompt token at the same place
        ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), 1
    pad = width - torch.tensor([len(p) for p in prompts])
    positions = (pad + fmt.image_position)[:, None]
    embeds, mask, _ = model.splice(ids.to(device), mask.to(device), None, pixels.to(device),
                                   torch.ones(len(prompts), dtype=torch.bool, device=device), positions.to(device))
    n = vocabulary.num_tokens
    length = dict(max_new_tokens=n, min_new_tokens=n) if vocabulary.fixed_length else dict(max_new_tokens=n)
    sampling = dict(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        out = model.backbone.model.generate(inputs_embeds=embeds, attention_mask=mask, use_cache=use_cache,
                                            suppress_tokens=vocabulary.suppressed, eos_token_id=fmt.stop_token_ids,
                                            pad_token_id=tok.pad_token_id, **length, **sampling)
    rows = out.tolist()
    if not vocabulary.fixed_length:  # up to and including the first end-of-turn token
        rows = [r[: r.index(vocabulary.end_of_turn_id) + 1] if vocabulary.end_of_turn_id in r else r for r in rows]
    return rows


class VLAPolicy:
    """A VLM and its action spec: instructions and frames in, continuous action chunks out."""

    def __init__(self, model: VLM, spec: VLASpec):
        self.model, self.spec = model.eval(), spec

    @property
    def vocabulary(self) -> ActionVocabulary:
        return self.spec.vocabulary

    def pixels(self, images) -> torch.Tensor:
        """PIL images or uint8 frames (B, H, W, 3) → the encoder's inputs; a float tensor (B, 3, h, w) is taken as
        inputs already."""
        if torch.is_tensor(images) and images.is_floating_point():
            return images
        return frame_pixels(self.model.encoder.transform, list(images))

    def prompts(self, instructions: Sequence[str]) -> list[list[int]]:
        return [prompt_ids(self.model.prompt_format, instruction_of(i)) for i in instructions]

    def action_tokens(self, images, instructions: Sequence[str], temperature: float = 0.0, seed: int | None = None,
                      use_cache: bool = True) -> list[list[int]]:
        """The backbone ids of each row's action chunk (greedy at temperature 0)."""
        return generate_action_tokens(self.model, self.vocabulary, self.pixels(images), self.prompts(instructions),
                                      temperature, seed, use_cache)

    def predict_action(self, images, instructions: Sequence[str], state=None, temperature: float = 0.0,
                       seed: int | None = None) -> np.ndarray:
        """Continuous actions (B, H, D), decoded and un-normalised. `images`: one frame per row (PIL, uint8 (H, W, 3),
        or the encoder's inputs as a float tensor); `instructions`: task strings or instructions (a Meta-World task
        name becomes its words); `state` is accepted and unused (the VLA sees the image and the instruction)."""
        tokens = self.action_tokens(images, instructions, temperature, seed)
        return self.spec.normalizer.unnormalize(self.vocabulary.decode(tokens)).astype(np.float32)


class _Vision:
    def __init__(self, transform):
        self.transform = transform

    def pixels(self, frame: np.ndarray) -> np.ndarray:
        """One rendered (H, W, 3) uint8 frame → the encoder's input (3, h, w) float32."""
        return frame_pixels(self.transform, [frame])[0].numpy()


class RolloutPolicy:
    """What behavior.rollout.rollout drives (see its Agent): the VLA as a camera policy without state."""

    n_obs, state_dim = 1, 0

    def __init__(self, policy: VLAPolicy):
        self.policy = policy
        self.chunk_size = policy.vocabulary.codec.chunk_size
        self.tasks, self.cameras = policy.spec.tasks, [policy.spec.camera]
        self.simulated = policy.spec.simulated
        self.vision = _Vision(policy.model.encoder.transform)

    def act(self, states, task, temperature: float = 0.0, generator: torch.Generator | None = None, images=None):
        """(B, H, D) actions for the envs' current frames (`images` (B, 1, 3, h, w)) and tasks (indices into `tasks`)."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if temperature > 0 else None
        instructions = [self.tasks[int(t)] for t in task]
        return self.policy.predict_action(images[:, 0].float(), instructions, temperature=temperature, seed=seed)
