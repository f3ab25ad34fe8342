"""Action tokens as language tokens: the codec's ids ↔ the backbone's token ids (OpenVLA's vocabulary mapping).

OpenVLA discretises each action dimension into 256 bins and writes bin `d` as Llama-2 token `32000 - d`: the last
256 ids of the text vocabulary, which SentencePiece fills with its rarest merges, are overwritten by the actions
(the embedding rows are fine-tuned; no row is added, so the checkpoint stays a plain Llama and HF Llava folder).

`ActionVocabulary` does the same for any action tokenizer of behavior/tokenizers through its `ActionCodec`: the
tokenizer's `n` ids (`vocab_size`; OpenVLA's tokenizer counts its `n_bins` ids down from `vocab_size`, so its used
range `min_token_id .. vocab_size - 1` is what is mapped) go onto the last `n` ids of the backbone tokenizer's base
vocabulary (`tokenizer.vocab_size`: without added tokens such as `<pad>` or `<image>`), in order:

    token = base_vocab - n + (codec_id - low)        low = the tokenizer's lowest id (0, or OpenVLA's min_token_id)

so that OpenVLA's own tokenizer (`tokenizer.vocab_size=32000`) on a Llama-2 backbone gives exactly OpenVLA's token
ids, and the 256-bin tokenizers (openvla, uniform, quantile) on any backbone give the 256 ids that BPE/SentencePiece
trainers give the latest, i.e. least frequent, merges. Why the last ids and not new rows: the vocabulary, the
embedding shapes and the exported HF folder stay the backbone's. A backbone whose special tokens (BOS, EOS, pad,
unk) fall inside that range, or whose base vocabulary is smaller than `n`, is refused. A variable-length
tokenizer's end-of-sequence id (FAST, `codec.eos_id`) maps onto the prompt format's end-of-turn token.
Cluster tokenizers (kmeans) are refused: their continuous residual offset is not a token.
"""

from __future__ import annotations

import numpy as np

from behavior.codec import IGNORE, ActionCodec
from behavior.tokenizers import CLUSTER


class ActionVocabularyError(ValueError):
    """An action tokenizer that cannot be written in this backbone's vocabulary; the message says why."""


class ActionVocabulary:
    def __init__(self, codec: ActionCodec, base_vocab: int, special_ids: list[int], end_of_turn_id: int,
                 model_vocab: int | None = None):
        if codec.kind == CLUSTER:
            raise ActionVocabularyError(f"{type(codec.tokenizer).__name__} adds a continuous residual offset to each "
                                        "cluster id, which a language token cannot carry; choose a per-dimension bin "
                                        "tokenizer (tokenizer=openvla, uniform or quantile), residual_vq or fast")
        self.codec = codec
        tok = codec.tokenizer
        self.low = int(getattr(tok, "min_token_id", 0))
        self.size = int(tok.vocab_size) - self.low           # action ids mapped (the codec's EOS apart)
        self.base_vocab = int(base_vocab)
        self.first = self.base_vocab - self.size               # the first backbone id holding an action
        self.end_of_turn_id = int(end_of_turn_id)
        self.model_vocab = int(model_vocab or base_vocab)      # rows of the output layer (generation's id space)
        if self.first < 0:
            raise ActionVocabularyError(f"the action tokenizer has {self.size} ids but the backbone's base vocabulary "
                                        f"only {self.base_vocab}; choose fewer bins (tokenizer.n_bins) or a larger backbone")
        taken = sorted(i for i in set(special_ids) if i is not None and self.first <= i < self.base_vocab)
        if taken:
            raise ActionVocabularyError(f"special token ids {taken} lie in the action range {self.first}..{self.base_vocab - 1} "
                                        "(the last ids of the base vocabulary); this backbone cannot give them up")

    @classmethod
    def for_backbone(cls, codec: ActionCodec, backbone) -> ActionVocabulary:
        """The mapping onto `backbone` (vlm.backbones.HFBackbone): its tokenizer's base vocabulary and special ids."""
        tok = backbone.tokenizer
        rows = backbone.model.get_output_embeddings().weight.shape[0]
        return cls(codec, tok.vocab_size, list(tok.all_special_ids), backbone.prompt_format.end_of_turn_id, rows)

    @property
    def fixed_length(self) -> bool:
        return self.codec.fixed_length

    @property
    def num_tokens(self) -> int:
        """Tokens per action chunk (the longest, end-of-turn included, for a variable-length tokenizer)."""
        return self.codec.max_tokens

    @property
    def allowed(self) -> list[int]:
        """The backbone ids action decoding may emit: the action ids (and the end-of-turn id for variable length)."""
        return list(range(self.first, self.base_vocab)) + ([] if self.fixed_length else [self.end_of_turn_id])

    @property
    def suppressed(self) -> list[int]:
        """Every other id of the output layer (HF generate's `suppress_tokens`)."""
        keep = set(self.allowed)
        return [i for i in range(self.model_vocab) if i not in keep]

    def to_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Codec ids (N, T), padded with IGNORE → backbone token ids (N, T), IGNORE kept."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.where(ids == IGNORE, IGNORE, ids - self.low + self.first)
        if not self.fixed_length:
            out = np.where(ids == self.codec.eos_id, self.end_of_turn_id, out)
        return out

    def to_codec(self, tokens: np.ndarray) -> np.ndarray:
        """Backbone token ids → codec ids (the inverse of `to_tokens`); the end-of-turn id → the codec's EOS id.
        An id outside the action range (impossible with `suppressed` decoding) is refused."""
        tokens = np.asarray(tokens, dtype=np.int64)
        eos = (tokens == self.end_of_turn_id) & (not self.fixed_length)
        inside = (tokens >= self.first) & (tokens < self.base_vocab)
        if not bool((inside | eos | (tokens == IGNORE)).all()):
            bad = sorted(set(tokens[~(inside | eos | (tokens == IGNORE))].tolist()))[:5]
            raise ActionVocabularyError(f"token ids {bad} are not action tokens ({self.first}..{self.base_vocab - 1})")
        out = np.where(inside, tokens - self.first + self.low, tokens)
        return np.where(eos, self.codec.eos_id, out)

    def encode(self, normalised_chunks: np.ndarray) -> np.ndarray:
        """(N, H, D) normalised chunks → backbone token ids (N, T), IGNORE-padded for variable length."""
        ids, offsets = self.codec.encode(normalised_chunks)
        return self.to_tokens(ids)

    def decode(self, tokens) -> np.ndarray:
        """Generated backbone ids per row → normalised chunks (N, H, D)."""
        return self.codec.decode([self.to_codec(np.asarray(row)).tolist() for row in tokens])

    def spec(self) -> dict:
        """What `vla.json` records about the mapping (read back by `vla.inference.load`; documented for the export)."""
        return {"first_token_id": self.first, "base_vocab": self.base_vocab, "action_ids": self.size,
                "codec_low": self.low, "end_of_turn_id": self.end_of_turn_id, "model_vocab": self.model_vocab,
                "tokens_per_chunk": self.num_tokens, "fixed_length": self.fixed_length}
