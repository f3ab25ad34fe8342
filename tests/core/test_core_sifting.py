"""Smart sifting's selectors against hand-computed cases and planted loss distributions (core/sifting.py)."""

import numpy as np
import pytest
import torch
from scipy.stats import percentileofscore

from core.sifting import Lane, Sifter, SiftingSettings, fixed_keep_count, keep_probability, mean_token_loss_per_row


def sifter(**settings) -> Sifter:
    return Sifter(SiftingSettings(enabled=True, **settings), datamodule=None, seed=0)


def test_keep_probability_is_the_weak_percentile_to_the_beta():
    window = np.array([1.0, 2.0, 3.0, 4.0])
    # 1.0: 1 of 4 at or below it; 2.5: 2 of 4; 4.0: all; 0.5: none
    np.testing.assert_allclose(keep_probability(np.array([1.0, 2.5, 4.0, 0.5]), window, 1.0), [0.25, 0.5, 1.0, 0.0])
    np.testing.assert_allclose(keep_probability(np.array([2.5]), window, 2.0), [0.25])
    np.testing.assert_allclose(keep_probability(np.array([2.5]), window, 0.0), [1.0])  # beta 0 keeps everything


def test_fixed_keep_count_keeps_floor_of_the_fraction_over_the_whole_stream():
    drawn, kept = 0, 0
    for n in [6, 6, 5, 7, 6, 6, 1, 9]:
        kept += fixed_keep_count(drawn, n, 0.3)
        drawn += n
        assert kept == int(np.floor(0.3 * drawn + 1e-9))
    assert fixed_keep_count(0, 8, 0.5) == 4 and fixed_keep_count(0, 8, 1.0) == 8


def test_fixed_keep_keeps_the_highest_losses_of_each_drawn_micro_batch():
    s, lane = sifter(keep=0.5), Lane(0, 1, 0, 10)
    losses = np.array([0.3, 2.0, 0.1, 1.5, 0.2, 0.9])
    assert s.select(lane, losses, 6) == [1, 3, 5]  # positions of 2.0, 1.5 and 0.9, in drawn order


def test_uniform_selector_keeps_the_fraction_at_random_without_losses():
    s, lane = sifter(keep=0.25, selector="uniform"), Lane(0, 1, 0, 10)
    picks = [s.select(lane, None, 8) for _ in range(200)]
    assert all(len(p) == 2 for p in picks)
    counts = np.bincount(np.concatenate(picks), minlength=8)
    assert counts.min() > 25  # every position is picked (400 picks over 8 positions: 50 each on average)


def test_probabilistic_rule_on_a_planted_distribution_keeps_hard_samples_more():
    """7 of every 8 losses uniform on [0, 1), the 8th planted at 10: in the window, a uniform loss u sits at the
    percentile 7/8 * u, so its expected keep rate is E[(7u/8)^beta] = (7/8)^beta / (beta + 1); the planted hard
    samples are at the top of the window and kept every time."""
    rng = np.random.default_rng(0)
    for beta in (1.0, 2.0):
        expected = (7 / 8) ** beta / (beta + 1)
        s, lane = sifter(beta=beta, history=400), Lane(0, 1, 0, 400)
        kept = drawn = hard_kept = hard = 0
        for _ in range(300):
            losses = rng.uniform(0, 1, 8)
            losses[0] = 10.0  # planted: the hardest sample of every micro-batch
            chosen = s.select(lane, losses, 8)
            kept += len(chosen) - (0 in chosen)
            drawn += 7
            hard_kept += 0 in chosen
            hard += 1
        assert abs(kept / drawn - expected) < 0.03, (beta, kept / drawn)
        assert hard_kept == hard


def test_window_holds_the_last_history_losses():
    s, lane = sifter(history=5), Lane(0, 1, 0, 5)
    s.select(lane, np.arange(4.0), 4)
    s.select(lane, np.arange(10.0, 13.0), 3)
    assert list(lane.window) == [2.0, 3.0, 10.0, 11.0, 12.0]
    # the percentile of a loss is taken in the window that holds its own micro-batch
    assert percentileofscore(list(lane.window), 11.0, kind="weak") == 80.0


def test_lane_state_round_trips_the_rng_and_queue():
    s, lane = sifter(beta=1.0), Lane(3, 4, 0, 10)
    s.select(lane, np.array([1.0, 2.0, 3.0]), 3)
    lane.queue, lane.drawn_blocks, lane.forwarded = [5, 9], 7, 21
    copy = Lane(3, 4, 0, 10)
    copy.restore(lane.state())
    assert copy.queue == [5, 9] and copy.drawn_blocks == 7 and list(copy.window) == list(lane.window)
    assert torch.equal(torch.rand(4, generator=copy.generator), torch.rand(4, generator=lane.generator))


@pytest.mark.parametrize("bad", [dict(keep=0.0), dict(keep=1.5), dict(selector="uniform"), dict(selector="topk"),
                                 dict(history=0), dict(beta=-1.0)])
def test_bad_settings_name_the_key(bad):
    with pytest.raises(ValueError, match="sifting"):
        SiftingSettings(enabled=True, **bad)


def test_restore_refuses_another_number_of_lanes():
    s = sifter(keep=0.5)
    s.setup(rank=0, world=1, accumulate=2)
    with pytest.raises(ValueError, match="lanes"):
        s.load([], num_lanes=4)


def test_mean_token_loss_per_row_matches_transformers_loss_on_each_row():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2)).eval()
    ids = torch.randint(0, 50, (3, 7))
    labels = ids.clone()
    labels[0, :4] = -100
    labels[1, :2] = -100
    labels[2, :] = -100  # no supervised token: loss 0
    with torch.no_grad():
        rows = mean_token_loss_per_row(lm(input_ids=ids).logits, labels)
        for r in range(2):
            torch.testing.assert_close(rows[r], lm(input_ids=ids[r : r + 1], labels=labels[r : r + 1]).loss)
    assert rows[2] == 0


def test_fsdp_is_refused_and_ddp_is_not():
    from lightning.pytorch.strategies import DDPStrategy

    from core.sifting import check_strategy
    from core.strategies import UnitsFSDPStrategy

    with pytest.raises(ValueError, match="UnitsFSDPStrategy.*sifting.enabled=false"):
        check_strategy(UnitsFSDPStrategy())
    check_strategy(DDPStrategy())
