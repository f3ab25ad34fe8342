"""Action tokenizers side by side on a LeRobotDataset: `python scripts/bench_tokenizers.py DATASET [--chunk 8]`.

Every tokenizer config in conf/tokenizer/ (or those named with `--only`), with
its YAML's settings unless overridden (`--set kmeans.k=256`). Actions are
normalised with the dataset's q01/q99 (to [-1, 1]) and cut into chunks of
`--chunk` consecutive actions within episodes. Each tokenizer is fitted through
`behavior.codec.ActionCodec` on the chunks of 90% of the episodes and measured
on the rest: tokens per chunk (mean and max), reconstruction error in
normalised units (mean and max absolute; cluster tokens without their offset),
and encode / decode throughput in chunks per second. As for the policy, a FAST
sequence longer than the longest seen in fitting is cut to that length.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import yaml

from behavior.codec import IGNORE, ActionCodec
from behavior.normalize import ActionNormalizer
from behavior.tokenizers import build_tokenizer, config_names
from data.lerobot import read_dataset


def chunks_of(data, normalizer: ActionNormalizer, chunk: int, episodes: list[int]) -> np.ndarray:
    out = []
    for e in episodes:
        actions = normalizer.normalize(data.episode(e)["action"])
        out += [actions[t : t + chunk] for t in range(0, len(actions) - chunk + 1, chunk)]
    return np.stack(out)


def timed(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def overrides_of(settings: list[str]) -> dict[str, dict]:
    """`NAME.KEY=VALUE` strings -> {NAME: {KEY: VALUE}} (values parsed as YAML)."""
    out: dict[str, dict] = {}
    for item in settings:
        key, _, value = item.partition("=")
        name, _, arg = key.partition(".")
        if not (name and arg and value):
            raise SystemExit(f"--set {item!r}: expected NAME.KEY=VALUE, e.g. kmeans.k=256")
        out.setdefault(name, {})[arg] = yaml.safe_load(value)
    return out


def measure(name: str, kwargs: dict, train: np.ndarray, test: np.ndarray) -> dict:
    """Fit `name` through the codec on `train` chunks; token counts, error and throughput on `test` chunks."""
    n, h, d = test.shape
    codec = ActionCodec(build_tokenizer(name, **kwargs), h, d).fit(train)
    ids, _ = codec.encode(test)
    rows = [[int(i) for i in row if i != IGNORE] for row in ids]
    decoded = codec.decode(rows, None)  # cluster tokens decode to their centres, without the predicted offset
    lengths = [len(r) - (not codec.fixed_length) for r in rows]  # EOS not counted
    err = np.abs(decoded - test)
    return {"tokens": np.mean(lengths), "max_tokens": max(lengths), "mean_err": err.mean(), "max_err": err.max(),
            "encode": n / timed(lambda: codec.encode(test)), "decode": n / timed(lambda: codec.decode(rows, None))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--only", nargs="+", default=None, help=f"tokenizer configs (default: all of {config_names()})")
    parser.add_argument("--set", nargs="+", default=[], help="constructor overrides NAME.KEY=VALUE, e.g. kmeans.k=256")
    args = parser.parse_args()
    overrides = overrides_of(args.set)
    data = read_dataset(args.dataset)
    stats = data.stats["action"]
    normalizer = ActionNormalizer(q01=stats["q01"], q99=stats["q99"])
    ids = [e["episode_index"] for e in data.episodes]
    rng = np.random.default_rng(0)
    rng.shuffle(ids)
    split = int(0.9 * len(ids))
    train, test = chunks_of(data, normalizer, args.chunk, ids[:split]), chunks_of(data, normalizer, args.chunk, ids[split:])
    n, h, d = test.shape
    print(f"{args.dataset}: {len(data.episodes)} episodes; chunks of {h} x {d}; fit on {len(train)}, measured on {n}")
    print(f"{'tokenizer':12s} {'tokens/chunk':>13s} {'max tokens':>10s} {'mean err':>9s} {'max err':>8s} "
          f"{'encode/s':>10s} {'decode/s':>10s}")
    for name in args.only or config_names():
        r = measure(name, overrides.get(name, {}), train, test)
        print(f"{name:12s} {r['tokens']:13.1f} {r['max_tokens']:10d} {r['mean_err']:9.4f} {r['max_err']:8.4f} "
              f"{r['encode']:10.0f} {r['decode']:10.0f}")


if __name__ == "__main__":
    main()
