"""Action chunks ↔ token sequences for the GPT policy, over any tokenizer of `behavior.tokenizers`.

Three kinds of tokenizer map a normalised chunk (H, D) to tokens differently:
- per dimension (`openvla`, `uniform`, `quantile`): H·D ids, time-major;
- per vector (`kmeans`): H cluster ids, plus a continuous (H, D) residual offset;
- per chunk (`fast`): a variable number of ids, ended by an end-of-sequence id.
The policy's vocabulary is the tokenizer's ids plus one EOS id (`eos_id =
tokenizer.vocab_size`); fixed-length kinds never emit it. Targets are padded
with -100 (ignored by the loss).
"""

from __future__ import annotations

import numpy as np

from behavior.tokenizers import ActionTokenizer, FASTTokenizer, KMeansTokenizer

IGNORE = -100


class ActionCodec:
    def __init__(self, tokenizer: ActionTokenizer, chunk_size: int, action_dim: int, max_tokens: int | None = None):
        self.tokenizer, self.chunk_size, self.action_dim = tokenizer, int(chunk_size), int(action_dim)
        if isinstance(tokenizer, FASTTokenizer):
            self.kind = "sequence"
        elif isinstance(tokenizer, KMeansTokenizer):
            self.kind = "vector"
        else:
            self.kind = "per_dim"
        fixed = {"per_dim": self.chunk_size * self.action_dim, "vector": self.chunk_size}.get(self.kind)
        self.max_tokens = fixed if fixed is not None else max_tokens  # a sequence's longest (fitted), EOS included

    @property
    def eos_id(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size + 1

    @property
    def fixed_length(self) -> bool:
        return self.kind != "sequence"

    @property
    def offset_dim(self) -> int:
        """Width of the residual-offset head (k clusters × D for k-means; 0 otherwise)."""
        return self.tokenizer.vocab_size * self.action_dim if self.kind == "vector" else 0

    def fit(self, chunks: np.ndarray) -> "ActionCodec":
        """Fit the tokenizer on normalised chunks (N, H, D) (per-step tokenizers see the actions)."""
        self.tokenizer.fit(chunks if self.kind == "sequence" else chunks.reshape(-1, self.action_dim))
        if self.kind == "sequence":
            self.max_tokens = max(len(ids) for ids in self.tokenizer.encode(chunks)) + 1
        return self

    def encode(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(N, H, D) normalised → (ids (N, max_tokens) padded with IGNORE, offsets (N, H, D) or None)."""
        n = chunks.shape[0]
        if self.kind == "per_dim":
            return self.tokenizer.encode(chunks).reshape(n, -1).astype(np.int64), None
        if self.kind == "vector":
            ids, offsets = self.tokenizer.encode_with_offsets(chunks)
            return ids.astype(np.int64), offsets.astype(np.float32)
        out = np.full((n, self.max_tokens), IGNORE, dtype=np.int64)
        for row, ids in enumerate(self.tokenizer.encode(chunks)):
            ids = list(ids)[: self.max_tokens - 1] + [self.eos_id]
            out[row, : len(ids)] = ids
        return out, None

    def decode(self, ids: list[list[int]], offsets: np.ndarray | None = None) -> np.ndarray:
        """Generated ids per row (EOS and anything after it dropped) → normalised chunks (N, H, D)."""
        rows = []
        for seq in ids:
            seq = list(seq)
            if self.eos_id in seq:
                seq = seq[: seq.index(self.eos_id)]
            rows.append(seq)
        if self.kind == "per_dim":
            arr = np.asarray(rows, dtype=np.int64).reshape(len(rows), self.chunk_size, self.action_dim)
            return self.tokenizer.decode(arr)
        if self.kind == "vector":
            return self.tokenizer.decode(np.asarray(rows, dtype=np.int64), offsets)
        return np.asarray(self.tokenizer.decode([np.asarray(r, dtype=np.int64) for r in rows])).reshape(
            len(rows), self.chunk_size, self.action_dim)
