"""Train a model: `python train.py [group=choice ...] [key=value ...]`.

Examples:
    python train.py                                   # the CPU demo: tiny VLM on the embedded Sort-of-CLEVR data
    python train.py encoder=siglip backbone=llama     # Prismatic's single-stage recipe on the LLaVA-1.5 mixture
    python train.py experiment=llava_v15_7b           # a published recipe (conf/experiment/, docs/recipes.md)
    python train.py -m encoder=siglip,clip backbone=llama stage=single_stage,two_stage

Running the same command again resumes its run from `runs/<name>/checkpoints/last.ckpt`.
The default trainer preset (`trainer=auto`) is the `gpu` preset on a machine with a CUDA GPU and the `cpu`
preset otherwise; `trainer=cpu`, `trainer=gpu`, `trainer=ddp`, `trainer=fsdp` choose one explicitly.
"""

import hydra
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from data.errors import DataError
from vlm.hub import ComponentLoadError
from core.cli import exit_on_user_error
from core.checkpoint import CheckpointError
from core.module import NoGradientError
from core.run import RecipeError, RunDirError, train
from core.run_lock import RunLockedError
from core.weights import WeightsError


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    with exit_on_user_error(ComponentLoadError, DataError, FileNotFoundError, RecipeError, MissingMandatoryValue,
                            CheckpointError, RunDirError, RunLockedError, WeightsError, FloatingPointError,
                            NoGradientError):
        return train(cfg)


if __name__ == "__main__":
    main()
