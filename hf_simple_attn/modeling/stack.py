"""Pieces every stack of layers shares, whichever model holds it (Marian-style or BERT-style)."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from .attention_heads import AttentionContext, LayerSpec
from .attention_registry import get_attention_family


def check_inputs(
    inputs: torch.Tensor, input_name: str, attention_mask: torch.Tensor | None, mask_name: str, past_length: int = 0
) -> None:
    """A `ValueError` naming the argument for an empty batch or sequence, and for an attention mask that is not
    (batch, past_length + length): a wrong mask would otherwise be broadcast or cut silently.

    inputs: token ids (batch, length) or embeddings (batch, length, hidden).
    """
    if inputs.dim() < 2 or inputs.shape[0] == 0 or inputs.shape[1] == 0:
        raise ValueError(
            f"{input_name} has shape {tuple(inputs.shape)}: expected at least one sequence of at least one "
            "position, as (batch, length) ids or (batch, length, hidden) embeddings"
        )
    expected = (inputs.shape[0], past_length + inputs.shape[1])
    if attention_mask is not None and tuple(attention_mask.shape) != expected:
        cached = f" plus {past_length} cached positions" if past_length else ""
        raise ValueError(
            f"{mask_name} has shape {tuple(attention_mask.shape)} but {input_name} has shape {tuple(inputs.shape)}"
            f"{cached}: expected {mask_name} of shape {expected}, 1 at real tokens and 0 at padding"
        )


def padding_mask_or_none(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(batch, len) bool mask of real tokens, or None without an attention mask. A mask is kept even where it holds
    no padding: asking the device whether it does would make every forward wait for it (and break a compiled
    graph)."""
    return None if attention_mask is None else attention_mask.bool()


def build_stack_state(config, sites: tuple[str, ...]) -> nn.ModuleDict:
    """Modules a family shares across the layers of one stack (e.g. RAN's initial matrices)."""
    state = nn.ModuleDict()
    for site in sites:
        layer_specs = config.attention_layout[site]
        kinds = {g["kind"] for spec in layer_specs if spec is not None for g in spec["groups"]}
        for kind in sorted(kinds):
            family = get_attention_family(kind)
            module = family.build_stack_state(config, site, layer_specs)
            if module is not None:
                state[family.stack_state_key(site)] = module
    return state


def position_limits(layer_specs: list[LayerSpec | None]) -> list[tuple[int, str, int]]:
    """(layer, kind, max_positions) of every head group whose learned position tables cover only max_positions."""
    return [
        (layer_idx, group["kind"], group["max_positions"])
        for layer_idx, spec in enumerate(layer_specs)
        if spec is not None
        for group in spec["groups"]
        if "max_positions" in group
    ]


def prefixed(tied: dict[str, str], prefix: str) -> dict[str, str]:
    return {f"{prefix}{target}": f"{prefix}{source}" for target, source in tied.items()}


@contextmanager
def stack_forward(layers: nn.ModuleList, stack_state: nn.ModuleDict) -> Iterator[None]:
    """One forward of a stack's layers, bracketed by `begin_forward` and `end_forward` of its shared modules
    (`AttentionStackState`), told whether gradient checkpointing reruns any of the layers in backward."""
    # `GradientCheckpointingLayer` checkpoints a layer when both are set.
    checkpointing = any(layer.gradient_checkpointing and layer.training for layer in layers)
    for state in stack_state.values():
        state.begin_forward(checkpointing)
    try:
        yield
    finally:
        for state in stack_state.values():
            state.end_forward()


def run_encoder_layers(
    layers: nn.ModuleList,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    stack_state: nn.ModuleDict,
    output_attentions: bool,
    output_hidden_states: bool,
) -> BaseModelOutput:
    """Run bidirectional layers over embedded inputs (batch, len, hidden); attention_mask is 1 at real tokens.

    Each layer is called as `layer(hidden_states, context, output_attentions) -> (hidden_states, weights)`.
    """
    context = AttentionContext(
        key_padding_mask=padding_mask_or_none(attention_mask),
        query_start=0,
        query_length=hidden_states.shape[1],
        is_causal=False,
        device=hidden_states.device,
        stack_state=stack_state,
    )
    all_hidden_states = (hidden_states,) if output_hidden_states else None
    all_attentions = () if output_attentions else None
    with stack_forward(layers, stack_state):
        for layer in layers:
            hidden_states, weights = layer(hidden_states, context, output_attentions)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (weights,)
    return BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions)
