"""One attention sublayer built from a layer spec: projections, cache, and the head groups."""

import dataclasses

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache

from .attention_heads import AttentionContext, AttentionHeads, LayerSpec
from .attention_ops import zero_padding
from .attention_registry import get_attention_family
from .layout import query_key_slots, query_slots


class HeadGroups(nn.Module):
    """Runs each head group's family on its slice of the heads and joins the results.

    Shared by every model: it sees per-head queries and keys (one slot per query projection the
    families asked for, one per key projection of the groups that score keys) and per-head values,
    so the model decides how to name its projections. The only place that builds `AttentionHeads`.

    query_slots: the heads of the query projection; query_key_slots: those scored against keys, the
    heads of the key projection (fewer where a group reads its queries alone).
    """

    def __init__(self, config, layer_spec: LayerSpec, site: str, layer_idx: int):
        super().__init__()
        self.num_heads = layer_spec["num_heads"]
        self.head_dim = layer_spec["head_dim"]
        self.query_slots = query_slots(layer_spec)
        self.query_key_slots = query_key_slots(layer_spec)
        self.groups = nn.ModuleList()
        self.head_ranges, self.query_ranges, self.key_ranges = [], [], []
        head_start = query_start = key_start = 0
        for group_index, group_spec in enumerate(layer_spec["groups"]):
            family = get_attention_family(group_spec["kind"])
            slots = family.num_query_key_slots(group_spec)
            key_slots = slots if family.scores_keys(group_spec) else 0
            # The layer's rank among the site's layers that use this family (RAN's k-th layer has k - 1).
            family_layer_idx = family.family_layers(config.attention_layout[site]).index(layer_idx)
            group = family(
                group_spec,
                config,
                site,
                layer_idx,
                self.head_dim,
                group_index=group_index,
                family_layer_idx=family_layer_idx,
            )
            self.groups.append(group)
            self.head_ranges.append((head_start, head_start + group_spec["num_heads"]))
            self.query_ranges.append((query_start, query_start + slots))
            self.key_ranges.append((key_start, key_start + key_slots))
            head_start += group_spec["num_heads"]
            query_start += slots
            key_start += key_slots
        self.takes_zeroed_padding = all(group.takes_zeroed_padding for group in self.groups)

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query: (batch, query_slots, q_len, head_dim); key: (batch, query_key_slots, k_len, head_dim); value:
        (batch, heads, k_len, head_dim).

        Returns (batch, heads, q_len, head_dim) and the weights (batch, heads, q_len, k_len) if asked.
        """
        outputs, weights = [], []
        for group, (h0, h1), (q0, q1), (k0, k1) in zip(
            self.groups, self.head_ranges, self.query_ranges, self.key_ranges
        ):
            group_query = query[:, q0:q1] if q1 > q0 else None
            group_key = key[:, k0:k1] if k1 > k0 else None
            output, weight = group(group_query, group_key, value[:, h0:h1], context, output_attentions)
            outputs.append(output)
            weights.append(weight)
        output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        if not output_attentions:
            return output, None
        return output, weights[0] if len(weights) == 1 else torch.cat(weights, dim=1)

    def decoding_lookback(self, dtype: torch.dtype) -> int | None:
        """How many earlier positions a cached decoding step of every group reads (the cache may drop
        older ones), or None when some group reads the whole prefix."""
        lookbacks = [group.decoding_lookback(dtype) for group in self.groups]
        return None if None in lookbacks else max(lookbacks)


class AttentionProjections(nn.Module):
    """A model's attention module: the layout's head groups behind per-head query/key/value projections, named as
    in the model's checkpoints (`query_key_names`, `value_name`).

    The query projection exists only when some group reads queries, the key projection only when some group scores
    them against keys, each sized to the slots the groups need: no parameter that nothing reads.
    """

    query_key_names: tuple[str, str]
    value_name: str

    def __init__(self, heads: HeadGroups, hidden_size: int):
        super().__init__()
        self.heads = heads
        self.head_dim = heads.head_dim
        self.inner_dim = heads.num_heads * heads.head_dim
        query_name, key_name = self.query_key_names
        for name, slots in ((query_name, heads.query_slots), (key_name, heads.query_key_slots)):
            if slots:
                self.add_module(name, nn.Linear(hidden_size, slots * heads.head_dim))
        self.add_module(self.value_name, nn.Linear(hidden_size, self.inner_dim))

    def split_heads(self, states: torch.Tensor) -> torch.Tensor:
        """(batch, len, heads * head_dim) -> (batch, heads, len, head_dim)."""
        return states.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)


class SimpleAttention(AttentionProjections):
    """A Marian-style attention sublayer (q_proj, k_proj, v_proj, out_proj) over any mix of families; with the
    `dot` layout the parameters are exactly Marian's."""

    query_key_names = ("q_proj", "k_proj")
    value_name = "v_proj"

    def __init__(self, config, layer_spec: dict, site: str, layer_idx: int):
        super().__init__(HeadGroups(config, layer_spec, site, layer_idx), config.d_model)
        self.site = site
        self.layer_idx = layer_idx
        self.is_cross = site == "cross"
        self.out_proj = nn.Linear(self.inner_dim, config.d_model)

    def project_keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value = self.split_heads(self.v_proj(source))
        if self.heads.query_key_slots:
            key = self.split_heads(self.k_proj(source))
        else:
            key = value[:, :0]  # no heads score keys: a zero-head view, nothing allocated (nor cached: see cache.py)
        return key, value

    def project_cross_keys_values(
        self, source: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross attention's keys and values as its cache keeps them: the values zeroed at the padded keys where every
        group takes them so (once per generate, where the groups would zero them in every step)."""
        key, value = self.project_keys_values(source)
        if self.heads.takes_zeroed_padding:
            value = zero_padding(value, key_padding_mask)
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        context: AttentionContext,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states: (batch, q_len, d_model); key_value_states: encoder output for cross attention."""
        batch_size, query_length, _ = hidden_states.shape
        query = self.split_heads(self.q_proj(hidden_states)) if self.heads.query_slots else None

        if cache is None:
            key, value = self.project_keys_values(key_value_states if self.is_cross else hidden_states)
        elif self.is_cross:
            cross_cache = cache.cross_attention_cache
            if cache.is_updated.get(self.layer_idx):
                key, value = cross_cache.layers[self.layer_idx].keys, cross_cache.layers[self.layer_idx].values
            else:
                projected = self.project_cross_keys_values(key_value_states, context.key_padding_mask)
                key, value = cross_cache.update(*projected, self.layer_idx)
                cache.is_updated[self.layer_idx] = True
            context = dataclasses.replace(
                context,
                decoding_state=cross_cache.layers[self.layer_idx].states,
                padded_values_zeroed=self.heads.takes_zeroed_padding,
            )
        else:
            self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            projected = self.project_keys_values(hidden_states)
            key, value = self_cache.update(*projected, self.layer_idx, **context.cache_update_kwargs())
            context = dataclasses.replace(context, decoding_state=self_cache.layers[self.layer_idx].states)

        output, weights = self.heads(query, key, value, context, output_attentions)
        if cache is not None and not self.is_cross:
            lookback = self.heads.decoding_lookback(value.dtype)
            if lookback is not None:
                # Every head reads at most `lookback` earlier positions: a sliding window suffices.
                self_cache.layers[self.layer_idx].keep_last(lookback)
        output = output.transpose(1, 2).reshape(batch_size, query_length, -1)
        return self.out_proj(output), weights


def set_attention_fast_paths(model: nn.Module, enabled: bool = True) -> None:
    """Run every attention family's fast path (the default) or its reference path.

    Fast paths exploit a family's structure (fixed convolutions, memoised tables, argmax without
    softmax) and equal the reference path up to rounding; the reference path computes and applies
    the full weight matrices, as when the weights are requested. Switch between `generate` calls,
    not during one: a decoder cache filled by a fast path may hold a sliding window only.
    """
    for module in model.modules():
        if isinstance(module, AttentionHeads):
            module.fast_path = enabled


def query_key_ties(
    layer_specs: list[LayerSpec | None], layers_name: str, attention_path: str, projection_names: tuple[str, str]
) -> dict[str, str]:
    """The layout's query/key ties as transformers' `_tied_weights_keys` declares them, {tied parameter: source}.

    Each tied layer builds projections of its own, whose parameters `tie_weights` replaces by the source layer's
    (in `post_init`, and when `from_pretrained` has loaded a checkpoint, which then reports a missing source as
    missing, as it does for tied word embeddings). `attention_path` is the dotted path from a layer to its attention
    module (`"attention.self"` in BERT), `projection_names` the names of its query and key projections.
    """
    tied = {}
    for index, spec in enumerate(layer_specs):
        if spec is None or spec["share_query_key_with"] is None:
            continue
        source = spec["share_query_key_with"]
        query_name, key_name = projection_names
        names = (query_name, key_name) if query_key_slots(spec) else (query_name,)
        for name in names:
            for parameter in ("weight", "bias"):
                tied[f"{layers_name}.{index}.{attention_path}.{name}.{parameter}"] = (
                    f"{layers_name}.{source}.{attention_path}.{name}.{parameter}"
                )
    return tied
