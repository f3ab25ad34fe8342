"""Sharded evaluation (`evaluate.py ... devices=2`, core/launch.py): two CPU processes on a tiny trained run give the
predictions file and metrics of one process; the per-rank parts of the predictions log (eval/predlog.py) resume
across process counts; a dying rank and a benchmark that cannot be sharded are clear errors."""
import json
import shutil
import sys

import pytest

import vlm
from core.imported import UsageError
from core.launch import ProcessFailed, barrier, processes
from core.run import evaluate, train
from eval.predlog import consolidate, read_log, shard_log
from tests.conftest import SCRATCH_SMALL, SMALL, compose_cfg
from tests.eval.fixtures import make_pope, make_vqav2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny trained run and the two fixture benchmarks (VQAv2: 3 generated answers; POPE: 6 scored items)."""
    root = tmp_path_factory.mktemp("shardruns")
    train(compose_cfg(*SMALL, *SCRATCH_SMALL, f"run.root={root}", "trainer.max_steps=2", "run.name=tiny"))
    bench = root / "bench"
    make_vqav2(bench)
    make_pope(bench)
    return root / "tiny", bench


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    """One process on the whole of POPE: (run directory, metrics, log records)."""
    run, bench = tiny
    ref = copy_run(run, tmp_path_factory.mktemp("ref"), "ref")
    metrics = evaluate(cfg_of(ref, bench))
    return ref, metrics, records(ref / "predictions/pope.jsonl")


def copy_run(tiny, tmp_path, name):
    run_dir = tmp_path / name
    shutil.copytree(tiny, run_dir, ignore=shutil.ignore_patterns("predictions", "results.json"))
    return run_dir


def cfg_of(run_dir, bench, *extra):
    return compose_cfg(f"run={run_dir}", "benchmark=pope", f"benchmark.root={bench}", "benchmark.mode=likelihood",
                       "batch_size=2", "threads=1", *extra, config="eval")


def records(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_two_processes_equal_one(tiny, reference, tmp_path):
    run, bench = tiny
    one, m1, log1 = reference
    two = copy_run(run, tmp_path, "two")
    m2 = evaluate(cfg_of(two, bench, "devices=2"))
    assert m1 == m2 and m1["n"] == 6
    assert (one / "predictions/pope.json").read_bytes() == (two / "predictions/pope.json").read_bytes()
    assert json.loads((two / "results.json").read_text())["benchmarks"]["pope"] == m1
    log2 = records(two / "predictions/pope.jsonl")
    assert log1[0] == log2[0] and "_meta" in log1[0]
    by_id = {r["id"]: r for r in log1[1:]}
    assert len(log2) == 7 and all(by_id[r["id"]] == r for r in log2[1:])  # the very same records, probs included
    # batches of 2 dealt round-robin: rank 0 answered batches 0 and 2, rank 1 batch 1, folded in after rank 0's
    assert [r["id"] for r in log2[1:]] == [r["id"] for r in log1[1:3] + log1[5:7] + log1[3:5]]
    assert not list((two / "predictions").glob("pope.shard-*"))


def test_a_one_process_log_is_resumed_by_two_and_parts_by_one(tiny, reference, tmp_path, monkeypatch):
    run, bench = tiny
    ref, full, ref_log = reference
    # one process answered the first 3 questions; two processes answer the other 3 and keep those
    a = copy_run(run, tmp_path, "a")
    evaluate(cfg_of(a, bench, "limit=3"))
    first = (a / "predictions/pope.jsonl").read_text()
    assert evaluate(cfg_of(a, bench, "devices=2")) == full
    text = (a / "predictions/pope.jsonl").read_text()
    assert text.startswith(first) and len(records(a / "predictions/pope.jsonl")) == 7
    # a killed two-process run: parts with 2 + 1 answers (one ending in a partial line), an empty log; one process
    # folds the parts in and answers only the 3 missing questions
    b = copy_run(run, tmp_path, "b")
    log = b / "predictions/pope.jsonl"
    log.parent.mkdir()
    log.write_text(json.dumps(ref_log[0]) + "\n")
    for rank, recs, tail in ((0, ref_log[1:3], ""), (1, ref_log[3:4], '{"id": "x", "ans')):
        shard_log(log, rank).write_text("".join(json.dumps(r) + "\n" for r in [ref_log[0], *recs]) + tail)
    asked = []
    real_load = vlm.load

    def load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        score = model.score
        model.score = lambda images, prompts, *a, **k: asked.extend(prompts) or score(images, prompts, *a, **k)
        return model

    monkeypatch.setattr(vlm, "load", load)
    assert evaluate(cfg_of(b, bench)) == full and len(asked) == 3
    assert not list(log.parent.glob("pope.shard-*"))
    assert (b / "predictions/pope.json").read_bytes() == (ref / "predictions/pope.json").read_bytes()


def test_consolidate_folds_parts_in_once_and_drops_stale_ones(tmp_path):
    meta = {"benchmark": "x", "settings": "s", "weights": "w"}
    log = tmp_path / "x.jsonl"
    head = json.dumps({"_meta": meta}) + "\n"
    log.write_text(head + '{"id": "a", "answer": 1}\n')
    shard_log(log, 0).write_text(head + '{"id": "a", "answer": 1}\n{"id": "b", "answer": 2}\n')
    shard_log(log, 1).write_text(head + '{"id": "c", "answer": 3}\n{"id": "d", "ans')
    shard_log(log, 2).write_text(json.dumps({"_meta": {**meta, "weights": "old"}}) + '\n{"id": "e", "answer": 5}\n')
    assert sorted(consolidate(log, meta)) == ["a", "b", "c"]
    assert [r.get("id") for r in records(log)] == [None, "a", "b", "c"]
    assert not list(tmp_path.glob("x.shard-*")) and read_log(log, meta).keys() == {"a", "b", "c"}


def test_a_dying_rank_is_reported_not_waited_for():
    """Rank 1 runs `sys.exit(cfg)` (exit code 1) instead of evaluating; rank 0, waiting for it, says so."""
    with pytest.raises(ProcessFailed, match="evaluate-rank1 exited with code 1"):
        with processes(2, sys.exit, {"threads": 1}):
            barrier()


def test_devices_need_a_shardable_benchmark(tmp_path):
    (tmp_path / "config.yaml").write_text("{}\n")
    with pytest.raises(UsageError, match="runs in one process; drop devices=2"):
        evaluate(compose_cfg("task=behavior", f"run={tmp_path}", "devices=2", config="eval"))


def test_bfloat16_language_model_starts_the_log_over(tiny, tmp_path):
    """The GPU's precision, forced on the CPU: answers still come, and float32 predictions are not reused for it."""
    run, bench = tiny
    c = copy_run(run, tmp_path, "c")
    evaluate(cfg_of(c, bench, "limit=2"))
    meta32 = records(c / "predictions/pope.jsonl")[0]
    metrics = evaluate(cfg_of(c, bench, "limit=2", "precision=bfloat16"))
    assert metrics["n"] == 2 and records(c / "predictions/pope.jsonl")[0] != meta32
    with pytest.raises(ValueError, match="precision='float16'"):
        evaluate(cfg_of(c, bench, "precision=float16"))


def test_a_training_group_is_not_taken_for_an_evaluation_group(tmp_path):
    """A multi-process training evaluates on its rank 0 alone (core/after_training.py): no barrier with ranks that
    never evaluate, and devices=N there is an error."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with processes(1, sys.exit, {"threads": 1}) as (rank, world):
            barrier()
            assert (rank, world) == (0, 1)
        with pytest.raises(ValueError, match="not an evaluation's"):
            with processes(2, sys.exit, {"threads": 1}):
                pass
    finally:
        dist.destroy_process_group()
