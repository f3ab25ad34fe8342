"""Per-GPU training memory plan of a VLM (frozen image encoder + projector + decoder LM): pure arithmetic.

`plan(decoder, encoder, ...)` returns the bytes one GPU holds for weights, gradients, AdamW state and the
activations of one micro-batch, for DDP or FSDP (full shard) over `gpus` GPUs, with or without activation
checkpointing of the decoder layers. Formulas (T = micro_batch x seq tokens, h hidden, k = kv_heads x
head_dim, f MLP width, V vocabulary, a heads, L layers, P parameters; docs/scaling.md "Memory plan"):

- weights: fp32 master copy of every parameter, 4·P (FSDP: 4·P / gpus);
- gradients: fp32, 4·P_trainable; DDP adds its gradient buckets (a second 4·P_trainable, Lightning's default
  `gradient_as_bucket_view=False`); FSDP: 4·P_trainable / gpus;
- AdamW: exp_avg + exp_avg_sq in fp32, 8·P_trainable (FSDP: / gpus);
- FSDP working set (Lightning's bf16-mixed gathers bf16 units): the root unit (embeddings, head, final
  norm, projector: all outside a wrap unit) stays gathered, two decoder layers are gathered at a time
  (current + prefetch) and one layer's gradients are unsharded before their reduce-scatter; the root's
  gradients stay unsharded until the end of backward: 2·P_root + 3·2·P_layer + 2·P_root_trainable;
- activations saved for backward per token and decoder layer (HF Llama layer, SDPA; counted tensor by
  tensor in docs/scaling.md), by compute mode:
  fp32 (32-true):                         32h + 8k + 16f + 4a
  DDP bf16-mixed (fp32 weights, autocast): 30h + 4k +  8f + 4a   (norms in fp32, one bf16 cast per linear)
  FSDP bf16-mixed (bf16 units):            20h + 4k +  8f + 4a
  with activation checkpointing a layer keeps only its input, kept = 4h (FSDP 2h), and one layer is
  recomputed at a time;
- DDP working set: under autocast, backward keeps the bf16 cast of every decoder matmul weight,
  2·(L·P_layer_linear + V·h) (with checkpointing one layer's and the head's);
- head per token: final norm (12h fp32, 10h DDP mixed, 8h FSDP) + the returned logits and the loss's
  log-softmax (8V fp32, 6V mixed: bf16 logits, fp32 log-softmax). Without checkpointing the peak is the end
  of forward (L·layer + head: measured, the loss's gradients replace the freed logits); with it, the larger
  of the end of forward (L·kept + head) and one recomputed layer's backward (L·kept + layer + 2·kept);
- projector (trainable) per image token: its input and the GELU's input and output, e·(dv + 2h) (e = 4 fp32,
  2 bf16); the frozen encoder runs without autograd (no saved activations).
Not counted: allocator fragmentation and caching, CUDA context (~0.5-1 GiB), communication buffers beyond
the above, RoPE tables, attention masks (no padding mask is materialised when SDPA runs causal).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Decoder:
    """Shapes of a Llama-style decoder LM (SwiGLU MLP, RMSNorm, grouped-query attention)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = False

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def layer_params(self) -> int:
        h, k, f = self.hidden, self.kv_dim, self.intermediate
        return h * (h + 2 * k) + h * h + 3 * h * f + 2 * h  # q, k, v, o; gate, up, down; two RMSNorm weights

    @property
    def layer_linear_params(self) -> int:
        """A layer's matmul weights (what autocast casts to bf16): all but the two norm weights."""
        return self.layer_params - 2 * self.hidden

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: embedding table, output head (unless tied), final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params


@dataclass(frozen=True)
class Encoder:
    """A frozen image encoder: its parameter count, output width and the image tokens it gives the LM."""

    params: int
    width: int
    image_tokens: int


def mlp_projector_params(vision_dim: int, llm_dim: int, fused: bool = False) -> int:
    """vlm.projectors.mlp (dv->d, GELU, d->d) or fused_mlp (dv->4dv, GELU, 4dv->d, GELU, d->d), with biases."""
    if fused:
        hid = 4 * vision_dim
        return vision_dim * hid + hid + hid * llm_dim + llm_dim + llm_dim * llm_dim + llm_dim
    return vision_dim * llm_dim + llm_dim + llm_dim * llm_dim + llm_dim


MODES = ("fp32", "ddp-bf16", "fsdp-bf16")


def layer_activation_bytes_per_token(d: Decoder, mode: str) -> int:
    """Bytes one decoder layer saves for backward per token (no checkpointing)."""
    h, k, f, a = d.hidden, d.kv_dim, d.intermediate, d.heads
    if mode == "fp32":
        return 32 * h + 8 * k + 16 * f + 4 * a
    if mode == "ddp-bf16":
        return 30 * h + 4 * k + 8 * f + 4 * a
    if mode == "fsdp-bf16":
        return 20 * h + 4 * k + 8 * f + 4 * a
    raise ValueError(f"unknown compute mode {mode!r}; one of {MODES}")


def head_activation_bytes_per_token(d: Decoder, mode: str) -> int:
    """Final norm, the logits the model returns and the log-softmax the loss saves, per token."""
    norm = {"fp32": 12, "ddp-bf16": 10, "fsdp-bf16": 8}[mode] * d.hidden
    return norm + (8 if mode == "fp32" else 6) * d.vocab


def activation_bytes(d: Decoder, tokens: int, mode: str, checkpointing: bool, image_tokens: int = 0,
                     vision_dim: int = 0) -> int:
    """Activations of one micro-batch of `tokens` tokens (image tokens included) of which `image_tokens` pass
    the projector."""
    per_layer = layer_activation_bytes_per_token(d, mode)
    head = head_activation_bytes_per_token(d, mode)
    if checkpointing:
        kept = (2 if mode == "fsdp-bf16" else 4) * d.hidden  # a layer's input (the residual stream)
        # peak: the end of forward (head) or the backward of one recomputed layer with its input/output gradients
        body = tokens * (d.layers * kept + max(head, per_layer + 2 * kept))
    else:
        body = tokens * (d.layers * per_layer + head)  # peak at the end of forward
    e = 4 if mode == "fp32" else 2
    return body + image_tokens * e * (vision_dim + 2 * d.hidden)


@dataclass(frozen=True)
class Plan:
    weights: int
    grads: int
    optimizer: int
    activations: int
    working: int  # FSDP's gathered units / DDP's bf16 weight casts kept for backward

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer + self.activations + self.working


def plan(d: Decoder, enc: Encoder, projector_params: int, seq: int, micro_batch: int, gpus: int, strategy: str,
         checkpointing: bool, train_decoder: bool = True, precision: str = "bf16-mixed") -> Plan:
    """Per-GPU bytes of one training step. `train_decoder`: the decoder trains (finetune) or is frozen (align);
    the projector always trains, the encoder never. `precision`: bf16-mixed or 32-true."""
    if strategy not in ("ddp", "fsdp"):
        raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {strategy!r}")
    if gpus < 1 or micro_batch < 1 or seq < 1:
        raise ValueError(f"gpus, micro_batch and seq must be >= 1 (got {gpus}, {micro_batch}, {seq})")
    if precision not in ("bf16-mixed", "32-true"):
        raise ValueError(f"precision must be 'bf16-mixed' or '32-true', got {precision!r}")
    total = d.params + enc.params + projector_params
    trainable = projector_params + (d.params if train_decoder else 0)
    mode = "fp32" if precision == "32-true" else f"{strategy}-bf16"
    tokens = micro_batch * seq
    acts = activation_bytes(d, tokens, mode, checkpointing, micro_batch * enc.image_tokens, enc.width)
    if strategy == "ddp":
        working = 0
        if mode == "ddp-bf16":
            casts = d.layer_linear_params * (1 if checkpointing else d.layers)
            working = 2 * (casts + d.vocab * d.hidden)  # the head's cast too
        return Plan(weights=4 * total, grads=8 * trainable, optimizer=8 * trainable, activations=acts,
                    working=working)
    e = 4 if mode == "fp32" else 2
    root = d.root_params + projector_params
    working = e * root + 3 * e * d.layer_params + (e * root if train_decoder else e * projector_params)
    return Plan(weights=4 * total // gpus, grads=4 * trainable // gpus, optimizer=8 * trainable // gpus,
                activations=acts, working=working)
