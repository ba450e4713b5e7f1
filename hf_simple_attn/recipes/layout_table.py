"""Human-readable views of a layout: the site × layer × heads table used by the CLI and model cards."""

from ..modeling.layout import SITE_STACKS


def shortest_period(values: list) -> list:
    """The repeating unit of a per-head list cycled over the heads: [-1, 1, -1, 1] -> [-1, 1]."""
    return next(values[:p] for p in range(1, len(values) + 1) if values == [values[i % p] for i in range(len(values))])


def describe_option(key: str, value) -> str:
    if isinstance(value, list):
        value = ",".join(
            f"{v:+d}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in shortest_period(value)
        )
    return f"{key} {value}"


def describe_layer(spec: dict | None) -> str:
    """One cell of the layout table, e.g. `8 × hard_coded (offsets -1,+1)` or `1 × dot + 7 × hard_coded`.

    Options at their defaults-by-absence (None, False) are left out; per-head lists are shown once.
    """
    if spec is None:
        return "none"
    parts = []
    for group in spec["groups"]:
        options = [
            describe_option(key, value)
            for key, value in group.items()
            if key not in ("kind", "num_heads") and value is not None and value is not False
        ]
        cell = f"{group['num_heads']} × {group['kind']}"
        parts.append(cell + (f" ({'; '.join(options)})" if options else ""))
    text = " + ".join(parts)
    if spec["share_query_key_with"] is not None:
        text += f", Q/K shared with layer {spec['share_query_key_with']}"
    return text


def layout_table(config) -> str:
    """Markdown table: one row per layer, one column per site (and feed-forward)."""
    layout = config.attention_layout
    sites = [site for site in SITE_STACKS if site in layout]
    stacks = [stack for stack in ("encoder", "decoder") if f"{stack}_ffn" in layout]
    num_rows = max(len(layout[site]) for site in sites)
    header = ["layer", *sites, *(f"{stack} FFN" for stack in stacks)]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index in range(num_rows):
        cells = [str(index)]
        cells += [describe_layer(layout[site][index]) if index < len(layout[site]) else "" for site in sites]
        cells += [
            ("yes" if layout[f"{stack}_ffn"][index] else "no") if index < len(layout[f"{stack}_ffn"]) else ""
            for stack in stacks
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
