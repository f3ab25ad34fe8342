"""The behavior task end to end on real Meta-World demonstrations: collection, a few training steps per
tokenizer config (every conf/tokenizer/*.yaml) and the MLP baseline, loading the run back, KV-cache
generation, and rollouts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from behavior.codec import ActionCodec
from behavior.inference import load
from behavior.metaworld import make_env, run_expert
from behavior.policy import GPTPolicy
from behavior.tokenizers import (
    build_tokenizer,
    config_names,
    tokenizer_config,
    tokenizer_from_config,
)
from core.run import evaluate, train
from data.lerobot import read_dataset
from tests.conftest import compose_cfg


def test_collected_demonstrations_are_successful_clipped_and_reproducible(reach_demos):
    data = read_dataset(reach_demos)
    assert data.tasks == ["reach-v3"] and len(data.episodes) == 5
    frames = data.frames()
    assert np.abs(frames["action"]).max() <= 1.0
    assert frames["observation.state"].shape[1] == 39
    first = data.episode(0)
    hit = int(np.argmax(first["next.success"]))  # the first success; the episode runs 20 expert steps past it
    assert first["next.success"][hit] and not first["next.success"][:hit].any() and len(first["action"]) == hit + 21
    episode = data.episodes[0]
    replay = run_expert(make_env("reach-v3", episode["benchmark_seed"]), "reach-v3", episode["config_index"],
                        episode["benchmark_seed"], after_success=20)
    np.testing.assert_allclose(replay.actions, first["action"], atol=1e-6)  # seeds recorded: the episode replays
    for stat in ("min", "max", "mean", "std", "q01", "q99"):
        assert stat in data.stats["action"]


@pytest.mark.parametrize("tokenizer", config_names())
def test_a_tiny_policy_trains_per_tokenizer_and_loads_back(behavior_cfg, tokenizer):
    chunk = 2  # every tokenizer with a chunk of two actions
    cfg = behavior_cfg(f"tokenizer={tokenizer}", f"tokenizer.chunk_size={chunk}", "stage.phases.bc.max_steps=4",
                       "stage.phases.bc.global_batch_size=16", f"run.name={tokenizer}")
    results = train(cfg)
    assert np.isfinite(results["bc/train_loss"])
    policy = load(results["run_dir"])
    assert isinstance(policy, GPTPolicy) and type(policy.codec.tokenizer).target() == cfg.tokenizer._target_
    states = torch.randn(3, 1, 39)
    actions = policy.act(states, torch.zeros(3, dtype=torch.long))
    assert actions.shape == (3, chunk, 4) and np.isfinite(actions).all()


def test_mlp_baseline_trains_and_loads_back(behavior_cfg):
    results = train(behavior_cfg("policy=mlp_bc", "stage.phases.bc.max_steps=20", "stage.phases.bc.global_batch_size=16",
                                 "run.name=mlp", "policy.hidden=32"))
    policy = load(results["run_dir"])
    actions = policy.act(torch.randn(2, 1, 39), torch.zeros(2, dtype=torch.long))
    assert actions.shape == (2, 1, 4)


def _policy(tokenizer: str, chunk: int, **kw) -> GPTPolicy:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    chunks = np.clip(np.cumsum(rng.normal(0, 0.2, (64, chunk, 4)), 1), -1, 1)
    codec = ActionCodec(build_tokenizer(tokenizer, **kw), chunk, 4).fit(chunks)
    return GPTPolicy(codec, state_dim=39, num_tasks=3, d_model=32, n_layers=2, n_heads=2).eval()


@pytest.mark.parametrize("tokenizer,chunk,kw", [("uniform", 2, {}), ("fast", 4, {"bpe_vocab_size": 64}), ("kmeans", 2, {"k": 8}),
                                                 ("residual_vq", 2, {"n_levels": 3, "codebook_size": 8})])
def test_kv_cache_generation_equals_full_recompute(tokenizer, chunk, kw):
    policy = _policy(tokenizer, chunk, **kw)
    states, task = torch.randn(4, 1, 39), torch.tensor([0, 1, 2, 0])
    ids, _ = policy.generate(states, task)
    codec = policy.codec
    for row in range(4):  # greedy decoding by re-running the whole sequence for every token
        seq: list[int] = []
        for i in range(codec.max_tokens):
            tokens = torch.tensor([seq + [0]])
            logits = policy(states[row : row + 1], task[row : row + 1], tokens)[1][0, -1]
            if codec.fixed_length:
                logits[codec.eos_id] = -torch.inf
            elif i == codec.max_tokens - 1:
                logits[:] = -torch.inf
                logits[codec.eos_id] = 0
            seq.append(int(logits.argmax()))
            if seq[-1] == codec.eos_id:
                break
        assert ids[row][: len(seq)] == seq


def test_teacher_forcing_targets_do_not_see_their_own_token():
    policy = _policy("uniform", 1)
    states, task = torch.randn(2, 1, 39), torch.tensor([0, 1])
    a = policy(states, task, torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]]))[1]
    b = policy(states, task, torch.tensor([[5, 6, 7, 99], [1, 2, 3, 200]]))[1]
    torch.testing.assert_close(a, b)  # the last token is a target only, never an input
    c = policy(states, task, torch.tensor([[5, 6, 70, 8], [1, 2, 3, 4]]))[1]
    torch.testing.assert_close(a[:, :3], c[:, :3])
    assert not torch.allclose(a[0, 3], c[0, 3])


def test_short_rollout_on_a_real_task_writes_success_rate_and_per_task(behavior_cfg):
    cfg = behavior_cfg("stage.phases.bc.max_steps=2", "stage.phases.bc.global_batch_size=16", "run.name=roll",
                       "env.horizon=15")
    run_dir = train(cfg)["run_dir"]
    ecfg = compose_cfg("benchmark=rollouts", f"run={run_dir}", "benchmark.episodes_per_task=2",
                       "benchmark.envs_per_task=2", config="eval")
    metrics = evaluate(ecfg)
    assert set(metrics["per_task"]) == {"reach-v3"}
    assert 0.0 <= metrics["success_rate"] <= 100.0 and metrics["episodes"] == 2
    assert metrics["mean_episode_length"] <= 15
    saved = json.loads((run_dir_path := __import__("pathlib").Path(run_dir)).joinpath("results.json").read_text())
    assert saved["success_rate"] == metrics["success_rate"] and saved["per_task"] == metrics["per_task"]
    assert run_dir_path.name == "roll"


def test_rollout_settings_are_benchmark_keys_and_it_is_a_benchmark():
    from hydra.utils import instantiate

    from core.interfaces import Benchmark

    cfg = compose_cfg("benchmark=rollouts", "run=x", "benchmark.episodes_per_task=3", "benchmark.execution=ensemble",
                      "benchmark.tasks=[reach-v3]", config="eval")
    assert "episodes_per_task" not in cfg and "eval_seed" not in cfg  # not top-level eval keys
    bench = instantiate(cfg.benchmark, _recursive_=False)
    assert isinstance(bench, Benchmark) and bench.name == "rollouts"
    assert (bench.episodes_per_task, bench.envs_per_task, bench.execution, list(bench.tasks), bench.eval_seed) == (
        3, 2, "ensemble", ["reach-v3"], None)
    with pytest.raises(ValueError, match="open_loop or ensemble"):
        type(bench)(execution="closed")


@pytest.mark.parametrize("group", ["tokenizer", "policy", "env"])
def test_every_behavior_option_composes_and_names_the_run(group):
    from omegaconf import OmegaConf

    from core.run import run_name
    from tests.conftest import CONF

    for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
        cfg = compose_cfg("task=behavior", f"{group}={option}")
        OmegaConf.resolve(cfg)
        assert cfg[group].name == option
        assert run_name(cfg).startswith("behavior-")
        if group == "tokenizer":  # the composed node builds the same tokenizer as its name
            tok = tokenizer_from_config(cfg.tokenizer)
            assert tok.get_config() == build_tokenizer(option).get_config()
            assert type(tok).target() == tokenizer_config(option)["_target_"]


def test_rollout_records_requested_videos(behavior_cfg, monkeypatch, tmp_path):
    """Frames come from a stand-in `render` (distinct values per frame), the rest (which episodes are recorded,
    the GIF written) is the real code; real rendering is tested in test_behavior_images.py."""
    from PIL import Image

    import behavior.rollout as rollout_mod

    run_dir = train(behavior_cfg("stage.phases.bc.max_steps=1", "stage.phases.bc.global_batch_size=16", "run.name=vid"))["run_dir"]
    monkeypatch.setattr(rollout_mod, "make_env", lambda task, seed, render=False, **view: make_env(task, seed))
    counter = iter(range(0, 250, 10))  # distinct frames (a GIF merges identical consecutive ones)
    monkeypatch.setattr(rollout_mod, "render", lambda env: np.full((8, 8, 3), next(counter), dtype=np.uint8))
    metrics = rollout_mod.rollout(load(run_dir), ["reach-v3"], 2, 1000, horizon=6, videos=1, video_dir=tmp_path / "v")
    assert metrics["episodes"] == 2
    gifs = sorted(p.name for p in (tmp_path / "v").iterdir())
    assert gifs == ["reach-v3-00.gif"]  # only the first episode of the task
    with Image.open(tmp_path / "v" / gifs[0]) as gif:
        assert gif.n_frames == 4  # 7 frames (reset + 6 steps), every other one kept
