"""A family that lives in no file of the package, for tests/test_adding_a_family.py: every allowed key gets the same
weight. As a pytest plugin (`-p throwaway_family`) it registers the family before the tests are collected."""

import torch

from hf_simple_attn.modeling.attention_heads import AttentionContext, AttentionHeads
from hf_simple_attn.modeling.attention_registry import register_attention


class ThrowawayHeads(AttentionHeads):
    """Uniform weights over the keys a query may see."""

    kind = "throwaway"
    paper = "Nobody 2026, A Family for the Tests"
    citation = "@misc{nobody-2026-throwaway,\n  title = {A Family for the Tests},\n  year = {2026}\n}"
    limitations = "throwaway heads weigh every allowed token the same"

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch_size, num_heads, key_length, _ = value.shape
        weights = torch.softmax(context.attention_bias(key_length, value.dtype), dim=-1)
        weights = weights.expand(batch_size, num_heads, context.query_length, key_length)
        return torch.matmul(weights, value), weights if output_attentions else None


def pytest_configure(config):
    register_attention(ThrowawayHeads)
