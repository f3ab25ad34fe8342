"""The prepared cache (data/prepare.py, data/shards.py): reuse, invalidation, a SIGKILL mid-way, bad records
reported once, and the same training batches as the in-process path (through Ray Data)."""

import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image

from data.errors import DataError
from data.prepare import cache_folder, manifest, prepare_source, wait_for
from data.shards import SampleShards
from data.sources import Source
from vlm.dataset import Sample

ROOT = Path(__file__).resolve().parents[2]


def rec(rid, image="a.png", pairs=1, question="what is it?"):
    turns = []
    for i in range(pairs):
        turns += [{"from": "human", "value": ("<image>\n" if image and i == 0 else "") + f"{question} {i}"},
                  {"from": "gpt", "value": f"answer number {i}"}]
    out = {"id": rid, "conversations": turns}
    if image:
        out["image"] = image
    return out


def fake_tokenize(records, image_root):
    """An independent stand-in for tokenization: ids are word lengths; every answer word is a target."""
    samples = []
    for r in records:
        ids, labels = [], []
        for t in r["conversations"]:
            words = [len(w) for w in t["value"].split()]
            ids += words
            labels += words if t["from"] == "gpt" else [-100] * len(words)
        images = [Path(image_root) / r["image"]] if "image" in r else []
        samples.append(Sample(str(r["id"]), ids, labels, images, [0] * len(images)))
    return samples, Counter()


@pytest.fixture
def source(tmp_path):
    Image.new("RGB", (8, 8), (200, 10, 10)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 8), (10, 200, 10)).save(tmp_path / "b.png")
    path = tmp_path / "data.json"
    path.write_text(json.dumps([rec("r0"), rec("r1", "b.png", 3), rec("t2", None, 2), rec("r3")]))
    return Source(path, tmp_path)


KEY = {"tokenizer": "t1", "max_length": 64}


def test_second_start_reuses_the_cache_and_says_so(source, tmp_path):
    logs = []
    folder, info = prepare_source(source, fake_tokenize, KEY, tmp_path / "cache", workers=0, log=logs.append)
    again, _ = prepare_source(source, fake_tokenize, KEY, tmp_path / "cache", workers=0, log=logs.append)
    assert again == folder and "preparing" in logs[0] and "reusing prepared cache" in logs[-1]
    shards = SampleShards(folder, info["shards"], Sample)
    expected, _ = fake_tokenize(json.loads(source.json.read_text()), source.image_root)
    assert [shards[i] for i in range(len(shards))] == expected
    tokens, images = shards.lengths()
    assert tokens.tolist() == [len(s.input_ids) for s in expected] and images.tolist() == [1, 1, 0, 1]


@pytest.mark.parametrize("change", [{"tokenizer": "t2"}, {"max_length": 32}])
def test_a_different_tokenizer_or_max_length_is_a_new_cache(source, tmp_path, change):
    old = cache_folder(source, KEY, tmp_path, skip_bad=False)
    assert cache_folder(source, {**KEY, **change}, tmp_path, skip_bad=False) != old
    os.utime(source.json, ns=(0, 10**9))  # the data file changed (mtime)
    assert cache_folder(source, KEY, tmp_path, skip_bad=False) != old


def test_tokenizer_and_max_length_change_the_key_of_the_real_tokenization(tiny_vlm):
    from vlm.dataset import preparation_key

    fmt = tiny_vlm.prompt_format
    key = preparation_key(fmt, 64, 16, None)
    assert preparation_key(fmt, 64, 16, None) == key
    assert preparation_key(fmt, 65, 16, None) != key
    fmt = copy.deepcopy(fmt)  # tiny_vlm is shared by the session: change a copy
    fmt.tokenizer.add_tokens(["<a-new-token>"])
    assert preparation_key(fmt, 64, 16, None)["tokenizer"] != key["tokenizer"]


KILLED = """
import sys, time
import data.prepare as prep
from data.sources import Source
from tests.data.test_prepare_cache import fake_tokenize, KEY
real = prep.write_shards
def slow(table, folder, rows_per_shard=65536):
    names = real(table, folder, rows_per_shard=1)
    (folder / "READY").write_text("")
    time.sleep(120)
    return names
prep.write_shards = slow
prep.prepare_source(Source(__import__("pathlib").Path(sys.argv[1]), __import__("pathlib").Path(sys.argv[2])),
                    fake_tokenize, KEY, sys.argv[3], workers=0)
"""


def test_sigkill_mid_preparation_leaves_no_usable_cache_and_the_next_start_rebuilds(source, tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(source.json), str(source.image_root), str(cache)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob(".*tmp-*/READY")):
            assert proc.poll() is None and time.monotonic() < deadline, "the preparation did not reach its shards"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    folder = cache_folder(source, KEY, cache, skip_bad=False)
    assert list(cache.glob(".*tmp-*/shard-*")) and not folder.exists() and manifest(folder) is None
    logs = []
    folder, info = prepare_source(source, fake_tokenize, KEY, cache, workers=0, log=logs.append)
    assert "preparing" in logs[0] and info["num_samples"] == 4 and manifest(folder) is not None


def test_bad_records_error_once_from_the_preparation_and_the_waiting_ranks_get_it(source, tmp_path):
    records = json.loads(source.json.read_text()) + [rec("bad-missing", "nope.png"), rec("bad-too", "nope2.png")]
    source.json.write_text(json.dumps(records))
    with pytest.raises(DataError) as err:
        prepare_source(source, fake_tokenize, KEY, tmp_path / "cache", workers=0, log=lambda m: None)
    assert str(source.json) in str(err.value) and "bad-missing" in str(err.value) and "data.skip_bad=true" in str(err.value)
    with pytest.raises(DataError, match="bad-missing"):  # another rank: no validation of its own, the same message
        wait_for(cache_folder(source, KEY, tmp_path / "cache", skip_bad=False), poll_s=0.01, log=lambda m: None)
    logs = []
    _folder, info = prepare_source(source, fake_tokenize, KEY, tmp_path / "cache", skip_bad=True, workers=0, log=logs.append)
    assert info["skipped"] == {"missing image": 2} and info["num_samples"] == 4
    assert sum("skipped/missing image: 2" in m for m in logs) == 1


def _batches(dm):
    dm.setup("fit")
    ds, out = dm.train_dataset, []
    n = len(ds)
    for start in range(0, n, 3):
        out.append(dm.collate_fn([ds[i] for i in range(start, min(n, start + 3))]))
    return len(ds), out


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])  # 1: through Ray (~25 s: its start)
def test_training_batches_from_the_cache_equal_the_in_process_path(tmp_path, tiny_vlm, workers):
    from data.sources import DataSource
    from vlm.lightning import VLMDataModule

    Image.new("RGB", (20, 12), (200, 10, 10)).save(tmp_path / "a.png")
    Image.new("RGB", (12, 20), (10, 10, 200)).save(tmp_path / "b.png")
    long = " ".join(["red"] * 1100)  # past max_length 1024: all its targets cut off → dropped and counted
    records = [rec("r0"), rec("r1", "b.png", 6), rec("t2", None, 2), rec("long", "a.png", 1, long), rec("r4", "b.png", 2)]
    (tmp_path / "d.json").write_text(json.dumps(records))
    src = DataSource(tmp_path, {"instruct": [Source(tmp_path / "d.json", tmp_path)]}, None)
    common = {"model": tiny_vlm, "micro_batch_size": 3, "seed": 0, "max_turns": 2, "group_by_length": True}
    splits = {"instruct": 1.5}
    in_process = VLMDataModule(src, splits, **common)
    n_ref, ref = _batches(in_process)
    dm = VLMDataModule(src, splits, **common, cache=tmp_path / "cache", prepare_workers=workers)
    n, got = _batches(dm)
    assert n == n_ref > 5 and len(got) == len(ref)
    for a, b in zip(ref, got):
        for k in ("input_ids", "labels", "attention_mask", "image_positions", "pixel_values"):
            assert torch.equal(a[k], b[k]), k
    assert dm.report() == in_process.report() == {"dropped/truncated_no_targets": 1}
    assert list(dm.lengths) == in_process.lengths and list(dm.group_keys) == in_process.group_keys


def _script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_mixture_then_prepare_data_builds_and_then_reuses(tmp_path, capsys):
    out = tmp_path / "syn"
    _script("make_synthetic_llava").main(["--out", str(out), "--records", "300", "--images", "7", "--align", "4",
                                          "--image-size", "32"])
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == f"data=llava_v15 data.root={out}"
    records = json.loads((out / "llava_v1_5_mix665k.json").read_text())
    text_only = sum("image" not in r for r in records)
    assert len(records) == 300 and 5 <= text_only <= 35  # ~6%, as mix665k (40k of 665k)
    assert len({r["image"] for r in records if "image" in r}) <= 7
    assert max(len(r["conversations"]) for r in records) > 6 and min(len(r["conversations"]) for r in records) == 2
    args = [*printed.split(), "stage=single_stage", f"data.cache={tmp_path / 'cache'}", "data.prepare_workers=0"]
    prepare = _script("prepare_data")
    prepare.main(args)
    first = capsys.readouterr().out
    prepare.main(args)
    second = capsys.readouterr().out
    assert "preparing" in first and "reusing prepared cache" not in first
    assert "reusing prepared cache" in second and "preparing" not in second
    location = [line for line in second.splitlines() if line.startswith("prepared: ")]
    assert len(location) == 1 and (Path(location[0].split(": ", 1)[1]) / "manifest.json").is_file()


def test_a_waiting_rank_gets_the_folder_rank_0_prepares(source, tmp_path):
    import threading

    cache = tmp_path / "cache"
    rank0 = threading.Timer(0.3, prepare_source, args=(source, fake_tokenize, KEY, cache), kwargs={"workers": 0, "log": print})
    rank0.start()
    logs = []
    info = wait_for(cache_folder(source, KEY, cache, skip_bad=False), poll_s=0.05, timeout_s=30, log=logs.append)
    rank0.join()
    assert info["num_samples"] == 4 and len(logs) == 1 and "waiting for rank 0" in logs[0]


def test_a_record_the_tokenization_refuses_is_an_error_naming_file_and_record_even_with_skip_bad(source, tmp_path):
    def refuse(records, image_root):
        if records[0]["id"] == "t2":
            raise DataError("record t2: cannot build it")
        return fake_tokenize(records, image_root)

    with pytest.raises(DataError, match=f"{source.json}: record t2: cannot build it"):
        prepare_source(source, refuse, KEY, tmp_path / "cache", skip_bad=True, workers=0, log=lambda m: None)
