"""Scaled dot-product attention: the Transformer baseline, numerically the same as Marian's and BERT's."""

import torch
from torch import nn

from .attention_heads import AttentionContext, AttentionHeads, GroupSpec
from .attention_ops import attention_dropout, dot_product_scores


class DotProductHeads(AttentionHeads):
    """softmax(QKᵀ/√d)·V per head; uses PyTorch's SDPA kernel unless the weights are requested or the model's
    `attn_implementation` is "eager"."""

    kind = "dot"
    summary = "standard scaled dot-product attention (the baseline), numerically Marian's and BERT's"
    paper = "Vaswani et al. 2017, Attention Is All You Need"

    uses_query_key = True

    @classmethod
    def independent_queries(cls, spec: GroupSpec) -> bool:
        return True  # softmax(qKᵀ/√d) of each query row alone

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, heads, q_len, d); key, value: (batch, heads, k_len, d)
        if not output_attentions and self.config._attn_implementation != "eager":
            # SDPA runs without a mask tensor when every query sees every key, or as its own causal kernel when the
            # queries are every position of an unpadded sequence (no cache).
            mask, is_causal = None, False
            if context.uses_causal_kernel(key.shape[-2]):
                is_causal = True
            elif not context.sees_every_key():
                mask = context.attention_bias(key.shape[-2], query.dtype)
            dropout = self.config.attention_dropout if self.training else 0.0
            output = nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, dropout_p=dropout, is_causal=is_causal
            )
            return output, None
        weights = torch.softmax(dot_product_scores(query, key, context), dim=-1)
        weights = attention_dropout(weights, self.config.attention_dropout, self.training)
        return torch.matmul(weights, value), weights
