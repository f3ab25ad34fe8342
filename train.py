"""Train a model: `python train.py [group=choice ...] [key=value ...]`.

Examples:
    python train.py                                   # tiny VLM on the embedded Sort-of-CLEVR data
    python train.py encoder=siglip backbone=llama     # real components by name
    python train.py -m encoder=siglip,clip backbone=llama stage=single_stage,two_stage

Running the same command again resumes its run from `runs/<name>/checkpoints/last.ckpt`.
On a machine with a GPU the `gpu` trainer preset is the default.
"""

import sys

import hydra
from omegaconf import DictConfig

import vlm.tiny  # noqa: F401  (registers the ${tiny:NAME} config resolver)
from data.errors import DataError
from vlm.hub import ComponentLoadError
from core.cli import default_trainer_override, exit_on_user_error
from core.run import train


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    with exit_on_user_error(ComponentLoadError, DataError, FileNotFoundError):
        return train(cfg)


if __name__ == "__main__":
    sys.argv += default_trainer_override(sys.argv[1:])
    main()
