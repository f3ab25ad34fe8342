"""Action tokenizers side by side on a LeRobotDataset: `python scripts/bench_tokenizers.py DATASET [--chunk 8]`.

Actions are normalised with the dataset's q01/q99 (to [-1, 1]) and cut into
chunks of `--chunk` consecutive actions within episodes. Each tokenizer is
fitted on the chunks of 90% of the episodes and measured on the rest: tokens
per chunk (mean, and max for FAST), reconstruction error in normalised units
(mean and max absolute), and encode / decode throughput in chunks per second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from behavior.normalize import ActionNormalizer  # noqa: E402
from behavior.tokenizers import build_tokenizer  # noqa: E402
from data.lerobot import read_dataset  # noqa: E402

TOKENIZERS = {
    "openvla": {"vocab_size": 256},
    "uniform": {"n_bins": 256},
    "quantile": {"n_bins": 256, "decode_to": "median"},
    "kmeans": {"k": 256},
    "fast": {"scale": 10.0, "bpe_vocab_size": 1024},
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--chunk", type=int, default=8)
    args = parser.parse_args()
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
    print(f"{'tokenizer':10s} {'tokens/chunk':>13s} {'max tokens':>10s} {'mean err':>9s} {'max err':>8s} "
          f"{'encode/s':>10s} {'decode/s':>10s}")
    for name, kwargs in TOKENIZERS.items():
        tok = build_tokenizer(name, **kwargs)
        if name == "fast":
            tok.fit(train)
            codes = tok.encode(test)
            lengths = [len(c) for c in codes]
            decoded = tok.decode(codes)
            encode_s, decode_s = timed(lambda: tok.encode(test)), timed(lambda: tok.decode(codes))
        else:
            tok.fit(train.reshape(-1, d))
            if name == "kmeans":  # the token is the cluster; the policy predicts the residual offset separately
                codes = tok.encode(test)
                decoded = tok.decode(codes)
                lengths = [h] * n
            else:
                codes = tok.encode(test)
                decoded = tok.decode(codes)
                lengths = [h * d] * n
            encode_s, decode_s = timed(lambda: tok.encode(test)), timed(lambda: tok.decode(codes))
        err = np.abs(np.asarray(decoded).reshape(test.shape) - test)
        print(f"{name:10s} {np.mean(lengths):13.1f} {max(lengths):10d} {err.mean():9.4f} {err.max():8.4f} "
              f"{n / encode_s:10.0f} {n / decode_s:10.0f}")


if __name__ == "__main__":
    main()
