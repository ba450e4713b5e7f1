"""Human-readable views of a layout: the site × layer × heads table used by the CLI and model cards."""

from .modeling.layout import SITE_STACKS


def describe_layer(spec: dict | None) -> str:
    """One cell of the layout table, e.g. `8 × hard_coded (offsets -1,1)` or `1 × dot + 7 × hard_coded`."""
    if spec is None:
        return "none"
    parts = []
    for group in spec["groups"]:
        options = []
        if group["kind"] == "hard_coded":
            offsets = group["offsets"]
            period = next(p for p in range(1, len(offsets) + 1) if offsets == [offsets[i % p] for i in range(len(offsets))])
            options.append("offsets " + ",".join(f"{o:+d}" for o in offsets[:period]))
            if group["window"] is not None:
                options.append(f"window {group['window']}")
            if group["indexing"]:
                options.append("indexing")
            if group["centre"] != "floor":
                options.append(f"{group['centre']} centre")
        else:
            options.extend(
                f"{key} {value}" for key, value in sorted(group.items()) if key not in ("kind", "num_heads")
            )
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
