"""The VLA task on the shared core (`python train.py task=vla`): a VLM of the design space fine-tuned to emit
action tokens after an instruction prompt, OpenVLA-style.

`VLATask` is what conf/task/vla.yaml names. The model is exactly a VLM (`vlm.model.build_vlm`: encoder × projector
× backbone, LoRA adapters with `lora.enabled`), so its weights are a VLM run's: `init_from` takes a trained VLM
run, a VLA run or an HF Llava folder (through `VLMTask.init_from`), and the trained VLA exports as HF Llava
(vla/export.py). What turns it into a policy is data, not weights: the action tokenizer fitted on the normalised
training chunks (`RUN_DIR/action_tokenizer/`) and `RUN_DIR/vla.json` (the normalisation statistics, the
vocabulary mapping of vla/actions.py, the task list and instructions, the camera), written when the model is built
and read by `vla.load(RUN_DIR)`.

Data (`cfg.env`, as the behavior task reads it: `env.dataset` is a LeRobot folder or a `_target_` that collects
Meta-World demonstrations; `env.cameras`): each frame of a demonstration becomes a sample of vla/dataset.py. The
VLA looks at one camera and at no proprioceptive state (OpenVLA's inputs). An env without cameras
(`env=metaworld_mt10`) is accepted when its demonstrations are collected by `behavior.demos.ensure_demos`: they are
collected (or read from the cache) rendered from `vla.camera` at `vla.image_size` px, which rollouts then render
too; a LeRobot dataset without a camera feature is refused.

Parts a phase may train: `encoder`, `projector`, `backbone` (LoRA: the backbone's adapters). Smart sifting ranks
samples by their mean action-token loss (`VLMModule.sample_losses`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from behavior.codec import ActionCodec
from behavior.dataset import build_demonstrations
from behavior.lightning import dataset_path, simulated_tasks
from behavior.normalize import ActionNormalizer
from behavior.tokenizers import tokenizer_from_config
from core.data import StreamDataModule
from data.atomic import write_json
from data.lerobot import read_dataset
from vla.actions import ActionVocabulary
from vla.dataset import VLADataset, instruction_of, prompt_ids
from vlm.dataset import Collator
from vlm.lightning import VLMModule, VLMTask
from vlm.model import VLM, build_vlm
from vlm.tiny import fingerprints_in

console = Console()
SPEC = "vla.json"
TOKENIZER_DIR = "action_tokenizer"
CAMERA_PREFIX = "observation.images."


@dataclass
class VLASpec:
    """What makes a VLM a policy (saved as vla.json + action_tokenizer/)."""

    vocabulary: ActionVocabulary
    normalizer: ActionNormalizer
    tasks: list[str]
    instructions: list[str]
    camera: str                 # the camera feature, e.g. observation.images.corner2
    image_size: int | None      # the frame size the demonstrations were rendered at (rollouts render the same)
    simulated: bool
    env: dict = field(default_factory=dict)

    @property
    def codec(self) -> ActionCodec:
        return self.vocabulary.codec

    def to_json(self) -> dict:
        codec = self.codec
        return {"tasks": self.tasks, "instructions": self.instructions, "cameras": [self.camera],
                "image_size": self.image_size, "simulated": self.simulated, "env": self.env,
                "chunk_size": codec.chunk_size, "action_dim": codec.action_dim, "max_tokens": codec.max_tokens,
                "normalizer": {"q01": self.normalizer.q01.tolist(), "q99": self.normalizer.q99.tolist()},
                "vocabulary": self.vocabulary.spec()}

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.codec.tokenizer.save(str(run_dir / TOKENIZER_DIR))
        write_json(run_dir / SPEC, self.to_json())


def vla_env(cfg: DictConfig) -> tuple[str, str, int | None]:
    """(dataset folder, camera feature, frame size) of the run's env: its camera (`env.cameras`, one), or, for an
    env without one whose demonstrations `ensure_demos` collects, those demonstrations rendered from `vla.camera`."""
    cameras = list(cfg.env.get("cameras") or [])
    size = cfg.env.get("image_size")
    node = cfg.env.dataset
    if not cameras:
        target = str(node.get("_target_", "")) if OmegaConf.is_config(node) else ""
        if not target.endswith("ensure_demos"):
            raise ValueError(f"env {cfg.env.get('name')} has no camera (env.cameras) and its dataset is not collected "
                             "here: a VLA needs camera frames; set env.cameras=[observation.images.NAME] to a camera "
                             "feature of the dataset")
        size = int(cfg.vla.image_size)
        node = OmegaConf.create({**OmegaConf.to_container(node, resolve=True), "camera": str(cfg.vla.camera), "size": size})
        cameras = [CAMERA_PREFIX + str(cfg.vla.camera)]
    if len(cameras) > 1:
        raise ValueError(f"env.cameras={cameras}: the VLA looks at one camera (HF Llava takes one image per prompt); "
                         "name one")
    return dataset_path(node), cameras[0], (int(size) if size else None)


def read_demonstrations(cfg: DictConfig, chunk_size: int):
    """(demonstrations without frames, the LeRobot data, camera feature, frame size) of the run's env."""
    path, camera, size = vla_env(cfg)
    data = read_dataset(path)
    tasks = simulated_tasks(cfg, data)
    demos = build_demonstrations(data, 1, chunk_size, state=None, cameras=[camera], tasks=tasks, images=False)
    demos.simulated = tasks is not None
    console.print(f"demonstrations {path}: {len(data.episodes)} episodes, {len(demos)} samples, "
                  f"{len(demos.tasks)} tasks, camera {camera}")
    return demos, data, camera, size


def env_record(cfg: DictConfig) -> dict:
    """The env values the rollouts read (name, tasks, horizon, eval_seed), as plain values."""
    env = OmegaConf.to_container(cfg.env, resolve=True)
    return {k: env.get(k) for k in ("name", "tasks", "horizon", "eval_seed")}


class VLAModule(VLMModule):
    """The VLM's module: parts encoder/projector/backbone, LoRA, per-sample losses, token and FLOP counts."""


class VLADataModule(StreamDataModule):
    def __init__(self, dataset: VLADataset, pad_token_id: int, micro_batch_size: int, seed: int):
        super().__init__(micro_batch_size, seed)
        self.dataset, self.pad_token_id = dataset, pad_token_id
        self.num_samples = len(dataset)

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self.dataset
        self.collate_fn = Collator(self.pad_token_id)

    def report(self) -> dict:
        return {"samples": self.num_samples}


class VLATask:
    """The VLA as a `core.interfaces.Task` (`task=vla`, conf/task/vla.yaml)."""

    def __init__(self, name: str = "vla"):
        self.name = name

    def build_model(self, cfg: DictConfig, run_dir: Path) -> VLM:
        """The VLM with its action spec (`model.vla`, a `VLASpec`): the codec fitted on the normalised chunks, mapped
        onto the backbone's vocabulary; rank 0 writes it to `run_dir`."""
        demos, _, camera, size = read_demonstrations(cfg, int(cfg.tokenizer.chunk_size))
        chunks = demos.normalised_chunks()
        codec = ActionCodec(tokenizer_from_config(cfg.tokenizer), int(cfg.tokenizer.chunk_size), chunks.shape[-1]).fit(chunks)
        model = build_vlm(cfg)
        model.vla = VLASpec(ActionVocabulary.for_backbone(codec, model.backbone), demos.normalizer, list(demos.tasks),
                            [instruction_of(t) for t in demos.tasks], camera, size, bool(demos.simulated),
                            env_record(cfg))
        if rank_zero_only.rank == 0:
            model.vla.save(Path(run_dir))
        return model

    def input_identities(self, cfg: DictConfig) -> dict[str, str]:
        return fingerprints_in(cfg.encoder, cfg.backbone)  # the tiny flavours' weights (core.run.check_inputs)

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: VLM, run_dir: Path,
                         micro_batch_size: int, seed: int) -> VLADataModule:
        """Every frame of the demonstrations with its prompt and action tokens (labels: the action tokens only)."""
        spec: VLASpec = model.vla
        demos, data, camera, _ = read_demonstrations(cfg, spec.codec.chunk_size)
        frames = data.camera_frames(camera)
        tokens = spec.vocabulary.encode(demos.normalised_chunks())
        fmt = model.prompt_format
        prompts = [prompt_ids(fmt, instruction_of(t)) for t in demos.tasks]
        dataset = VLADataset(frames, demos.task, tokens, prompts, model.encoder.transform, fmt.image_position)
        return VLADataModule(dataset, model.tokenizer.pad_token_id, micro_batch_size, seed)

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: VLM, total_steps: int) -> VLAModule:
        return VLAModule(model, phase, total_steps)

    def init_from(self, model: VLM, source: Path) -> bool:
        """An HF Llava folder (or a plain run into a LoRA model) as the VLM task loads it; any other run directory
        (a VLM or a VLA run: the same weights) is left to the core."""
        return VLMTask().init_from(model, source)
