"""Tensors kept from one forward to the next: the `TensorMemo` class and the one table of memo budgets.

A memo keeps tensors that depend on Python values only (positions, lengths, a family's options, dtype and device),
never on tensor values, so that eager forwards reuse them instead of building them again (a host-to-device copy or a
few kernels each time). Every memo is made from `MEMO_BUDGETS`, the one place to read or change what a memo may hold:
the process-wide ones once, here (`memo_for`); the per-layer ones by their layers (`TensorMemo(name)`), which drop
them with their layer or when they switch between training and inference. `clear_memos` empties the process-wide
ones (tests, benchmarks). A traced graph cannot keep tensors from one call to the next: while `is_compiling()`
(compile or export), memos are skipped and what they hold is built in the graph instead.
"""

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoBudget:
    """A memo's byte budget (least recently used tensors are dropped beyond it) and what it holds."""

    max_bytes: int
    holds: str
    per_layer: bool = False  # one memo per layer (dropped with it), else one for the process


MEMO_BUDGETS: dict[str, MemoBudget] = {
    "constants": MemoBudget(2**20, "`python_constant`: Python values as tensors (head-to-set indices, kernel taps)"),
    "attention_biases": MemoBudget(
        16 * 2**20, "`kept_attention_bias`: the causal mask as an additive bias, where there is no attention mask"
    ),
    "gaussian_tables": MemoBudget(64 * 2**20, "hard-coded Gaussian weight tables and convolution kernels"),
    "local_patterns": MemoBudget(64 * 2**20, "the local masks' fused additive patterns, per positions and dtype"),
    "identity_keys": MemoBudget(2**20, "rows of the identity, the keys of RAN's fused attention"),
    "position_weights": MemoBudget(
        16 * 2**20,
        "RAN's and the Random Synthesizer's softmaxed position logits per (query block, key length), for one "
        "version of the layer's logits",
        per_layer=True,
    ),
}


def is_compiling() -> bool:
    """Whether `torch.compile` (or `torch.export`) is tracing the model: memos are skipped, since a traced graph
    cannot keep tensors from one call to the next; what they hold is built in the graph instead."""
    return torch.compiler.is_compiling()


class TensorMemo:
    """Tensors built once per key and kept, least recently used first, within the byte budget of `MEMO_BUDGETS[name]`.

    Keys hold everything a tensor depends on; `get_or_build` adds whether inference mode is on,
    since a tensor made in inference mode cannot be saved for backward outside it.
    """

    def __init__(self, name: str):
        self.name = name
        self.max_bytes = MEMO_BUDGETS[name].max_bytes
        self.tensors: OrderedDict[tuple, torch.Tensor] = OrderedDict()

    def kept(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`get_or_build`, except while compiling (see `is_compiling`): then `build()` runs in the graph."""
        if is_compiling():
            return build()
        return self.get_or_build(key, build)

    def get_or_build(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The tensor for `key`, from `build()` the first time; then drops the least recently used
        tensors (never the one returned) until all fit in `max_bytes`."""
        key = key + (torch.is_inference_mode_enabled(),)
        tensor = self.tensors.get(key)
        if tensor is not None:
            self.tensors.move_to_end(key)
            return tensor
        tensor = build()
        self.tensors[key] = tensor
        total = self.held_bytes()
        while total > self.max_bytes and len(self.tensors) > 1:
            _, dropped = self.tensors.popitem(last=False)
            total -= dropped.numel() * dropped.element_size()
        return tensor

    def held_bytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in self.tensors.values())

    def clear(self) -> None:
        self.tensors.clear()


PROCESS_MEMOS: dict[str, TensorMemo] = {
    name: TensorMemo(name) for name, budget in MEMO_BUDGETS.items() if not budget.per_layer
}


def memo_for(name: str) -> TensorMemo:
    """The process-wide memo `name` of `MEMO_BUDGETS`."""
    return PROCESS_MEMOS[name]


def clear_memos() -> None:
    """Empty every process-wide memo (a layer's own memos go with the layer, or with `model.train()`/`.eval()`)."""
    for memo in PROCESS_MEMOS.values():
        memo.clear()
