"""How `torch.onnx.export` writes the operators whose default translation ONNX Runtime runs slowly.

`scaled_dot_product_attention`: the default translation (onnxscript's torch_lib) flattens the keys to three
dimensions, transposes them and scales them by sqrt(scale) before the product, a copy of every key per call that
ONNX Runtime cannot fold into its matrix product; in a decoder step over a beam-4 batch of 64 at opus-mt size those
transposes took half of the step. Here the keys are transposed in four dimensions, which ONNX Runtime folds into the
product (`FusedMatMul` with a transposed operand), and the scale goes to the query alone (one row per step). The
maths is SDPA's: softmax(q k^T * scale + mask) v, a boolean mask allowing where True, and a query that may see no
key gets zeros (PyTorch's safe softmax).
"""

import math

import torch


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """ONNX for `aten.scaled_dot_product_attention` on 4D (batch, heads, length, head_dim) tensors in eval mode."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    if dropout_p != 0.0 or is_causal or enable_gqa:
        raise NotImplementedError(
            "the ONNX translation of scaled_dot_product_attention takes an explicit mask, no dropout and no grouped "
            f"heads (got dropout_p={dropout_p}, is_causal={is_causal}, enable_gqa={enable_gqa})"
        )
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = op.MatMul(op.Mul(query, op.CastLike(scale, query)), op.Transpose(key, perm=[0, 1, 3, 2]))
    boolean_mask = attn_mask is not None and attn_mask.dtype == ir.DataType.BOOL
    if boolean_mask:
        attn_mask = op.Where(attn_mask, op.CastLike(0.0, query), op.CastLike(-math.inf, query))
    if attn_mask is not None:
        scores = op.Add(scores, attn_mask)
    weights = op.Softmax(scores, axis=-1)
    if boolean_mask:  # a row of -inf only: NaN weights, zeros in PyTorch
        weights = op.Where(op.IsNaN(weights), op.CastLike(0.0, query), weights)
    return op.MatMul(weights, value)


TRANSLATIONS = {torch.ops.aten.scaled_dot_product_attention.default: scaled_dot_product_attention}
