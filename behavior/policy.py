"""Behavior policies (plain `nn.Module`s): a GPT next-action-token predictor and a continuous MLP baseline.

Both read the same inputs: the observation history (B, n_obs, S) — normalised
here with the dataset's mean/std, stored as buffers so a checkpoint carries
them; S = 0 for a policy without state — the task index (B,), and, with a
`vision` module (`behavior.vision.CameraTokens`), the current frame of each
camera (`images`: (B, C, 3, h, w) encoder inputs, or their pooled encoder
`image_features` precomputed for a frozen encoder). Actions are normalised to [-1, 1] with the
dataset's q01/q99 (`behavior.normalize`) and un-normalised on the way out.

`GPTPolicy`: a causal transformer over [task token, observation tokens, action
tokens]; camera tokens, when there are cameras, sit between the task and
the observation tokens. It predicts the tokens of an action chunk one at a time (teacher
forcing in training; a KV cache at inference, greedy or with a temperature).
For k-means tokens a head also predicts each cluster's residual offset (BeT).
The transformer is written out (pre-norm blocks on torch's SDPA) rather than
taken from transformers so that one control step at batch 1 costs a few small
kernels, not a generation framework's per-token overhead.

`MLPPolicy` (`policy=mlp_bc`): regresses the normalised chunk directly (MSE),
the continuous behavior-cloning baseline.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from behavior.codec import IGNORE, ActionCodec
from behavior.normalize import ActionNormalizer


class Normalisation(nn.Module):
    """Observation mean/std and action q01/q99 as buffers (saved with the weights)."""

    def __init__(self, state_dim: int, action_dim: int):
        super().__init__()
        self.register_buffer("obs_mean", torch.zeros(state_dim))
        self.register_buffer("obs_std", torch.ones(state_dim))
        self.register_buffer("act_q01", -torch.ones(action_dim))
        self.register_buffer("act_q99", torch.ones(action_dim))

    def set(self, obs_mean, obs_std, act_q01, act_q99) -> None:
        for name, value in (("obs_mean", obs_mean), ("obs_std", obs_std), ("act_q01", act_q01), ("act_q99", act_q99)):
            getattr(self, name).copy_(torch.as_tensor(np.asarray(value), dtype=torch.float32))

    def obs(self, states: torch.Tensor) -> torch.Tensor:
        return ((states - self.obs_mean) / self.obs_std.clamp(min=1e-2)).clamp(-10, 10)

    def actions(self) -> ActionNormalizer:
        return ActionNormalizer(q01=self.act_q01.double().cpu().numpy(), q99=self.act_q99.double().cpu().numpy())


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        # functional calls on the modules' parameters: at batch 1 a control step is dominated by per-call overhead
        b, t, d = x.shape
        h = F.layer_norm(x, (d,), self.ln1.weight, self.ln1.bias, self.ln1.eps)
        q, k, v = F.linear(h, self.qkv.weight, self.qkv.bias).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:  # [k, v] of the earlier positions, extended in place
            if cache:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            cache[:] = [k, v]
        causal = t > 1  # a single new query attends to every cached position
        if causal and k.shape[2] != t:
            raise ValueError("multi-token steps on a non-empty cache are not supported")
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=drop)
        y = F.linear(y.transpose(1, 2).reshape(b, t, d), self.proj.weight, self.proj.bias)
        x = x + (F.dropout(y, drop, True) if drop else y)
        up, down = self.mlp[0], self.mlp[2]
        h = F.layer_norm(x, (d,), self.ln2.weight, self.ln2.bias, self.ln2.eps)
        h = F.linear(F.gelu(F.linear(h, up.weight, up.bias)), down.weight, down.bias)
        return x + (F.dropout(h, drop, True) if drop else h)


class GPTPolicy(nn.Module):
    def __init__(self, codec: ActionCodec, state_dim: int, num_tasks: int, n_obs: int = 1, d_model: int = 128,
                 n_layers: int = 4, n_heads: int = 4, dropout: float = 0.1, vision: nn.Module | None = None):
        super().__init__()
        self.codec, self.n_obs, self.state_dim = codec, n_obs, state_dim
        self.chunk_size, self.action_dim = codec.chunk_size, codec.action_dim
        self.norm = Normalisation(state_dim, codec.action_dim)
        self.task_embed = nn.Embedding(num_tasks, d_model)
        self.obs_embed = nn.Linear(state_dim, d_model) if state_dim else None
        self.vision = vision
        self.token_embed = nn.Embedding(codec.vocab_size, d_model)
        self.context = 1 + (vision.num_tokens if vision is not None else 0) + (n_obs if state_dim else 0)
        self.pos_embed = nn.Parameter(torch.zeros(self.context + codec.max_tokens, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, codec.vocab_size)
        self.offset_head = nn.Linear(d_model, codec.offset_dim) if codec.offset_dim else None
        nn.init.normal_(self.pos_embed, std=0.02)

    def _context(self, states: torch.Tensor, task: torch.Tensor, images: torch.Tensor | None = None,
                 image_features: torch.Tensor | None = None) -> torch.Tensor:
        parts = [self.task_embed(task)[:, None]]
        if self.vision is not None:
            parts.append(self.vision(images, image_features))
        if self.obs_embed is not None:
            parts.append(self.obs_embed(self.norm.obs(states)))
        return torch.cat(parts, 1)

    def _run(self, x: torch.Tensor, start: int, caches: list | None = None) -> torch.Tensor:
        x = x + self.pos_embed[start : start + x.shape[1]]
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.ln_f(x)

    def forward(self, states: torch.Tensor, task: torch.Tensor, tokens: torch.Tensor, images: torch.Tensor | None = None,
                image_features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: hidden states and logits at the positions that predict tokens[:, i] (B, L, ·)."""
        inputs = tokens[:, :-1].clamp(min=0)  # IGNORE padding sits only after EOS: causally invisible to targets
        x = torch.cat([self._context(states, task, images, image_features), self.token_embed(inputs)], 1)
        hidden = self._run(x, 0)[:, self.context - 1 :]
        return hidden, self.head(hidden)

    def loss(self, batch: dict) -> torch.Tensor:
        hidden, logits = self(batch["states"], batch["task"], batch["tokens"], batch.get("images"), batch.get("image_features"))
        loss = F.cross_entropy(logits.flatten(0, 1), batch["tokens"].flatten(), ignore_index=IGNORE)
        if self.offset_head is not None:  # BeT: the offset of the true cluster at each action token
            loss = loss + F.mse_loss(self._picked_offsets(hidden, batch["tokens"]), batch["offsets"])
        return loss

    def sample_losses(self, batch: dict) -> torch.Tensor:
        """Each row's mean action-token loss (plus its offset error, BeT), what smart sifting ranks rows by."""
        hidden, logits = self(batch["states"], batch["task"], batch["tokens"], batch.get("images"), batch.get("image_features"))
        tokens = batch["tokens"]
        per_token = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), ignore_index=IGNORE, reduction="none")
        counted = (tokens != IGNORE).sum(1)
        losses = per_token.view(tokens.shape).sum(1) / counted.clamp(min=1)
        if self.offset_head is not None:
            losses = losses + (self._picked_offsets(hidden, tokens) - batch["offsets"]).pow(2).flatten(1).mean(1)
        return losses

    def _picked_offsets(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        offsets = self.offset_head(hidden).view(*hidden.shape[:2], -1, self.action_dim)
        return offsets.gather(2, tokens.clamp(min=0)[..., None, None].expand(-1, -1, 1, self.action_dim))[:, :, 0]

    @torch.inference_mode()
    def generate(self, states: torch.Tensor, task: torch.Tensor, temperature: float = 0.0,
                 generator: torch.Generator | None = None, images: torch.Tensor | None = None,
                 image_features: torch.Tensor | None = None) -> tuple[list[list[int]], np.ndarray | None]:
        """Action-chunk tokens with a KV cache: greedy (temperature 0) or sampled. Returns (ids per row, offsets)."""
        codec, batch = self.codec, states.shape[0]
        caches = [[] for _ in self.blocks]
        hidden = self._run(self._context(states, task, images, image_features), 0, caches)[:, -1]
        ids, offsets, done = [], [], torch.zeros(batch, dtype=torch.bool, device=states.device)
        for i in range(codec.max_tokens):
            logits = self.head(hidden).float()
            last = i == codec.max_tokens - 1
            if codec.fixed_length:  # never EOS: choose among the tokenizer's ids only
                logits = logits[:, : codec.eos_id]
            elif last:  # a sequence that reached the length limit ends here
                logits = torch.full_like(logits, -torch.inf)
                logits[:, codec.eos_id] = 0
            if temperature > 0:
                token = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            else:
                token = logits.argmax(-1)
            if not codec.fixed_length:
                token = torch.where(done, torch.full_like(token, codec.eos_id), token)
                done |= token == codec.eos_id
            if self.offset_head is not None:
                table = self.offset_head(hidden).view(batch, -1, self.action_dim)
                offsets.append(table[torch.arange(batch), token.clamp(max=table.shape[1] - 1)])
            ids.append(token)
            if last or (not codec.fixed_length and bool(done.all())):
                break
            hidden = self._run(self.token_embed(token)[:, None], self.context + i, caches)[:, -1]
        rows = torch.stack(ids, 1).tolist()
        return rows, (torch.stack(offsets, 1).cpu().numpy() if offsets else None)

    @torch.inference_mode()
    def act(self, states: torch.Tensor, task: torch.Tensor, temperature: float = 0.0,
            generator: torch.Generator | None = None, images: torch.Tensor | None = None,
            image_features: torch.Tensor | None = None) -> np.ndarray:
        """Raw observation history (B, n_obs, S) (and camera inputs) → un-normalised action chunk (B, H, D)."""
        ids, offsets = self.generate(states, task, temperature, generator, images, image_features)
        return self.norm.actions().unnormalize(self.codec.decode(ids, offsets))


class MLPPolicy(nn.Module):
    def __init__(self, state_dim: int, num_tasks: int, action_dim: int, chunk_size: int = 1, n_obs: int = 1,
                 hidden: int = 512, n_layers: int = 3, dropout: float = 0.0, vision: nn.Module | None = None):
        super().__init__()
        self.n_obs, self.state_dim, self.chunk_size, self.action_dim = n_obs, state_dim, chunk_size, action_dim
        self.num_tasks, self.vision = num_tasks, vision
        self.norm = Normalisation(state_dim, action_dim)
        image_width = vision.num_tokens * vision.proj.out_features if vision is not None else 0
        layers, width = [], n_obs * state_dim + num_tasks + image_width
        for _ in range(n_layers):
            layers += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        self.net = nn.Sequential(*layers, nn.Linear(width, chunk_size * action_dim))

    def forward(self, states: torch.Tensor, task: torch.Tensor, images: torch.Tensor | None = None,
                image_features: torch.Tensor | None = None) -> torch.Tensor:
        parts = [self.norm.obs(states).flatten(1), F.one_hot(task, self.num_tasks).to(states.dtype)]
        if self.vision is not None:
            parts.append(self.vision(images, image_features).flatten(1))
        return self.net(torch.cat(parts, 1)).view(-1, self.chunk_size, self.action_dim)

    def _predict(self, batch: dict) -> torch.Tensor:
        return self(batch["states"], batch["task"], batch.get("images"), batch.get("image_features"))

    def loss(self, batch: dict) -> torch.Tensor:
        return F.mse_loss(self._predict(batch), batch["actions"])

    def sample_losses(self, batch: dict) -> torch.Tensor:
        return (self._predict(batch) - batch["actions"]).pow(2).flatten(1).mean(1)

    @torch.no_grad()
    def act(self, states: torch.Tensor, task: torch.Tensor, temperature: float = 0.0, generator=None,
            images: torch.Tensor | None = None, image_features: torch.Tensor | None = None) -> np.ndarray:
        chunk = self(states, task, images, image_features).clamp(-1, 1).double().cpu().numpy()
        return self.norm.actions().unnormalize(chunk)
