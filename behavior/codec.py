"""Action chunks ↔ token sequences for the GPT policy, over any `behavior.tokenizers.ActionTokenizer`.

The tokenizer's `kind` says how a normalised chunk (H, D) becomes tokens:
- `PER_VECTOR` (openvla, uniform, quantile, residual_vq): each action vector gives a fixed
  number W of ids (W = D for per-dimension bins, the levels for residual VQ), H·W ids time-major;
- `CLUSTER` (kmeans): H cluster ids, plus a continuous (H, D) residual offset;
- `SEQUENCE` (fast): a variable number of ids, ended by an end-of-sequence id.
The policy's vocabulary is the tokenizer's ids plus one EOS id (`eos_id =
tokenizer.vocab_size`); fixed-length kinds never emit it. Targets are padded
with -100 (ignored by the loss).
"""

from __future__ import annotations

import numpy as np

from behavior.tokenizers import CLUSTER, PER_VECTOR, SEQUENCE, ActionTokenizer

IGNORE = -100


class ActionCodec:
    def __init__(self, tokenizer: ActionTokenizer, chunk_size: int, action_dim: int, max_tokens: int | None = None):
        kind = getattr(tokenizer, "kind", None)
        if kind not in (PER_VECTOR, CLUSTER, SEQUENCE):
            raise ValueError(f"{type(tokenizer).__name__}.kind is {kind!r}; the codec reads "
                             f"{PER_VECTOR!r}, {CLUSTER!r} or {SEQUENCE!r}")
        self.tokenizer, self.chunk_size, self.action_dim = tokenizer, int(chunk_size), int(action_dim)
        self.kind = kind
        self._max_tokens = max_tokens  # a sequence's longest (measured by `fit`, EOS included), or given

    @property
    def max_tokens(self) -> int:
        """Tokens per chunk (the longest, EOS included, for sequences)."""
        if self._max_tokens is None:
            if self.kind == SEQUENCE:
                raise RuntimeError("a sequence tokenizer's longest chunk is measured by ActionCodec.fit; fit first")
            self._max_tokens = self.chunk_size * self.ids_per_action()
        return self._max_tokens

    def ids_per_action(self) -> int:
        """Ids one action vector becomes (fixed-length kinds): read off the encoding of a zero action."""
        if self.kind == CLUSTER:
            return 1
        return int(np.asarray(self.tokenizer.encode(np.zeros((1, self.action_dim)))).shape[-1])

    @property
    def eos_id(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size + 1

    @property
    def fixed_length(self) -> bool:
        return self.kind != SEQUENCE

    @property
    def offset_dim(self) -> int:
        """Width of the residual-offset head (clusters × D for CLUSTER tokenizers; 0 otherwise)."""
        return self.tokenizer.vocab_size * self.action_dim if self.kind == CLUSTER else 0

    def fit(self, chunks: np.ndarray) -> ActionCodec:
        """Fit the tokenizer on normalised chunks (N, H, D) (per-vector tokenizers see the actions)."""
        self.tokenizer.fit(chunks if self.kind == SEQUENCE else chunks.reshape(-1, self.action_dim))
        if self.kind == SEQUENCE:
            self._max_tokens = max(len(ids) for ids in self.tokenizer.encode(chunks)) + 1
        return self

    def encode(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(N, H, D) normalised → (ids (N, max_tokens) padded with IGNORE, offsets (N, H, D) or None)."""
        n = chunks.shape[0]
        if self.kind == PER_VECTOR:
            return self.tokenizer.encode(chunks).reshape(n, -1).astype(np.int64), None
        if self.kind == CLUSTER:
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
        if self.kind == PER_VECTOR:
            return self.tokenizer.decode(np.asarray(rows, dtype=np.int64).reshape(len(rows), self.chunk_size, -1))
        if self.kind == CLUSTER:
            return self.tokenizer.decode(np.asarray(rows, dtype=np.int64), offsets)
        return np.asarray(self.tokenizer.decode([np.asarray(r, dtype=np.int64) for r in rows])).reshape(
            len(rows), self.chunk_size, self.action_dim)
