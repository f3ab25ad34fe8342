"""FLOP counts, the peak table and MFU: a tiny Llama's 6N + 12LdT by hand and against torch's flop counter;
the throughput callback's MFU against tokens/s x FLOPs per token / peak, and its windows (which micro-batches
each logged figure covers, on the steps Lightning writes logs for) against a fake clock."""

import csv

import lightning as L
import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from core.flops import chip_of, compute_dtype, decoder_flops_per_token, hf_decoder_flops_per_token, measure_flops, mfu, \
    non_embedding_params, peak_flops
from core.throughput import ThroughputMonitor
from tests.core.toy import Toy, ToyData


def tiny_llama(tie=False):
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, tie_word_embeddings=tie, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def test_peak_table_recognises_a100_h100_h200_by_name_and_dtype():
    assert chip_of("NVIDIA H200") == "h200-sxm" and chip_of("NVIDIA H200 NVL") == "h200-nvl"
    assert chip_of("NVIDIA H100 80GB HBM3") == "h100-sxm" and chip_of("NVIDIA H100 PCIe") == "h100-pcie"
    assert chip_of("NVIDIA A100-SXM4-80GB") == "a100" and chip_of("NVIDIA GeForce RTX 3090") is None
    assert peak_flops("NVIDIA H200", "bf16") == 989e12 and peak_flops("NVIDIA H100 80GB HBM3", "fp8") == 1979e12
    assert peak_flops("NVIDIA A100-PCIE-40GB", "bf16") == 312e12 and peak_flops("NVIDIA A100-PCIE-40GB", "fp8") is None
    assert compute_dtype("bf16-mixed") == "bf16" and compute_dtype("16-mixed") == "fp16" and compute_dtype("bf16-mixed", fp8=True) == "fp8"


def test_decoder_flops_per_token_by_hand_and_against_the_flop_counter():
    model, T = tiny_llama(), 32
    d, L_, ff, V = 64, 2, 128, 100
    n = L_ * (4 * d * d + 3 * d * ff + 2 * d) + d + V * d  # attention + MLP + norms per layer, final norm, lm_head
    assert non_embedding_params(model) == n == 88640
    assert hf_decoder_flops_per_token(model, T) == decoder_flops_per_token(n, L_, d, T) == 6 * 88640 + 12 * 2 * 64 * 32 == 580992
    assert non_embedding_params(tiny_llama(tie=True)) == n  # a tied head still does its matmul

    ids = torch.randint(0, V, (2, T))

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    measured = measure_flops(step) / ids.numel()  # matmuls + attention, forward + backward
    norms = 6 * (2 * L_ * d + d)  # norm weights are in N but are not matmuls
    assert measured == pytest.approx(decoder_flops_per_token(n, L_, d, T) - norms, rel=1e-3)


def test_mfu_is_flops_per_second_over_peak():
    # 1,000 tokens/s of a 7B-like 4.2e10 FLOPs/token model on an H100 (989 TFLOP/s bf16)
    assert mfu(1000 * 4.2e10, 1.0, peak_flops("NVIDIA H100 80GB HBM3", "bf16")) == pytest.approx(4.2e13 / 989e12)


def test_callback_logs_tokens_and_mfu_consistently(tmp_path):
    phase = {"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}}
    module = Toy(nn.Linear(4, 2), phase, total_steps=6)
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    trainer = L.Trainer(accelerator="cpu", max_steps=6, accumulate_grad_batches=2, log_every_n_steps=2, logger=logger,
                        callbacks=[ThroughputMonitor(peak_flops=1e9)], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=ToyData())
    with open(tmp_path / "metrics.csv") as f:
        logged = list(csv.DictReader(f))
    rows = [r for r in logged if r.get("perf/mfu")]
    assert [int(r["step"]) for r in rows] == [1, 3, 5]  # every log step
    assert [int(r["step"]) for r in logged if r.get("train/loss")] == [1, 3, 5]  # the steps Lightning logs the loss at
    for r in rows:
        step_time, tokens_s = float(r["perf/step_time"]), float(r["perf/tokens_per_sec_per_device"])
        # 2 micro-batches x 4 rows x 3 non-padding tokens per optimizer step, 1e6 FLOPs each, peak 1e9 FLOP/s
        assert tokens_s == pytest.approx(24 / step_time, rel=1e-4)
        assert float(r["perf/mfu"]) == pytest.approx(tokens_s * 1e6 / 1e9, rel=1e-4)
        assert float(r["perf/samples_per_sec"]) == pytest.approx(8 / step_time, rel=1e-4)
        assert 0.0 <= float(r["perf/data_wait"]) < 1.0



def test_callback_totals_the_phase_and_restores_them_from_a_checkpoint(tmp_path):
    phase = {"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}}
    monitor = ThroughputMonitor()
    trainer = L.Trainer(accelerator="cpu", max_steps=6, accumulate_grad_batches=2, logger=False, callbacks=[monitor],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Toy(nn.Linear(4, 2), phase, total_steps=6), datamodule=ToyData())
    # 6 steps x 2 micro-batches x 4 rows; 3 non-padding tokens a row at 1e6 FLOPs each
    assert (monitor.total_samples, monitor.total_flops) == (48, 48 * 3 * 1e6)
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    restored = ThroughputMonitor()
    resumed = L.Trainer(accelerator="cpu", max_steps=8, accumulate_grad_batches=2, logger=False, callbacks=[restored],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    resumed.fit(Toy(nn.Linear(4, 2), phase, total_steps=8), datamodule=ToyData(), ckpt_path=tmp_path / "c.ckpt",
                weights_only=False)
    assert (restored.total_samples, restored.total_flops) == (64, 64 * 3 * 1e6)  # 6 restored steps + 2 new ones

class FakeClock:
    """`time` for core.throughput: micro-batch i takes 2**i seconds, so a window's step time tells which
    micro-batches it covered."""

    def __init__(self):
        self.now, self.batches = 0.0, 0

    def perf_counter(self):
        return self.now


class Ticks(L.Callback):
    def __init__(self, clock):
        self.clock = clock

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.clock.now += 2.0 ** self.clock.batches
        self.clock.batches += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pl_module.log("probe", float(batch_idx), on_step=True, on_epoch=False)  # Lightning writes it on its log steps


# 8 micro-batches per epoch; Lightning steps the optimizer on an epoch's last batch even mid-accumulation.
WINDOWS = {  # (accumulate, log_every_n_steps, max_steps): the micro-batches of each optimizer step of each logged window
    (3, 1, 5): [[[0, 1, 2]], [[3, 4, 5]], [[6, 7]], [[8, 9, 10]], [[11, 12, 13]]],
    (1, 3, 7): [[[0], [1], [2]], [[3], [4], [5]]],
}


@pytest.mark.parametrize("accumulate,every,steps", list(WINDOWS))
def test_each_log_step_covers_the_optimizer_steps_since_the_previous_one(tmp_path, monkeypatch, accumulate, every, steps):
    clock = FakeClock()
    monkeypatch.setattr("core.throughput.time", clock)
    module = Toy(nn.Linear(4, 2), {"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}}, total_steps=steps)
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, accumulate_grad_batches=accumulate, log_every_n_steps=every,
                        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="", version=""),
                        callbacks=[Ticks(clock), ThroughputMonitor()],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=ToyData())
    with open(tmp_path / "metrics.csv") as f:
        logged = list(csv.DictReader(f))
    rows = [r for r in logged if r.get("perf/step_time")]
    assert [int(r["step"]) for r in rows] == [int(r["step"]) for r in logged if r.get("probe")], \
        "Lightning writes logs on other steps than core.throughput._logs_now assumes: see its LoggerConnector.should_update_logs"
    windows = WINDOWS[(accumulate, every, steps)]
    seconds = [sum(2.0**b for step in w for b in step) for w in windows]  # logged as float32
    assert [float(r["perf/step_time"]) for r in rows] == pytest.approx([t / len(w) for t, w in zip(seconds, windows)], rel=1e-6)
    samples = [4 * sum(len(step) for step in w) for w in windows]  # 4 rows per micro-batch
    assert [float(r["perf/samples_per_sec"]) for r in rows] == pytest.approx([n / t for n, t in zip(samples, seconds)], rel=1e-6)
