"""Tensor operations the attention families share: masks, scores, fixed weight tables, dropout.

A family module imports these, `attention_heads.py` and `memo.py`, never another family's module nor the registry, so
that each family can be read (and replaced) on its own.

No family branches on tensor values: positions and lengths are Python ints (`AttentionContext`), so that eager
forwards never wait for the device and `torch.compile(..., fullgraph=True)` traces every preset. While compiling
(or exporting), families skip their memos (`memo.py`); while `is_exporting()`, they also take the paths an exported
decoder step needs (see `hf_simple_attn.deploy.export`).
"""

import torch
from torch import nn

from .attention_heads import AttentionContext
from .memo import memo_for


def scaled_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """QKᵀ/√d: query (batch, heads, q_len, d), key (batch, heads, k_len, d) -> (batch, heads, q_len, k_len)."""
    return torch.matmul(query, key.transpose(-1, -2)) * query.shape[-1] ** -0.5


def dot_product_scores(query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor:
    """Masked scaled scores QKᵀ/√d: (batch, heads, q_len, k_len), the context's padding and causal mask added."""
    scores = scaled_scores(query, key)
    return scores + context.attention_bias(key.shape[-2], scores.dtype)


def kept_attention_bias(context: AttentionContext, key_length: int, dtype: torch.dtype) -> torch.Tensor:
    """`context.attention_bias` (batch or 1, 1, q_len, k_len), kept across forwards when it depends on positions only
    (no attention mask: the causal mask, or none), as `python_constant` keeps a constant; made in the graph while
    compiling, and per forward with padding or positions held on the device (a static cache)."""
    if context.key_padding_mask is not None or context.query_start is None:
        return context.attention_bias(key_length, dtype)
    key = (context.query_start, context.query_length, key_length, context.is_causal, dtype, str(context.device))
    return memo_for("attention_biases").kept(key, lambda: context.attention_bias(key_length, dtype))


def is_exporting() -> bool:
    """Whether `torch.export` is tracing the model (see the module docstring)."""
    return torch.compiler.is_exporting()


def python_constant(values: list, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A tensor of Python values (a family's fixed head-to-set index, its kernel taps) on `device`, made once and
    kept: made in each forward, it would be a host-to-device copy that makes a GPU's host wait for the device.
    Made in the graph while compiling (a constant there)."""
    key = (repr(values), str(device), dtype)
    return memo_for("constants").kept(key, lambda: torch.tensor(values, device=device, dtype=dtype))


def zero_padding(value: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Values (batch, heads, k_len, d) with padded keys zeroed: the same as cutting their weights,
    without a per-batch weight tensor. key_padding_mask: (batch, k_len) bool, True at real tokens."""
    if key_padding_mask is None:
        return value
    return value * key_padding_mask[:, None, :, None].to(value.dtype)


def cut_padding(weights: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Weights (batch, heads, q_len, k_len) with those of padded keys cut (not renormalised): `zero_padding`'s
    result for a per-example table, at the table's size instead of the values'. key_padding_mask: (batch, k_len)
    bool, True at real tokens."""
    if key_padding_mask is None:
        return weights
    return weights * key_padding_mask[:, None, None, :].to(weights.dtype)


def apply_table(table: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """table (heads, q_len, k_len) × value (batch, heads, k_len, d) -> (batch, heads, q_len, d).

    One product per head over batch·d columns, so the table is never copied per example (a
    broadcasting `matmul` expands it to (batch·heads, q_len, k_len) and keeps that copy for backward).
    A single query (a decoding step) is a weighted sum over the keys instead: two operators, and an output
    whose heads are contiguous, where the product needs a copy of the values before it and one of its output after.
    """
    if table.shape[1] == 1:
        return (value * table[None, :, 0, :, None]).sum(dim=2, keepdim=True)
    batch_size, num_heads, key_length, head_dim = value.shape
    columns = value.permute(1, 2, 0, 3).reshape(num_heads, key_length, batch_size * head_dim)
    return torch.bmm(table, columns).view(num_heads, -1, batch_size, head_dim).permute(2, 0, 1, 3)


def attention_dropout(weights: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout on attention weights (batch, heads, q_len, k_len) while training; the weights as they are otherwise."""
    return nn.functional.dropout(weights, p=p, training=training)
