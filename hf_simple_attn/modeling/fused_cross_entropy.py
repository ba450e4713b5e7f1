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
    nothing is scored. Without scored tokens the sum is 0 and the gradients are zero. Ignored tokens are skipped by
    the loss, not removed from the batch: their number depends on the labels' values, which would make the forward
    wait for the device.
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
    to hidden_states, weight and bias where `needs_gradients` says so (None elsewhere), one chunk at a time: each
    chunk's logits, loss (torch's `cross_entropy`, transformers' `LabelSmoother` formula) and their backward are
    computed together, then the chunk's logits are dropped.
    """
    device_type = hidden_states.device.type
    autocast = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type) if autocast else hidden_states.dtype
    accumulate_dtype = torch.promote_types(dtype, torch.float32)
    needs_hidden, needs_weight, needs_bias = needs_gradients
    # Leaves of this function's own small graphs, one per chunk.
    weight = weight.detach().requires_grad_(needs_weight)
    bias = None if bias is None else bias.detach().requires_grad_(needs_bias)
    loss_sum = grad_weight = grad_bias = None
    # Several chunks write their rows of one gradient (a list joined at the end would hold it twice at the peak).
    several_chunks = labels.shape[0] > chunk_size
    grad_hidden = torch.empty_like(hidden_states) if needs_hidden and several_chunks else None
    with torch.autocast(device_type, enabled=False), torch.enable_grad():
        for start in range(0, labels.shape[0], chunk_size):
            hidden_chunk = hidden_states[start : start + chunk_size].detach().requires_grad_(needs_hidden)
            wanted = [tensor for tensor, needed in zip((hidden_chunk, weight, bias), needs_gradients) if needed]
            if bias is None:
                logits = hidden_chunk.to(dtype) @ weight.to(dtype).T
            else:
                logits = torch.addmm(bias.to(dtype), hidden_chunk.to(dtype), weight.to(dtype).T)
            # (chunk, vocab) in float32 (as autocast runs cross_entropy): the one vocabulary-sized tensor of the chunk
            chunk_loss = torch.nn.functional.cross_entropy(
                logits.to(accumulate_dtype),
                labels[start : start + chunk_size],
                label_smoothing=label_smoothing,
                reduction="sum",
            )
            chunk_gradients = list(torch.autograd.grad(chunk_loss, wanted)) if wanted else []
            chunk_loss = chunk_loss.detach()
            loss_sum = chunk_loss if loss_sum is None else loss_sum + chunk_loss
            if needs_hidden and several_chunks:
                grad_hidden[start : start + chunk_size] = chunk_gradients.pop(0)
            elif needs_hidden:
                grad_hidden = chunk_gradients.pop(0)
            if needs_weight:
                gradient = chunk_gradients.pop(0)
                grad_weight = gradient if grad_weight is None else grad_weight.add_(gradient)
            if needs_bias:
                gradient = chunk_gradients.pop(0)
                grad_bias = gradient if grad_bias is None else grad_bias.add_(gradient)
    if loss_sum is None:  # no tokens at all
        loss_sum = hidden_states.new_zeros((), dtype=accumulate_dtype)
    return loss_sum, grad_hidden, grad_weight, grad_bias


__all__ = ["chunked_cross_entropy"]
