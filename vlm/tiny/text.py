"""Tiny language backbones of each family: real local checkpoints with the family's own tokenizer quirks.

Each writer trains a small BPE vocabulary with HF `tokenizers` on the shared
corpus (vlm/tiny/corpus.py), builds the family's own transformers tokenizer
class from it (so the family's pre-tokenizer, byte fallback and BOS handling
apply), adds the family's special tokens and its chat template, and saves a
small seeded-random model of the family's architecture with `save_pretrained`:

- `tiny_llama`   LlamaForCausalLM (the demo's backbone, wider than the others);
  byte-level BPE with `<s>`/`</s>`, an `[INST]` chat template, no pad token;
- `tiny_llama3`  LlamaForCausalLM; byte-level BPE, `<|begin_of_text|>` added by
  the tokenizer, header tokens, `<|eot_id|>` ends a turn (eos stays
  `<|end_of_text|>`, as in the original Llama-3 release), no pad token;
- `tiny_mistral` MistralForCausalLM; SentencePiece-style `▁` BPE with byte
  fallback (LlamaTokenizer), `<s>` added, `[INST] … [/INST]` template, no pad;
- `tiny_phi`     PhiForCausalLM; byte-level BPE (CodeGenTokenizer), bos = eos =
  `<|endoftext|>` and no BOS added, no chat template, no pad;
- `tiny_qwen2`   Qwen2ForCausalLM; byte-level BPE (Qwen2Tokenizer), no BOS token,
  ChatML template with a default system turn, `<|im_end|>` eos, `<|endoftext|>` pad,
  model vocabulary padded beyond the tokenizer's;
- `tiny_gemma`   GemmaForCausalLM; `▁` BPE with byte fallback (GemmaTokenizer),
  `<bos>` added, `<start_of_turn>`/`<end_of_turn>` template, tied and
  sqrt(hidden)-scaled embeddings;
- `tiny_smollm2` LlamaForCausalLM as SmolLM2-Instruct ships it: byte-level BPE
  (GPT2Tokenizer) with `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` as ids 0-2,
  no BOS added, ChatML template with SmolLM's default system turn, eos = pad =
  `<|im_end|>`, tied embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    CodeGenTokenizer,
    GemmaConfig,
    GemmaForCausalLM,
    GemmaTokenizer,
    GPT2Tokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaTokenizer,
    MistralConfig,
    MistralForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2Tokenizer,
)

from vlm.tiny.corpus import chat_corpus, corpus

VOCAB = 800
BYTES = [f"<0x{i:02X}>" for i in range(256)]  # SentencePiece byte-fallback pieces
LLAMA_ARGS = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=1024, tie_word_embeddings=False,
                  initializer_range=0.07)  # ~1/sqrt(hidden_size); see docs/demo_recipe.md
LLAMA_VOCAB = 1000
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=1024)

LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
LLAMA3_TEMPLATE = (  # meta-llama/Meta-Llama-3-8B-Instruct
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (  # mistralai/Mistral-7B-Instruct-v0.2
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
QWEN2_TEMPLATE = (  # Qwen/Qwen2-7B-Instruct
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SMOLLM2_TEMPLATE = (  # HuggingFaceTB/SmolLM2-1.7B-Instruct
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (  # google/gemma-2b-it
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def _train_bpe(special: list[str], byte_level: bool) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab, merges) of a small BPE: byte-level (GPT-2 style) or `▁`-marked words with byte pieces (SentencePiece style)."""
    if byte_level:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet, special = [], special + BYTES
    trainer = trainers.BpeTrainer(vocab_size=VOCAB + len(special), special_tokens=special, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(chat_corpus(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]


def _save(out: Path, tokenizer, config_cls, model_cls, **config) -> None:
    torch.manual_seed(0)
    model_cls(config_cls(**SIZES, **config)).save_pretrained(out)
    tokenizer.save_pretrained(out)


def _padded(n: int, multiple: int = 64) -> int:
    return -(-n // multiple) * multiple


def llama_tokenizer(texts, vocab_size: int = LLAMA_VOCAB) -> PreTrainedTokenizerFast:
    """tiny_llama's tokenizer trained on `texts`: byte-level BPE, `<s>`/`</s>`, the `[INST]` chat template, no pad."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = LLAMA_TEMPLATE  # no pad token on purpose: like Llama-2, the backbone adds one
    return fast


def write_tiny_llama(out: Path) -> None:
    fast = llama_tokenizer(corpus())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, **LLAMA_ARGS)
    LlamaForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)


def write_tiny_llama3(out: Path) -> None:
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    vocab, merges = _train_bpe([], byte_level=True)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(special)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(  # the tokenizer itself writes BOS, as Llama-3's does
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B", special_tokens=[("<|begin_of_text|>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    fast.chat_template = LLAMA3_TEMPLATE
    eot = fast.convert_tokens_to_ids("<|eot_id|>")
    _save(out, fast, LlamaConfig, LlamaForCausalLM, vocab_size=len(fast), num_key_value_heads=2, rope_theta=500000.0,
          tie_word_embeddings=False, bos_token_id=bos, eos_token_id=[fast.eos_token_id, eot])


def write_tiny_mistral(out: Path) -> None:
    vocab, merges = _train_bpe(["<unk>", "<s>", "</s>"], byte_level=False)
    tok = LlamaTokenizer(vocab=vocab, merges=merges, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                         add_bos_token=True, add_eos_token=False)
    tok.chat_template = MISTRAL_TEMPLATE  # no pad token: the backbone adds one, as for Mistral
    _save(out, tok, MistralConfig, MistralForCausalLM, vocab_size=len(tok), num_key_value_heads=2, sliding_window=None,
          tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


def write_tiny_phi(out: Path) -> None:
    vocab, merges = _train_bpe(["<|endoftext|>"], byte_level=True)
    tok = CodeGenTokenizer(vocab=vocab, merges=merges)  # bos = eos = unk = <|endoftext|>, never added; no pad
    _save(out, tok, PhiConfig, PhiForCausalLM, vocab_size=_padded(len(tok)), partial_rotary_factor=0.5,
          resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, tie_word_embeddings=False,
          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


def write_tiny_qwen2(out: Path) -> None:
    vocab, merges = _train_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], byte_level=True)
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                         pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tok.chat_template = QWEN2_TEMPLATE
    _save(out, tok, Qwen2Config, Qwen2ForCausalLM, vocab_size=_padded(len(tok)), num_key_value_heads=2,
          tie_word_embeddings=False, use_sliding_window=False, bos_token_id=None, eos_token_id=tok.eos_token_id)


def write_tiny_gemma(out: Path) -> None:
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    vocab, merges = _train_bpe(special, byte_level=False)
    tok = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=False,
                         additional_special_tokens=["<start_of_turn>", "<end_of_turn>"])
    tok.chat_template = GEMMA_TEMPLATE
    _save(out, tok, GemmaConfig, GemmaForCausalLM, vocab_size=len(tok), num_key_value_heads=1, head_dim=16,
          pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


def write_tiny_smollm2(out: Path) -> None:
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab, merges = _train_bpe(special, byte_level=True)
    tok = GPT2Tokenizer(vocab=vocab, merges=merges, unk_token="<|endoftext|>", bos_token="<|im_start|>",
                        eos_token="<|im_end|>", pad_token="<|im_end|>", additional_special_tokens=special[1:])
    tok.chat_template = SMOLLM2_TEMPLATE
    _save(out, tok, LlamaConfig, LlamaForCausalLM, vocab_size=len(tok), num_key_value_heads=2, rope_theta=100000.0,
          tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
          pad_token_id=tok.pad_token_id)
