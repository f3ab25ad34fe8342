"""A toy TrainModule and data for core tests that drive a Lightning Trainer directly: a linear layer on
8 batches of 4 rows per epoch, each row with 3 real tokens and 2 padding ones, 1e6 FLOPs per token."""

import lightning as L
import torch

from core.module import TrainModule


class Toy(TrainModule):
    def parts(self):
        return {"net": self.model}

    def compute_loss(self, batch):
        return self.model(batch["x"]).pow(2).mean()

    def flops_per_token(self):
        return 1e6


class ToyData(L.LightningDataModule):
    def train_dataloader(self):
        mask = torch.ones(8, 5, dtype=torch.long)
        mask[:, 3:] = 0  # 3 real tokens per row, 2 padding
        rows = [{"x": torch.randn(4), "attention_mask": m} for m in mask]
        return torch.utils.data.DataLoader(rows * 4, batch_size=4)
