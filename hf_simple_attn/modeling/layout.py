"""Attention layouts: which attention each site, layer and head uses, as plain config data.

A user writes a compact layout; `normalize_layout` validates it and expands it to one explicit
spec per layer, which is what `config.json` stores. Compact forms, per site
(`encoder_self`, `decoder_self`, `cross`):

- a layer spec used by every layer: `"dot"`, `"none"`, `{"kind": "hard_coded", "offsets": [-1, 1]}`,
  `{"kind": "dot", "num_heads": 1}`, or several head groups in one layer:
  `{"groups": [{"kind": "dot", "num_heads": 2}, {"kind": "hard_coded"}]}` (a group without
  `num_heads` takes the remaining heads);
- a list with one layer spec per layer;
- `{"default": <layer spec>, "layers": {<selector>: <layer spec>, ...}, "tie_query_key": <selector>}`
  (each key optional; `default` is `"dot"` unless given), where a selector scales with depth: `all`, `first`, `last`, `first_<k>`, `last_<k>`,
  `all_but_last`, `all_but_last_<k>`, `first_half`, `last_half`, `bottom_third`,
  `middle_third`, `top_third`, or layer indices such as `"0,2"` / `"-1"`. `tie_query_key` makes
  the selected layers share one set of query/key projections.

`encoder_ffn` / `decoder_ffn` switch feed-forward blocks on or off: a bool, a list of bools or
`{"default": bool, "layers": {<selector>: bool}}`.

The expanded layer spec is `None` (no sublayer) or a `LayerSpec`
`{"num_heads": H, "head_dim": d, "groups": [{"kind": ..., "num_heads": n, ...}], "share_query_key_with": int | None}`,
each group a `GroupSpec` with the options its family's `normalize_spec` fills in.
"""

import re

from .attention_heads import (
    MAX_HEADS,
    MAX_SIZE,
    SITES,
    GroupSpec,
    LayerSpec,
    LayoutError,
    is_integer,
    positive_int,
    true_or_false,
)
from .attention_registry import ATTENTION_FAMILIES, get_attention_family


SITE_STACKS = {"encoder_self": "encoder", "decoder_self": "decoder", "cross": "decoder"}
NAMED_SELECTORS = (
    "all",
    "first",
    "last",
    "first_<k>",
    "last_<k>",
    "all_but_last",
    "all_but_last_<k>",
    "first_half",
    "last_half",
    "bottom_third",
    "middle_third",
    "top_third",
    "<i>[,<j>...]",
)
LAYER_KEYS = ("kind", "groups", "num_heads", "head_dim", "share_query_key_with")


def select_layers(selector, num_layers: int, field: str) -> list[int]:
    """Layer indices picked by a depth-scaling selector (see the module docstring)."""
    if is_integer(selector):
        selector = str(selector)
    if not isinstance(selector, str):
        raise LayoutError(
            f"{field}: a layer selector must be a string, got {selector!r}; valid: {list(NAMED_SELECTORS)}"
        )
    half = max(1, num_layers // 2)
    third = max(1, round(num_layers / 3))
    fixed = {
        "all": range(num_layers),
        "first": range(min(1, num_layers)),
        "last": range(num_layers - 1, num_layers),
        "all_but_last": range(num_layers - 1),
        "first_half": range(half),
        "last_half": range(num_layers - half, num_layers),
        "bottom_third": range(third),
        "middle_third": range((num_layers - third) // 2, (num_layers - third) // 2 + third),
        "top_third": range(num_layers - third, num_layers),
    }
    if selector in fixed:
        return list(fixed[selector])
    match = re.fullmatch(r"(first|last|all_but_last)_(\d+)", selector)
    if match:
        count = min(int(match.group(2)), num_layers)
        if match.group(1) == "first":
            return list(range(count))
        if match.group(1) == "last":
            return list(range(num_layers - count, num_layers))
        return list(range(num_layers - count))
    if re.fullmatch(r"\s*-?\d+\s*(,\s*-?\d+\s*)*", selector):
        indices = []
        for part in selector.split(","):
            index = int(part)
            if not -num_layers <= index < num_layers:
                raise LayoutError(f"{field}: layer index {index} is out of range for {num_layers} layers")
            indices.append(index % num_layers)
        return sorted(set(indices))
    raise LayoutError(f"{field}: unknown layer selector {selector!r}; valid: {list(NAMED_SELECTORS)}")


def expand_per_layer(value, num_layers: int, field: str, is_leaf, default) -> list:
    """Expand a site value (one leaf, a list of leaves, or a default/layers dict) to one leaf per layer.

    `default` fills the layers a default/layers dict leaves unset when it has no `default`.
    """
    if isinstance(value, list):
        if len(value) != num_layers:
            raise LayoutError(f"{field}: a per-layer list needs exactly {num_layers} entries, got {len(value)}")
        return list(value)
    if isinstance(value, dict) and {"default", "layers", "tie_query_key"} & set(value):
        unknown = sorted(set(value) - {"default", "layers", "tie_query_key"})
        if unknown:
            raise LayoutError(f"{field}: unknown key(s) {unknown}; valid keys: ['default', 'layers', 'tie_query_key']")
        selected = value.get("layers", {})
        if not isinstance(selected, dict):
            raise LayoutError(f"{field}.layers: expected a mapping from layer selector to spec, got {selected!r}")
        per_layer = [value.get("default", default)] * num_layers
        for selector, leaf in selected.items():
            for index in select_layers(selector, num_layers, f"{field}.layers"):
                per_layer[index] = leaf
        return per_layer
    if not is_leaf(value):
        raise LayoutError(
            f"{field}: expected a layer spec, a list of {num_layers} layer specs or a default/layers mapping"
        )
    return [value] * num_layers


def normalize_group(group, site: str, field: str) -> GroupSpec:
    if not isinstance(group, dict) or "kind" not in group:
        raise LayoutError(f"{field}: each head group needs a 'kind'; valid kinds: {sorted(ATTENTION_FAMILIES)}")
    family = get_attention_family(group["kind"], f"{field}.kind")
    return family.normalize_spec(group, site, field)


def normalize_layer_spec(spec, site: str, default_heads: int, d_model: int, field: str) -> LayerSpec | None:
    """Expand one layer's spec to the explicit form, or None for an absent sublayer."""
    if spec is None or spec == "none":
        return None
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, dict):
        raise LayoutError(f"{field}: expected 'none', a kind name or a mapping, got {spec!r}")
    if "groups" in spec:
        unknown = sorted(set(spec) - {"groups", "num_heads", "head_dim", "share_query_key_with"})
        if unknown:
            raise LayoutError(
                f"{field}: unknown key(s) {unknown} next to 'groups'; valid: ['groups', 'num_heads', 'head_dim']"
            )
        groups = spec["groups"]
        if not isinstance(groups, list) or not groups:
            raise LayoutError(f"{field}.groups: expected a non-empty list of head groups")
        groups = [dict(g) if isinstance(g, dict) else g for g in groups]
        layer_heads = spec.get("num_heads")
    else:
        if "kind" not in spec:
            raise LayoutError(
                f"{field}: a layer spec needs 'kind' or 'groups'; valid kinds: {sorted(ATTENTION_FAMILIES)} or 'none'"
            )
        groups = [{k: v for k, v in spec.items() if k not in ("head_dim", "share_query_key_with")}]
        layer_heads = None
    group_fields = [f"{field}.groups[{i}]" for i in range(len(groups))] if "groups" in spec else [field]
    for group, group_field in zip(groups, group_fields):
        if not isinstance(group, dict):
            raise LayoutError(f"{group_field}: expected a mapping with 'kind', got {group!r}")
        if group.get("num_heads") is not None:
            positive_int(group["num_heads"], f"{group_field}.num_heads", MAX_HEADS)
    if layer_heads is not None:
        positive_int(layer_heads, f"{field}.num_heads", MAX_HEADS)

    open_groups = [g for g in groups if g.get("num_heads") is None]
    if len(open_groups) > 1:
        raise LayoutError(
            f"{field}.groups: at most one head group may omit 'num_heads' (it takes the remaining heads)"
        )
    fixed_heads = sum(g["num_heads"] for g in groups if g.get("num_heads") is not None)
    if layer_heads is None:
        layer_heads = default_heads if open_groups else fixed_heads
    if open_groups:
        remaining = layer_heads - fixed_heads
        if remaining < 1:
            raise LayoutError(
                f"{field}.num_heads: the groups already use {fixed_heads} of {layer_heads} heads, none left for the open group"
            )
        open_groups[0]["num_heads"] = remaining
    elif fixed_heads != layer_heads:
        raise LayoutError(
            f"{field}.num_heads: the head groups add up to {fixed_heads} heads but the layer has {layer_heads}"
        )

    head_dim = spec.get("head_dim")
    if head_dim is None:
        if d_model % layer_heads:
            raise LayoutError(
                f"{field}.num_heads: d_model {d_model} is not divisible by {layer_heads} heads; "
                "use a divisor of d_model or give 'head_dim'"
            )
        head_dim = d_model // layer_heads
    else:
        positive_int(head_dim, f"{field}.head_dim", MAX_SIZE)

    groups = [normalize_group(g, site, group_field) for g, group_field in zip(groups, group_fields)]
    return {
        "num_heads": layer_heads,
        "head_dim": head_dim,
        "groups": groups,
        "share_query_key_with": spec.get("share_query_key_with"),
    }


def query_slots(layer_spec: LayerSpec | None) -> int:
    """How many per-head query projections a layer needs."""
    if layer_spec is None:
        return 0
    return sum(get_attention_family(g["kind"]).num_query_key_slots(g) for g in layer_spec["groups"])


def query_key_slots(layer_spec: LayerSpec | None) -> int:
    """How many of a layer's queries are scored against keys: the heads of its key projection."""
    if layer_spec is None:
        return 0
    groups = [(get_attention_family(g["kind"]), g) for g in layer_spec["groups"]]
    return sum(family.num_query_key_slots(g) for family, g in groups if family.scores_keys(g))


def apply_query_key_ties(site_value, layers: list[LayerSpec | None], field: str) -> None:
    """Resolve `tie_query_key` (and check explicit `share_query_key_with`) on expanded layers."""
    if isinstance(site_value, dict) and "tie_query_key" in site_value:
        tied = select_layers(site_value["tie_query_key"], len(layers), f"{field}.tie_query_key")
        for index in tied[1:]:
            if layers[index] is not None:
                layers[index]["share_query_key_with"] = tied[0]
    for index, layer in enumerate(layers):
        if layer is None or layer["share_query_key_with"] is None:
            continue
        source = layer["share_query_key_with"]
        where = f"{field}[{index}].share_query_key_with"
        if not is_integer(source) or not 0 <= source < index:
            raise LayoutError(f"{where}: expected the index of an earlier layer (0..{index - 1}), got {source!r}")
        if layers[source] is None or layers[source]["share_query_key_with"] is not None:
            raise LayoutError(f"{where}: layer {source} must have its own query/key projections to share them")
        same_shape = (
            query_slots(layers[source]) == query_slots(layer)
            and query_key_slots(layers[source]) == query_key_slots(layer)
            and layers[source]["head_dim"] == layer["head_dim"]
        )
        if query_slots(layer) == 0 or not same_shape:
            raise LayoutError(
                f"{where}: layers {source} and {index} need the same number of query/key heads (>0) and head_dim to share them"
            )


def normalize_ffn(value, num_layers: int, field: str) -> list[bool]:
    flags = expand_per_layer(True if value is None else value, num_layers, field, lambda v: isinstance(v, bool), True)
    return [true_or_false(flag, f"{field}[{index}]") for index, flag in enumerate(flags)]


def normalize_layout(
    layout: dict | None,
    stack_layers: dict[str, int],
    site_heads: dict[str, int],
    d_model: int,
) -> dict:
    """Validate a compact layout and expand it to one explicit spec per site and layer.

    stack_layers: layers per stack, e.g. {"encoder": 6, "decoder": 6}.
    site_heads: default head count per site, e.g. {"encoder_self": 8, "decoder_self": 8, "cross": 8}.
    """
    layout = layout_mapping(layout)
    sites = [s for s in SITES if SITE_STACKS[s] in stack_layers]
    valid_keys = sites + [f"{stack}_ffn" for stack in stack_layers]
    unknown = sorted(set(layout) - set(valid_keys))
    if unknown:
        raise LayoutError(f"attention_layout: unknown key(s) {unknown}; valid keys: {valid_keys}")
    normalized = {}
    for site in sites:
        num_layers = stack_layers[SITE_STACKS[site]]
        field = f"attention_layout.{site}"
        site_value = layout.get(site, "dot")
        per_layer = expand_per_layer(
            site_value, num_layers, field, lambda v: v is None or isinstance(v, (str, dict)), "dot"
        )
        layers = [
            normalize_layer_spec(spec, site, site_heads[site], d_model, f"{field}[{index}]")
            for index, spec in enumerate(per_layer)
        ]
        apply_query_key_ties(site_value, layers, field)
        for kind in sorted({group["kind"] for layer in layers if layer is not None for group in layer["groups"]}):
            get_attention_family(kind).validate_site(layers, site)
        normalized[site] = layers
    for stack, num_layers in stack_layers.items():
        normalized[f"{stack}_ffn"] = normalize_ffn(
            layout.get(f"{stack}_ffn"), num_layers, f"attention_layout.{stack}_ffn"
        )
    return normalized


def layout_mapping(layout) -> dict:
    """`layout` itself, {} for None; a `LayoutError` for anything but a mapping."""
    if layout is None:
        return {}
    if not isinstance(layout, dict):
        raise LayoutError(f"attention_layout: expected a mapping of sites to specs, got {type(layout).__name__}")
    return layout


def merge_layouts(base: dict, override: dict | None) -> dict:
    """A preset's layout with some sites replaced (site by site) by the user's."""
    return {**base, **layout_mapping(override)}
