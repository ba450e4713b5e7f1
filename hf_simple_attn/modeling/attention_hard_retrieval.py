"""Hard retrieval attention (Xu, Liu, van Genabith and Xiong 2021): each head attends to exactly one key and copies its value.

Training: scores S = QKᵀ/√d (masked), P = softmax(S), one key index per query and head sampled
from P (multinomial), output V[index] (Eq. 4-6). The sampling is treated as noise on P
(P_hard = P + Noise), so the backward pass is straight-through:
    dP = dOut·Vᵀ                               (Eq. 8-9: the gradient of P_hard passed to P)
    dV[j] = Σ over queries that picked j of dOut  (Eq. 10: only the retrieved rows)
and dP continues through the softmax to S, Q and K. That is the backward of the soft output P·V with V held fixed,
so the output's gradient is handed to such a soft output (`StraightThroughRetrieval`) and to the retrieved rows.

Inference: index = argmax(S) over the allowed keys, no softmax (Eq. 11); deterministic.

Masked keys (padding, causal) have probability exactly 0 and are never picked; a query without any
allowed key gets a zero output. Attention dropout does not apply (a one-hot row has nothing to drop). With
`output_attentions` the returned weights are the one-hot rows actually used.

The fast paths (the default; the reference path runs with `output_attentions`, or with `fast_path` off) compute the
scores as one batched product with the mask as its added input (`baddbmm`; a causal mask alone is memoised, since it
depends on positions only) and gather the retrieved values in the layout the projections have, so that neither the
sublayer's merge of the heads nor the values' gradient needs a copy:
- training: the index is drawn from the scaled scores (no autograd) by the Gumbel-max trick, the same draws as
  `torch.multinomial` makes from P without forming P and without its validity checks (`sample`); the soft output
  P·V, V held fixed, is PyTorch's fused SDPA kernel (the same masked scaled softmax), whose backward gives dQ and dK
  in the projections' layout without a P saved for it.
- inference: argmax of the masked QKᵀ (the argmax of QKᵀ/√d is that of QKᵀ), no mask at all when every key is
  visible (no attention mask; encoder and cross attention, or a cached decoding step); no softmax, no weighted sum.
  Cached cross attention holds its values zeroed at the padded keys (once per generate: `takes_zeroed_padding`), so
  a query without any real key retrieves a zero row and a step needs no zeroing of its own.
The parameters are exactly those of `dot`, so a model trained with one can decode with the other
(the paper's Table 4) by changing the kind in its layout.
"""

import torch
from torch import nn

from .attention_heads import AttentionContext, AttentionHeads, GroupSpec, additive_mask
from .attention_ops import dot_product_scores, kept_attention_bias, python_constant


def retrieve(value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """value (batch, heads, k_len, d), index (batch, heads, q_len) -> value[..., index, :] (batch, heads, q_len, d),
    laid out as (batch, q_len, heads, d): the sublayer merges its heads with a view, not a copy."""
    batch_size, num_heads, query_length = index.shape
    positions_first = index.transpose(1, 2)[..., None].expand(batch_size, query_length, num_heads, value.shape[-1])
    return torch.gather(value.transpose(1, 2), 1, positions_first).transpose(1, 2)


def retrieved_rows_gradient(grad_output: torch.Tensor, index: torch.Tensor, key_length: int) -> torch.Tensor:
    """The gradient of `retrieve` for its values (Eq. 10): each query's output gradient added to the one value row it
    read, (batch, heads, k_len, d), laid out as (batch, k_len, heads, d) like the projected values."""
    batch_size, num_heads, query_length, head_dim = grad_output.shape
    positions_first = index.transpose(1, 2)[..., None].expand(batch_size, query_length, num_heads, head_dim)
    grad_value = grad_output.new_zeros(batch_size, key_length, num_heads, head_dim)
    return grad_value.scatter_add_(1, positions_first, grad_output.transpose(1, 2)).transpose(1, 2)


class StraightThroughRetrieval(torch.autograd.Function):
    """Forward: V[index]. Backward: the output's gradient goes to `soft_output` (P·V with V held fixed, whose own
    backward is dP = dOut·Vᵀ: the gradient of P_hard passed to P) and to the retrieved value rows."""

    @staticmethod
    def forward(ctx, soft_output, value, index):
        ctx.save_for_backward(index)
        ctx.key_length = value.shape[-2]
        return retrieve(value, index)

    @staticmethod
    def backward(ctx, grad_output):
        (index,) = ctx.saved_tensors
        grad_soft_output = grad_output if ctx.needs_input_grad[0] else None
        grad_value = None
        if ctx.needs_input_grad[1]:
            grad_value = retrieved_rows_gradient(grad_output, index, ctx.key_length)
        return grad_soft_output, grad_value, None


def score_bias(context: AttentionContext, key_length: int, num_heads: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The context's mask as an additive bias of the scores (0 where allowed, the dtype's minimum elsewhere), or None
    when every query sees every key. A causal mask alone: (1, 1, q_len, k_len), memoised (it depends on positions
    only). With padding: (batch, heads, q_len or 1, k_len), made once per forward; flattened to batch · heads it is the
    input of the batched product, which cannot broadcast a per-example bias over the heads."""
    if context.sees_every_key():
        return None
    if context.key_padding_mask is None:
        return kept_attention_bias(context, key_length, dtype)

    def build():
        allowed = context.allowed_keys(key_length)  # (batch, 1, q_len or 1, k_len)
        return additive_mask(allowed.expand(allowed.shape[0], num_heads, *allowed.shape[2:]), dtype)

    return context.shared(("hard_retrieval_bias", key_length, num_heads, dtype), build)


def query_key_products(
    query_rows: torch.Tensor, key_rows: torch.Tensor, bias: torch.Tensor | None, scale: float = 1.0
) -> torch.Tensor:
    """bias + scale · QKᵀ in one batched product: query_rows (batch · heads, q_len, d), key_rows
    (batch · heads, k_len, d) -> (batch · heads, q_len, k_len)."""
    key_columns = key_rows.transpose(1, 2)
    if bias is not None:
        return torch.baddbmm(bias.flatten(0, 1), query_rows, key_columns, alpha=scale)
    if scale == 1.0:
        return torch.bmm(query_rows, key_columns)
    # beta 0: the input (a zero) is ignored and the scaling is part of the product.
    ignored = python_constant([0.0], query_rows.device, query_rows.dtype)
    return torch.baddbmm(ignored, query_rows, key_columns, beta=0.0, alpha=scale)


def sample(scores: torch.Tensor) -> torch.Tensor:
    """One index per row drawn from P = softmax(scores) (..., k_len) -> (...), without forming P: the arg-max of
    scores - log E with E ~ Exp(1) (the Gumbel-max trick) is the arg-max of P / E, by which `torch.multinomial` draws
    one sample, so the draws are multinomial's from the same generator state (E in float32, as it draws for P in
    float32). One operator fewer than P / E (no cast of the scores and no softmax, one log), and none of multinomial's
    checks that every row is a distribution (a softmax's always is), which run about ten more kernels inside it.
    Masked keys (scores at the dtype's minimum or -inf) are never drawn while an allowed key is left."""
    noise = torch.empty_like(scores, dtype=torch.float32).exponential_()
    return (scores - noise.log()).argmax(dim=-1)


class HardRetrievalHeads(AttentionHeads):
    """One-hot attention: sampled from softmax(QKᵀ/√d) in training, argmax of QKᵀ at inference."""

    kind = "hard_retrieval"
    summary = "one key per query and head: sampled in training, arg-max at inference"
    paper = "Xu, Liu, van Genabith and Xiong 2021, Learning Hard Retrieval Decoder Attention for Transformers"
    citation = """@inproceedings{xu-etal-2021-learning-hard-retrieval,
  title = {Learning Hard Retrieval Decoder Attention for Transformers},
  author = {Xu, Hongfei and Liu, Qiuhui and van Genabith, Josef and Xiong, Deyi},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2021},
  year = {2021}
}"""
    limitations = "hard-retrieval heads attend to exactly one token each"

    uses_query_key = True
    takes_zeroed_padding = True  # a padded key is never retrieved while a real one is allowed

    @classmethod
    def independent_queries(cls, spec: GroupSpec) -> bool:
        return True  # each query's own arg-max (or draw) over its scores

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, heads, q_len, d); key, value: (batch, heads, k_len, d)
        if self.fast_path and not output_attentions:
            if self.training:
                output = self.sample_and_retrieve(query, key, value, context)
            else:
                output = self.retrieve_best(query, key, value, context)
            if context.padded_values_zeroed:
                # A query without any real key retrieves a padded key, whose value the cache holds zeroed.
                return output, None
            return self.zero_without_key(output, context, key.shape[-2]), None
        scores = dot_product_scores(query, key, context)  # (batch, heads, q_len, k_len)
        if self.training:
            probabilities = torch.softmax(scores, dim=-1)
            sampled = torch.multinomial(probabilities.detach().reshape(-1, scores.shape[-1]).float(), 1)
            index = sampled.view(scores.shape[:-1])  # (batch, heads, q_len)
            soft_output = torch.matmul(probabilities, value.detach())  # its backward: dP = dOut·Vᵀ (Eq. 9)
            output = StraightThroughRetrieval.apply(soft_output, value, index)
        else:
            index = scores.argmax(dim=-1)
            output = retrieve(value, index)
        output = self.zero_without_key(output, context, key.shape[-2])
        if not output_attentions:
            return output, None
        one_hot = torch.zeros_like(scores).scatter_(-1, index[..., None], 1.0)
        has_key = self.has_key(context, key.shape[-2])
        return output, one_hot if has_key is None else one_hot * has_key

    @staticmethod
    def has_key(context: AttentionContext, key_length: int) -> torch.Tensor | None:
        """(batch, 1, q_len, 1) bool: which queries have any allowed key; None when all do (only padding can leave
        a query without one: a causal query always sees itself)."""
        if context.key_padding_mask is None:
            return None
        return context.shared(("has_key", key_length), lambda: context.allowed_keys(key_length).any(-1)[..., None])

    def zero_without_key(self, output: torch.Tensor, context: AttentionContext, key_length: int) -> torch.Tensor:
        """The output (batch, heads, q_len, d) with zeros for the queries that have no allowed key."""
        has_key = self.has_key(context, key_length)
        return output if has_key is None else output * has_key

    def sample_and_retrieve(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, context: AttentionContext
    ) -> torch.Tensor:
        """Training: the value of a key sampled from P, (batch, heads, q_len, d), with the straight-through backward.
        P serves the sampling only; the soft output P·V, V held fixed, carries dOut to Q and K (SDPA's backward)."""
        query_length, key_length = query.shape[-2], key.shape[-2]
        bias = score_bias(context, key_length, self.num_heads, query.dtype)
        with torch.no_grad():
            # One copy of both in heads-major rows: (batch · heads, q_len + k_len, d).
            rows = torch.cat([query, key], dim=2).flatten(0, 1)
            scale = query.shape[-1] ** -0.5
            scores = query_key_products(rows[:, :query_length], rows[:, query_length:], bias, scale)
            # With a half-precision compute dtype, scores - log E is taken in float32, as the reference's P.
            index = sample(scores).view(query.shape[:-1])  # (batch, heads, q_len)
        # As `dot`: SDPA's own causal kernel when the queries are every position of an unpadded sequence.
        is_causal = context.uses_causal_kernel(key_length)
        soft_output = nn.functional.scaled_dot_product_attention(
            query, key, value.detach(), attn_mask=None if is_causal else bias, is_causal=is_causal
        )
        return StraightThroughRetrieval.apply(soft_output, value, index)

    def retrieve_best(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, context: AttentionContext
    ) -> torch.Tensor:
        """Inference: the value of the highest-scoring allowed key, (batch, heads, q_len, d). The arg-max of QKᵀ/√d
        is that of QKᵀ: no scaling."""
        bias = score_bias(context, key.shape[-2], self.num_heads, query.dtype)
        scores = query_key_products(query.flatten(0, 1), key.flatten(0, 1), bias)  # (batch · heads, q_len, k_len)
        return retrieve(value, scores.argmax(dim=-1).view(query.shape[:-1]))
