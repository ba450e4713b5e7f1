"""Hard retrieval attention (Xu, Liu, van Genabith and Xiong 2021): each head attends to exactly one key and copies its value.

Training: scores S = QKᵀ/√d (masked), P = softmax(S), one key index per query and head sampled
from P (multinomial), output V[index] (Eq. 4-6). The sampling is treated as noise on P
(P_hard = P + Noise), so the backward pass is straight-through:
    dP = dOut·Vᵀ                               (Eq. 8-9: the gradient of P_hard passed to P)
    dV[j] = Σ over queries that picked j of dOut  (Eq. 10: only the retrieved rows)
and dP continues through the softmax to S, Q and K.

Inference: index = argmax(S) over the allowed keys, no softmax (Eq. 11); deterministic.

Masked keys (padding, causal) have probability exactly 0 and are never picked; a query without any
allowed key gets a zero output. At inference the fast path (the default) skips the mask entirely
when every key is visible (no attention mask; encoder and cross attention, or a cached decoding step)
and otherwise adds the mask shared by the layers: argmax, gather, no softmax and no weighted sum. Attention dropout
does not apply (a one-hot row has nothing to drop). With `output_attentions` the returned weights are the one-hot
rows actually used.
The parameters are exactly those of `dot`, so a model trained with one can decode with the other
(the paper's Table 4) by changing the kind in its layout.
"""

import torch

from .attention_ops import dot_product_scores
from .attention_registry import AttentionContext, AttentionHeads, register_attention


def retrieve(value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """value (batch, heads, k_len, d), index (batch, heads, q_len) -> value[..., index, :] (batch, heads, q_len, d)."""
    return torch.gather(value, 2, index[..., None].expand(*index.shape, value.shape[-1]))


class StraightThroughRetrieval(torch.autograd.Function):
    """Forward: V[index]. Backward: as if the output were P_hard·V with the gradient of P_hard given to P."""

    @staticmethod
    def forward(ctx, probabilities, value, index):
        ctx.save_for_backward(value, index)
        return retrieve(value, index)

    @staticmethod
    def backward(ctx, grad_output):
        value, index = ctx.saved_tensors
        grad_probabilities = grad_value = None
        if ctx.needs_input_grad[0]:
            grad_probabilities = torch.matmul(grad_output, value.transpose(-1, -2))  # (batch, heads, q_len, k_len)
        if ctx.needs_input_grad[1]:
            # Each query's output gradient lands on the one value row it retrieved.
            grad_value = torch.zeros_like(value).scatter_add_(2, index[..., None].expand_as(grad_output), grad_output)
        return grad_probabilities, grad_value, None


@register_attention("hard_retrieval")
class HardRetrievalHeads(AttentionHeads):
    """One-hot attention: sampled from softmax(QKᵀ/√d) in training, argmax of QKᵀ at inference."""

    uses_query_key = True

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, heads, q_len, d); key, value: (batch, heads, k_len, d)
        if self.fast_path and not (self.training or output_attentions):
            return self.retrieve_best(query, key, value, context), None
        scores = dot_product_scores(query, key, context)  # (batch, heads, q_len, k_len)
        if self.training:
            probabilities = torch.softmax(scores, dim=-1)
            sampled = torch.multinomial(probabilities.detach().reshape(-1, scores.shape[-1]).float(), 1)
            index = sampled.view(scores.shape[:-1])  # (batch, heads, q_len)
            output = StraightThroughRetrieval.apply(probabilities, value, index)
        else:
            index = scores.argmax(dim=-1)
            output = retrieve(value, index)
        has_key = self.has_key(context, key.shape[-2])
        if has_key is not None:
            output = output * has_key
        if not output_attentions:
            return output, None
        one_hot = torch.zeros_like(scores).scatter_(-1, index[..., None], 1.0)
        return output, one_hot if has_key is None else one_hot * has_key

    @staticmethod
    def has_key(context: AttentionContext, key_length: int) -> torch.Tensor | None:
        """(batch, 1, q_len, 1) bool: which queries have any allowed key; None when all do (only padding can leave
        a query without one: a causal query always sees itself)."""
        if context.key_padding_mask is None:
            return None
        return context.shared(("has_key", key_length), lambda: context.allowed_keys(key_length).any(-1)[..., None])

    def retrieve_best(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, context: AttentionContext
    ) -> torch.Tensor:
        """Inference: the value of the highest-scoring allowed key, (batch, heads, q_len, d). The arg-max of QKᵀ/√d
        is that of QKᵀ: no scaling."""
        scores = torch.matmul(query, key.transpose(-1, -2))  # (batch, heads, q_len, k_len)
        if context.sees_every_key():
            return retrieve(value, scores.argmax(dim=-1))
        index = (scores + context.attention_bias(key.shape[-2], scores.dtype)).argmax(dim=-1)
        has_key = self.has_key(context, key.shape[-2])
        output = retrieve(value, index)
        return output if has_key is None else output * has_key
