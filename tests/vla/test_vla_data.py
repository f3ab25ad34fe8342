"""VLA samples (vla/dataset.py, vla/lightning.py): the prompt of the instruction then the action tokens, labels on
the action tokens only (also after the image patches are spliced in), instructions from task names."""

from __future__ import annotations

import numpy as np
import torch

from tests.vla.conftest import TASKS, vla_cfg
from vla.dataset import PROMPT, instruction_of
from vla.lightning import VLATask
from vlm.dataset import Collator
from vlm.prompting import IGNORE_INDEX


def test_instructions_of_task_names():
    assert instruction_of("reach-v3") == "reach"
    assert instruction_of("button-press-topdown-v3") == "button press topdown"
    assert instruction_of("push the red block left") == "push the red block left"


def test_labels_are_the_action_tokens_only(tmp_path, lerobot_dir):
    cfg = vla_cfg(tmp_path, lerobot_dir)
    task = VLATask()
    model = task.build_model(cfg, tmp_path / "run")
    phase = cfg.stage.phases.vla
    dm = task.build_datamodule(cfg, phase, model, tmp_path / "run", micro_batch_size=4, seed=0)
    dm.setup("fit")
    spec, fmt = model.vla, model.prompt_format
    n = spec.vocabulary.num_tokens
    assert n == 2 and dm.num_samples == 48                       # chunk 1 x 2 dims; 6 episodes x 8 frames
    for index in (0, 7, 30):
        row = dm.train_dataset[index]
        task_name = TASKS[int(dm.train_dataset.task[index])]
        prompt, _ = fmt.build([("human", PROMPT.format(instruction=task_name))], generation=True)
        assert row["input_ids"][: len(prompt)] == prompt and len(row["input_ids"]) == len(prompt) + n
        assert row["labels"] == [IGNORE_INDEX] * len(prompt) + row["input_ids"][len(prompt):]
        assert all(spec.vocabulary.first <= t < spec.vocabulary.base_vocab for t in row["input_ids"][len(prompt):])
    # hand-derived (OpenVLA's arithmetic): the raw chunk of each frame, normalised with the dataset's q01/q99 to
    # [-1, 1], bin d = digitize on 256 edges, token = the last id of the base vocabulary + 1 - d
    from data.lerobot import read_dataset

    data = read_dataset(lerobot_dir)
    frames = data.frames()
    raw = frames["action"].astype(np.float64).reshape(len(frames["episode_index"]), -1)
    q01, q99 = np.asarray(data.stats["action"]["q01"]), np.asarray(data.stats["action"]["q99"])
    norm = np.clip(2 * (raw - q01) / (q99 - q01) - 1, -1, 1)
    expected = spec.vocabulary.base_vocab - np.digitize(norm, np.linspace(-1, 1, 256))
    np.testing.assert_array_equal(dm.train_dataset.tokens, expected)
    # spliced: the image patches are not trained either, and the trained positions are the action tokens
    batch = Collator(model.tokenizer.pad_token_id)([dm.train_dataset[i] for i in range(4)])
    _, mask, labels = model.splice(batch["input_ids"], batch["attention_mask"], batch["labels"], batch["pixel_values"],
                                   batch["image_mask"], batch["image_positions"])
    trained = labels != IGNORE_INDEX
    assert int(trained.sum()) == 4 * n
    assert torch.equal(labels[trained].view(4, n), torch.tensor([dm.train_dataset[i]["input_ids"][-n:] for i in range(4)]))
