"""The same weights in transformers' GPT2LMHeadModel, built from a config (nothing is downloaded).

transformers' GPT-2 stores its layer matrices in ``Conv1D`` modules, whose
weight is (in, out): the transpose of ``nn.Linear``'s and the same layout as
this lab's. Its output head is an ``nn.Linear`` tied to the (vocab, width)
token embedding, so the tied matrix is copied in transposed.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, StaticCache

from .config import DecoderConfig
from .model import Decoder


def hf_config(config: DecoderConfig) -> GPT2Config:
    if config.kv_heads != config.heads:
        raise ValueError(f"transformers' GPT-2 has no grouped-query attention: kv_heads {config.kv_heads} "
                         f"must equal heads {config.heads}")
    return GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.max_positions, n_embd=config.width,
        n_layer=config.layers, n_head=config.heads, n_inner=config.hidden, activation_function="gelu_new",
        layer_norm_epsilon=config.layer_norm_eps, initializer_range=config.init_std,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )


def hf_model(model: Decoder) -> GPT2LMHeadModel:
    """transformers' GPT-2 holding exactly ``model``'s weights, in its dtype, on its device, in eval mode."""
    config = model.config
    with torch.device("meta"):  # skip transformers' own random init: every tensor is overwritten below
        reference = GPT2LMHeadModel(hf_config(config))
    reference = reference.to_empty(device=model.device).to(config.dtype)
    with torch.no_grad():
        body = reference.transformer
        body.wte.weight.copy_(model.tied_head.t())  # (vocab, C); the head is tied to it
        body.wpe.weight.copy_(model.position)
        for ours, theirs in zip(model.layers, body.h, strict=True):
            pairs = [
                (theirs.ln_1.weight, ours.norm_attention_weight), (theirs.ln_1.bias, ours.norm_attention_bias),
                (theirs.attn.c_attn.weight, ours.qkv_weight), (theirs.attn.c_attn.bias, ours.qkv_bias),
                (theirs.attn.c_proj.weight, ours.out_weight), (theirs.attn.c_proj.bias, ours.out_bias),
                (theirs.ln_2.weight, ours.norm_mlp_weight), (theirs.ln_2.bias, ours.norm_mlp_bias),
                (theirs.mlp.c_fc.weight, ours.fc_weight), (theirs.mlp.c_fc.bias, ours.fc_bias),
                (theirs.mlp.c_proj.weight, ours.proj_weight.t()), (theirs.mlp.c_proj.bias, ours.proj_bias),
            ]
            for target, source in pairs:
                target.copy_(source)  # Conv1D is (in, out); our proj is stored (out, in), hence its .t()
        body.ln_f.weight.copy_(model.norm_final_weight)
        body.ln_f.bias.copy_(model.norm_final_bias)
    reference.tie_weights()
    if reference.lm_head.weight.data_ptr() != body.wte.weight.data_ptr():
        raise RuntimeError("transformers' GPT-2 output head is not tied to its token embedding")
    return reference.eval()


def hf_cached_step_logits(reference: GPT2LMHeadModel, ids: Tensor) -> Tensor:
    """Feed ids (B, T) one token per call through a DynamicCache; the logits after every step, (B, T, vocab)."""
    cache = DynamicCache(config=reference.config)
    steps = []
    for t in range(ids.shape[1]):
        out = reference(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
        steps.append(out.logits[:, -1])
    return torch.stack(steps, dim=1)


def hf_filled_cache(reference: GPT2LMHeadModel, layers: list[tuple[Tensor, Tensor]], static: bool,
                    capacity: int) -> DynamicCache | StaticCache:
    """A transformers cache holding the given per-layer (B, H, T, D) keys and values (timing only).

    The static cache's buffers have ``capacity`` positions; its attention reads all of them, masked.
    """
    if not static:
        return DynamicCache(ddp_cache_data=layers)
    cache = StaticCache(config=reference.config, max_cache_len=capacity)
    for layer, (keys, values) in zip(cache.layers, layers, strict=True):
        layer.lazy_initialization(keys, values)
        layer.keys[:, :, : keys.shape[-2]] = keys
        layer.values[:, :, : values.shape[-2]] = values
        layer.cumulative_length.fill_(keys.shape[-2])
    return cache


def rewind(cache: DynamicCache | StaticCache, length: int) -> None:
    """Forget every position from ``length`` on, so the next step runs at the same context again."""
    if isinstance(cache, StaticCache):
        for layer in cache.layers:
            layer.cumulative_length.fill_(length)
    else:
        extra = cache.get_seq_length() - length
        if extra:
            cache.crop(-extra)
