"""Scaled dot-product attention: the Transformer baseline, numerically the same as Marian's and BERT's."""

import torch
from torch import nn

from .attention_registry import AttentionContext, AttentionHeads, register_attention


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attending is allowed, the dtype's minimum elsewhere (as transformers does: no NaN on empty rows)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def dot_product_scores(query: torch.Tensor, key: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Masked scaled scores QKᵀ/√d: (batch, heads, q_len, k_len)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * query.shape[-1] ** -0.5
    return scores + additive_mask(allowed, scores.dtype)


@register_attention("dot")
class DotProductHeads(AttentionHeads):
    """softmax(QKᵀ/√d)·V per head; uses PyTorch's SDPA kernel unless the weights are requested."""

    uses_query_key = True

    def forward(self, query, key, value, context: AttentionContext, output_attentions=False):
        dropout = self.config.attention_dropout if self.training else 0.0
        if not output_attentions:
            # Without padding, a non-causal query, or the single (last) query of a causal decoding
            # step, sees every key: SDPA then runs without a mask.
            sees_every_key = context.key_padding_mask is None and (not context.is_causal or query.shape[-2] == 1)
            mask = None if sees_every_key else additive_mask(context.allowed_keys(key.shape[-2]), query.dtype)
            output = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
            return output, None
        weights = torch.softmax(dot_product_scores(query, key, context.allowed_keys(key.shape[-2])), dim=-1)
        weights = nn.functional.dropout(weights, p=dropout, training=self.training)
        return torch.matmul(weights, value), weights
