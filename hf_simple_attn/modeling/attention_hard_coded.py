"""Hard-coded Gaussian attention (You, Sun and Iyyer, 2020): fixed, input-agnostic weights.

Head h at query position i puts weight N(j; c(i) + offset_h, σ) on key position j, with
c(i) = i for self attention and c(i) = floor(γ·i) (or γ·i) for cross attention, γ being the
mean source / target length ratio of the training data (`config.length_ratio`). Rows cut at the
sentence borders, at padding or by the causal mask are not renormalised (paper, footnote 5).
There is no query or key projection: only values are projected, then the output projection.

Options: `window` keeps the `window` positions nearest the centre (the paper's "conv" variant);
`indexing` copies exactly the value at the centre (a one-hot kernel).
"""

import math

import torch

from .attention_registry import AttentionContext, AttentionHeads, LayoutError, register_attention


DEFAULT_OFFSETS = {"encoder_self": [-1, 1], "decoder_self": [-1, 0], "cross": [-1, 0, 1]}
CENTRES = ("floor", "continuous")


def gaussian_density(distance: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.exp(-(distance**2) / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))


@register_attention("hard_coded")
class HardCodedGaussianHeads(AttentionHeads):
    option_names = ("offsets", "sigma", "window", "indexing", "centre")

    @classmethod
    def normalize_spec(cls, spec, site, field):
        spec = super().normalize_spec(spec, site, field)
        offsets = spec.get("offsets", DEFAULT_OFFSETS[site])
        if isinstance(offsets, int) and not isinstance(offsets, bool):
            offsets = [offsets]
        if (
            not isinstance(offsets, (list, tuple))
            or not offsets
            or any(not isinstance(o, int) or isinstance(o, bool) for o in offsets)
        ):
            raise LayoutError(f"{field}.offsets: expected a non-empty list of integers, got {offsets!r}")
        if site == "decoder_self" and any(o > 0 for o in offsets):
            raise LayoutError(
                f"{field}.offsets: decoder self-attention offsets must be <= 0 (a positive offset centres a head on "
                f"future tokens, which the causal mask removes), got {list(offsets)}"
            )
        sigma = spec.get("sigma", 1.0)
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0:
            raise LayoutError(f"{field}.sigma: expected a positive number, got {sigma!r}")
        window = spec.get("window")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1 or window % 2 == 0
        ):
            raise LayoutError(f"{field}.window: expected null or an odd positive integer (e.g. 3), got {window!r}")
        indexing = spec.get("indexing", False)
        if not isinstance(indexing, bool):
            raise LayoutError(f"{field}.indexing: expected true or false, got {indexing!r}")
        if indexing and window is not None:
            raise LayoutError(f"{field}: 'indexing' and 'window' are exclusive (indexing is a window of 1 with weight 1)")
        centre = spec.get("centre", "floor")
        if centre not in CENTRES:
            raise LayoutError(f"{field}.centre: expected one of {list(CENTRES)}, got {centre!r}")
        if centre != "floor" and site != "cross":
            raise LayoutError(f"{field}.centre: only cross attention has a length-ratio centre; self attention uses c(i) = i")
        # Per-head offsets: the list is cycled over the heads of the group.
        head_offsets = [offsets[h % len(offsets)] for h in range(spec["num_heads"])]
        return {
            "kind": spec["kind"],
            "num_heads": spec["num_heads"],
            "offsets": head_offsets,
            "sigma": float(sigma),
            "window": window,
            "indexing": indexing,
            "centre": centre,
        }

    def centres(self, query_positions: torch.Tensor) -> torch.Tensor:
        """Gaussian means per head and query: (heads, q_len)."""
        positions = query_positions.to(torch.float64)
        if self.site == "cross":
            positions = self.config.length_ratio * positions
            if self.spec["centre"] == "floor":
                positions = torch.floor(positions)
        offsets = torch.tensor(self.spec["offsets"], dtype=torch.float64, device=positions.device)
        return positions[None, :] + offsets[:, None]

    def weight_table(self, query_positions: torch.Tensor, key_length: int, is_causal: bool) -> torch.Tensor:
        """Input-agnostic weights (heads, q_len, k_len), cut (not renormalised) by the causal mask."""
        mu = self.centres(query_positions)[:, :, None]
        key_positions = torch.arange(key_length, dtype=torch.float64, device=mu.device)[None, None, :]
        nearest = torch.floor(mu + 0.5)
        if self.spec["indexing"]:
            weights = (key_positions == nearest).to(torch.float64)
        else:
            weights = gaussian_density(key_positions - mu, self.spec["sigma"])
            if self.spec["window"] is not None:
                weights = weights * ((key_positions - nearest).abs() <= self.spec["window"] // 2)
        if is_causal:
            weights = weights * (key_positions <= query_positions.to(torch.float64)[None, :, None])
        return weights

    def forward(self, query, key, value, context: AttentionContext, output_attentions=False):
        weights = self.weight_table(context.query_positions, value.shape[-2], context.is_causal).to(value.dtype)
        if context.key_padding_mask is not None:
            # Zeroing padded values equals cutting their weights, without a per-batch weight tensor.
            value = value * context.key_padding_mask[:, None, :, None].to(value.dtype)
        output = torch.matmul(weights[None], value)
        if not output_attentions:
            return output, None
        batch_weights = weights[None].expand(value.shape[0], -1, -1, -1)
        if context.key_padding_mask is not None:
            batch_weights = batch_weights * context.key_padding_mask[:, None, None, :].to(weights.dtype)
        return output, batch_weights
