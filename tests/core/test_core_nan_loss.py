"""A non-finite loss stops training (FloatingPointError naming the phase and step) before the optimizer applies it:
no run trains to NaN and exits 0."""

import lightning as L
import pytest
import torch
from torch import nn

from tests.core.toy import Toy

PHASE = {"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}}


class RowsData(L.LightningDataModule):
    def __init__(self, rows):
        super().__init__()
        self.rows = rows

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=2)


def rows_with(bad_value, bad_row):
    rows = [{"x": torch.ones(4)} for _ in range(16)]
    rows[bad_row] = {"x": torch.full((4,), bad_value)}
    return rows


def fit(rows, accumulate=1, max_steps=8):
    torch.manual_seed(0)
    module = Toy(nn.Linear(4, 2), PHASE, total_steps=8)
    trainer = L.Trainer(accelerator="cpu", max_steps=max_steps, accumulate_grad_batches=accumulate, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=RowsData(rows))
    return module, trainer


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf")])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_non_finite_loss_stops_training_before_the_update(bad_value, accumulate):
    with pytest.raises(FloatingPointError, match=r"phase p: the training loss is (nan|inf) at optimizer step 2") as err:
        fit(rows_with(bad_value, bad_row=4 * accumulate), accumulate)  # the third optimizer step's first micro-batch
    assert "non-finite" in str(err.value)


def test_weights_are_those_of_the_last_good_step():
    good, _ = fit([{"x": torch.ones(4)} for _ in range(4)], max_steps=2)  # the two steps before the bad batch
    torch.manual_seed(0)
    module = Toy(nn.Linear(4, 2), PHASE, total_steps=8)
    trainer = L.Trainer(accelerator="cpu", max_steps=8, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(FloatingPointError):
        trainer.fit(module, datamodule=RowsData(rows_with(float("nan"), bad_row=4)))
    assert trainer.global_step == 2
    for mine, theirs in zip(module.parameters(), good.parameters()):
        assert torch.isfinite(mine).all() and torch.equal(mine, theirs)


def test_finite_losses_train_as_before():
    module, trainer = fit([{"x": torch.ones(4)} for _ in range(16)])
    assert trainer.global_step == 8 and all(torch.isfinite(p).all() for p in module.parameters())
