"""Fused linear cross-entropy: the loss of an output projection's logits, computed chunk by chunk together with its
gradients, so that neither forward nor backward holds the (tokens, vocabulary) logits of the whole batch.

The logits of a translation model's output layer are its largest activation (58k vocabulary entries per target
token at opus-mt size). Forward goes over the scored tokens `chunk_size` at a time: it computes a chunk's logits,
its loss, and at once the gradients of the loss sum with respect to the hidden states, the weight and the bias, then
drops the logits. Backward only scales these gradients by the incoming one, so nothing is computed twice (unlike
activation checkpointing, which recomputes each chunk's logits). The price is memory of the size of the weight:
its gradient is held from forward to backward. As in Liger's fused linear cross-entropy kernel.

Precision: the matmuls run in the input dtype, or in the autocast dtype when autocast is on, as `nn.Linear` would;
the softmax, the loss and the weight and bias gradients are computed and summed in float32 (or the input's wider
dtype), as autocast does for `cross_entropy`.
"""

import torch


def chunked_cross_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    chunk_size: int,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Summed cross-entropy of the logits `hidden_states @ weight.T + bias` against `labels`, that is
    `nn.functional.cross_entropy(logits, labels, label_smoothing=label_smoothing, reduction="sum")` (-100 ignored),
    computed `chunk_size` target tokens at a time (`FusedLinearCrossEntropy`).

    hidden_states: (..., d_model); weight: (vocab, d_model); bias: (vocab,) or None; labels: (...), -100 where
    nothing is scored. Without scored tokens the sum is 0 and the gradients are zero. Ignored tokens are masked out,
    not removed from the batch: how many there are depends on the labels' values, which would make the forward wait
    for the device (and break a compiled graph).
    """
    hidden_states, labels = hidden_states.flatten(0, -2), labels.flatten()  # (tokens, d_model), (tokens,)
    inputs = (hidden_states, weight, bias)
    if torch.is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in inputs):
        return FusedLinearCrossEntropy.apply(*inputs, labels, chunk_size, label_smoothing)
    return loss_and_gradients(*inputs, labels, chunk_size, label_smoothing, (False, False, False))[0]


class FusedLinearCrossEntropy(torch.autograd.Function):
    """`chunked_cross_entropy` over hidden_states (tokens, d_model) and labels (tokens,). Forward computes the
    gradients that the inputs need (`loss_and_gradients`) and saves them; backward scales them."""

    @staticmethod
    def forward(ctx, hidden_states, weight, bias, labels, chunk_size, label_smoothing):
        loss_sum, *gradients = loss_and_gradients(
            hidden_states, weight, bias, labels, chunk_size, label_smoothing, tuple(ctx.needs_input_grad[:3])
        )
        ctx.save_for_backward(*gradients)
        return loss_sum

    @staticmethod
    def backward(ctx, grad_output):
        # Without scored tokens the gradients are zero, and a loss averaged over no tokens has an infinite gradient
        # (its mean is NaN, as `CrossEntropyLoss()`'s): the gradients stay zero rather than 0 · inf = NaN.
        grad_output = grad_output.nan_to_num(posinf=0.0, neginf=0.0)
        gradients = [None if gradient is None else gradient * grad_output for gradient in ctx.saved_tensors]
        return *gradients, None, None, None


def loss_and_gradients(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    chunk_size: int,
    label_smoothing: float,
    needs_gradients: tuple[bool, bool, bool],
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The summed loss of hidden_states (tokens, d_model) against labels (tokens,), and its gradients with respect
    to hidden_states, weight and bias where `needs_gradients` says so (None elsewhere), one chunk at a time, in place
    in the chunk's one vocabulary-sized tensor.

    Per token with logits z over V entries, ε = label_smoothing (transformers' `LabelSmoother` formula, torch's
    `cross_entropy`): loss = -(1 - ε)·log_softmax(z)[label] - ε·mean(log_softmax(z)), whose gradient with respect
    to z is softmax(z) - (1 - ε)·onehot(label) - ε/V; zero for an ignored token (label -100).

    Each chunk runs a fixed handful of operators (on a GPU, kernels: where the host sets the pace, their number
    does); what is per token (log-probabilities, gradients of the hidden states) is concatenated once at the end.
    """
    device_type = hidden_states.device.type
    autocast = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type) if autocast else hidden_states.dtype
    accumulate_dtype = torch.promote_types(dtype, torch.float32)
    vocab_size = weight.shape[0]
    needs_hidden, needs_weight, needs_bias = needs_gradients
    scored = (labels != -100)[:, None]  # (tokens, 1)
    labels = labels.clamp(min=0)[:, None]  # an index for every token; ignored ones are masked out below
    grad_weight = torch.zeros_like(weight, dtype=accumulate_dtype) if needs_weight else None
    grad_bias = torch.zeros_like(bias, dtype=accumulate_dtype) if needs_bias else None
    label_log_probs, mean_log_probs, grad_hidden_chunks = [], [], []  # per chunk: (chunk, 1), (chunk, 1), (chunk, d)
    with torch.autocast(device_type, enabled=False):
        compute_weight = weight.to(dtype)
        compute_bias = None if bias is None else bias.to(dtype)
        compute_hidden = hidden_states.to(dtype)
        if any(needs_gradients):  # the -(1 - ε) that each chunk's gradient adds at its labels
            label_shape = (min(chunk_size, labels.shape[0]), 1)
            label_step = hidden_states.new_full(label_shape, label_smoothing - 1.0, dtype=accumulate_dtype)
        for start in range(0, labels.shape[0], chunk_size):
            hidden_chunk = compute_hidden[start : start + chunk_size]  # (chunk, d_model)
            label_chunk, scored_chunk = labels[start : start + chunk_size], scored[start : start + chunk_size]
            if compute_bias is None:
                logits = hidden_chunk @ compute_weight.T
            else:
                logits = torch.addmm(compute_bias, hidden_chunk, compute_weight.T)
            # (chunk, vocab), the one vocabulary-sized tensor of the chunk, reused for the probabilities
            log_probs = torch.log_softmax(logits, dim=-1, dtype=accumulate_dtype)
            label_log_probs.append(log_probs.gather(1, label_chunk))
            if label_smoothing:
                mean_log_probs.append(log_probs.mean(-1, keepdim=True))
            if not any(needs_gradients):
                continue
            grad_logits = log_probs.exp_()  # softmax(z)
            if label_smoothing:
                grad_logits -= label_smoothing / vocab_size
            grad_logits.scatter_add_(1, label_chunk, label_step[: label_chunk.shape[0]])
            grad_logits *= scored_chunk
            if needs_bias:
                grad_bias += grad_logits.sum(0)
            grad_logits = grad_logits.to(dtype)
            if needs_hidden:
                grad_hidden_chunks.append(grad_logits @ compute_weight)
            if needs_weight and dtype == accumulate_dtype:
                grad_weight.addmm_(grad_logits.T, hidden_chunk)
            elif needs_weight:  # half-precision products, summed over the chunks in float32
                grad_weight += grad_logits.T @ hidden_chunk
    if label_log_probs:
        token_losses = -torch.cat(label_log_probs)
        if label_smoothing:
            token_losses = (1 - label_smoothing) * token_losses - label_smoothing * torch.cat(mean_log_probs)
    else:  # no tokens
        token_losses = scored.new_zeros(scored.shape, dtype=accumulate_dtype)
    loss_sum = torch.where(scored, token_losses, 0.0).sum()
    grad_hidden = None
    if needs_hidden:
        grad_hidden = torch.cat(grad_hidden_chunks) if grad_hidden_chunks else torch.zeros_like(hidden_states)
        grad_hidden = grad_hidden.to(hidden_states.dtype)
    if grad_weight is not None:
        grad_weight = grad_weight.to(weight.dtype)
    if grad_bias is not None:
        grad_bias = grad_bias.to(bias.dtype)
    return loss_sum, grad_hidden, grad_weight, grad_bias


__all__ = ["chunked_cross_entropy"]
