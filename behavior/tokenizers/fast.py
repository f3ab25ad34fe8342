"""FAST action tokenizer: DCT over time + scalar rounding + byte-pair encoding.

Inputs are chunks of *already normalised* actions (see behavior.normalize), each
of shape (T, D); T and D are fixed at ``fit``.

encode(chunk):
1. c = scipy.fft.dct(chunk, type=2, axis=0, norm="ortho")   (per dimension over time)
2. q = round(c * scale) as integers (np.rint: halves to even)
3. flatten row-major: frequency-major, all D dimensions of frequency 0 first
4. integer -> character: chr(CHAR_BASE + clip(q, min_token, max_token) - min_token),
   where [min_token, max_token] is the integer range seen at fit time and
   CHAR_BASE = 0x4E00 (start of the CJK block: 20 992 contiguous, printable code
   points with no control/whitespace/surrogate characters, so the string needs
   no escaping tricks and the tokenizer needs no pre-tokenizer). Coefficients
   outside the fitted range are clipped to it (reported by ``last_clipped``).
5. BPE (HF ``tokenizers`` BPE model, no normaliser / pre-tokenizer, so a chunk
   is one "word"); the whole fitted alphabet is seeded as ``initial_alphabet``
   so every single character is a token and any in-range chunk is encodable.
   -> variable-length int64 id array (1-D).

decode(ids):
ids -> token strings (tokenizer.id_to_token) -> characters -> integers ->
pad with zeros / truncate to T*D -> reshape (T, D) -> / scale -> inverse DCT.
A sequence that does not produce exactly T*D coefficients (wrong length, an
unknown id) is *malformed*: it is repaired as above (missing trailing, i.e.
highest-frequency, coefficients are zero; extras dropped; unknown ids skipped)
and counted once in ``decode_errors``. decode never raises on malformed ids.

Batches: encode of (N, T, D) returns a list of N 1-D arrays; decode of a list
of sequences (or a 2-D array) returns (N, T, D). A single 1-D sequence decodes
to (T, D).

vocab_size = the trained BPE vocabulary size (<= the requested ``bpe_vocab_size``;
BPE stops early when no pair occurs ``min_frequency`` times). Saved as
``config.json`` + HF ``tokenizer.json``. scipy and tokenizers are imported
lazily, so the other tokenizers work without them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .base import SEQUENCE, ActionTokenizer, as_float, require_fitted

CHAR_BASE = 0x4E00
MAX_ALPHABET = 0x9FFF - 0x4E00 + 1
TOKENIZER_FILE = "tokenizer.json"


class FASTTokenizer(ActionTokenizer):
    kind = SEQUENCE

    def __init__(
        self,
        scale: float = 10.0,
        bpe_vocab_size: int = 1024,
        min_frequency: int = 2,
        time_horizon: int | None = None,
        action_dim: int | None = None,
        min_token: int | None = None,
        max_token: int | None = None,
    ) -> None:
        self.scale = float(scale)
        self.bpe_vocab_size = int(bpe_vocab_size)
        self.min_frequency = int(min_frequency)
        self.time_horizon = time_horizon
        self.action_dim = action_dim
        self.min_token = min_token
        self.max_token = max_token
        self.bpe = None  # tokenizers.Tokenizer
        self.decode_errors = 0
        self.last_clipped = 0

    # ----------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        require_fitted(self.bpe is not None, self)
        return int(self.bpe.get_vocab_size())

    def roundtrip_bound(self) -> float | None:
        """Each coefficient is off by at most 0.5 / scale and an orthonormal inverse DCT sums T of them with
        weights <= sqrt(2 / T): |error| <= 0.5 / scale * sqrt(2 T), for chunks whose coefficients are not clipped."""
        require_fitted(self.bpe is not None, self)
        return 0.5 / self.scale * float(np.sqrt(2 * self.time_horizon))

    # ------------------------------------------------------------- helpers
    def _coeffs(self, chunks: np.ndarray) -> np.ndarray:
        """(..., T, D) float -> (..., T*D) int64 quantised DCT coefficients."""
        from scipy.fft import dct

        c = dct(chunks, type=2, axis=-2, norm="ortho")
        q = np.rint(c * self.scale).astype(np.int64)
        return q.reshape(*q.shape[:-2], -1)

    def _to_str(self, q: np.ndarray) -> str:
        qc = np.clip(q, self.min_token, self.max_token)
        self.last_clipped = int((qc != q).sum())
        return "".join(map(chr, (qc - self.min_token + CHAR_BASE).tolist()))

    def _check_chunk(self, x: np.ndarray) -> None:
        if x.ndim not in (2, 3):
            raise ValueError(f"expected a chunk (T, D) or batch (N, T, D), got shape {x.shape}")
        if self.time_horizon is not None and x.shape[-2:] != (self.time_horizon, self.action_dim):
            raise ValueError(
                f"chunk shape {x.shape[-2:]} != fitted ({self.time_horizon}, {self.action_dim})"
            )

    # ----------------------------------------------------------------- fit
    def fit(self, actions) -> FASTTokenizer:
        from tokenizers import Tokenizer
        from tokenizers.models import BPE
        from tokenizers.trainers import BpeTrainer

        x = as_float(actions)
        if x.ndim == 2:
            x = x[None]
        self.time_horizon, self.action_dim = None, None
        self._check_chunk(x)
        self.time_horizon, self.action_dim = int(x.shape[1]), int(x.shape[2])
        q = self._coeffs(x)  # (N, T*D)
        self.min_token, self.max_token = int(q.min()), int(q.max())
        n_alpha = self.max_token - self.min_token + 1
        if n_alpha > min(self.bpe_vocab_size, MAX_ALPHABET):
            raise ValueError(
                f"integer range {n_alpha} exceeds bpe_vocab_size {self.bpe_vocab_size}: "
                "normalise the actions, lower `scale` or raise `bpe_vocab_size`"
            )
        alphabet = [chr(CHAR_BASE + i) for i in range(n_alpha)]
        trainer = BpeTrainer(
            vocab_size=self.bpe_vocab_size,
            min_frequency=self.min_frequency,
            show_progress=False,
            special_tokens=[],
            initial_alphabet=alphabet,
        )
        bpe = Tokenizer(BPE())
        strings = [self._to_str(row) for row in q]
        bpe.train_from_iterator(strings, trainer=trainer)
        self.bpe = bpe
        self.decode_errors = 0
        return self

    # -------------------------------------------------------------- encode
    def encode(self, actions):
        require_fitted(self.bpe is not None, self)
        x = as_float(actions)
        self._check_chunk(x)
        if x.ndim == 3:
            return [self.encode(c) for c in x]
        s = self._to_str(self._coeffs(x))
        return np.asarray(self.bpe.encode(s).ids, dtype=np.int64)

    # -------------------------------------------------------------- decode
    def decode(self, ids):
        require_fitted(self.bpe is not None, self)
        if isinstance(ids, np.ndarray) and ids.ndim == 2:
            return np.stack([self._decode_one(r) for r in ids])
        if isinstance(ids, (list, tuple)) and ids and not np.isscalar(ids[0]):
            return np.stack([self._decode_one(r) for r in ids])
        return self._decode_one(ids)

    def _decode_one(self, ids: Sequence[int]) -> np.ndarray:
        from scipy.fft import idct

        T, D = self.time_horizon, self.action_dim
        n = T * D
        bad = False
        chars: list[str] = []
        for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            tok = self.bpe.id_to_token(i) if i >= 0 else None
            if tok is None:
                bad = True
                continue
            chars.append(tok)
        s = "".join(chars)
        q = np.fromiter((ord(ch) - CHAR_BASE + self.min_token for ch in s), dtype=np.int64, count=len(s))
        if len(q) != n:
            bad = True
            q = np.concatenate([q[:n], np.zeros(max(0, n - len(q)), dtype=np.int64)])
        if bad:
            self.decode_errors += 1
        return idct(q.reshape(T, D) / self.scale, type=2, axis=0, norm="ortho")

    # ------------------------------------------------------------------ io
    def get_config(self) -> dict:
        return {
            "scale": self.scale,
            "bpe_vocab_size": self.bpe_vocab_size,
            "min_frequency": self.min_frequency,
            "time_horizon": self.time_horizon,
            "action_dim": self.action_dim,
            "min_token": self.min_token,
            "max_token": self.max_token,
        }

    def save(self, directory: str) -> None:
        require_fitted(self.bpe is not None, self)
        super().save(directory)
        self.bpe.save(os.path.join(directory, TOKENIZER_FILE))

    def restore_files(self, directory: str) -> None:
        from tokenizers import Tokenizer

        self.bpe = Tokenizer.from_file(os.path.join(directory, TOKENIZER_FILE))
