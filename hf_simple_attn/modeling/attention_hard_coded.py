"""Hard-coded Gaussian attention (You, Sun and Iyyer, 2020): fixed, input-agnostic weights.

Head h at query position i puts weight N(j; c(i) + offset_h, σ) on key position j, with
c(i) = i for self attention and c(i) = floor(γ·i) (or γ·i) for cross attention, γ being the
mean source / target length ratio of the training data (`config.length_ratio`). Rows cut at the
sentence borders, at padding or by the causal mask are not renormalised (paper, footnote 5).
There is no query or key projection: only values are projected, then the output projection.

Options: `window` keeps the `window` positions nearest the centre (the paper's "conv" variant);
`indexing` copies exactly the value at the centre (a one-hot kernel).

The weights depend on positions only, so the fast path (the default) never builds them per call:
- self attention is a fixed depthwise convolution over the sequence (weight depends on j - i).
  Its kernel is truncated where the Gaussian's remaining weight is below half an ulp of its
  peak in the compute dtype (radius 5 for σ = 1 in float32; the window or the single index
  otherwise), which changes outputs by no more than rounding does. Long sequences run it as one
  depthwise `conv1d` over the values, O(n·taps); short ones, and cached decoding steps, multiply
  a memoised banded table over the keys the kernel reaches (one matrix product), so a decoding step
  reads only the last few positions and the decoder cache may drop older ones (`decoding_lookback`).
- cross attention multiplies a memoised (heads, q_len, k_len) table. Padded keys are zeroed values, which a
  cached decoding step finds zeroed in the cache already (filled once per generate: `takes_zeroed_padding`).
Tables live in the process-wide memo `gaussian_tables` (`memo.py`), keyed by spec, positions, shapes, dtype and
device (never as module tensors, which `from_pretrained` would build on the meta device; never keyed by tensor
values).
Under `torch.compile` they are built in the graph instead. The reference path (the full table of
`weight_table`) runs when the weights are requested or `fast_path` is off.

While exporting, the fast path has no memo: encoder self attention is the same convolution, summed over all
the kernel's taps of the zero-padded values; cross attention, and decoder self attention of several queries over a
static cache's slots, compute their table from the query positions in the graph, one copy per example.

With a static cache (positions held on the device, `AttentionContext.query_start` None), a decoder self-attention
step (`window_step`, the exported decoder step's too) gathers the slots within the kernel's reach of its position
and weighs them with the relative kernel: the same few slots whatever `max_cache_len`, the same shapes at every step.
The prefill and cross attention take the reference path: a table made from the positions over every slot (windowed
heads mask by their window, unwritten slots are cut by the causal mask).
"""

import math

import torch
from torch import nn

from .attention_heads import (
    MAX_DISTANCE,
    AttentionContext,
    AttentionHeads,
    GroupSpec,
    LayoutError,
    is_integer,
    number_in,
    positive_int,
    true_or_false,
)
from .attention_ops import apply_table, cut_padding, is_exporting, python_constant, zero_padding
from .memo import memo_for


DEFAULT_OFFSETS = {"encoder_self": [-1, 1], "decoder_self": [-1, 0], "cross": [-1, 0, 1]}
CENTRES = ("floor", "continuous")
# σ in positions: below, a head is an index (use `indexing`); above, it is flat over any sentence.
MIN_SIGMA, MAX_SIGMA = 1e-3, 1e3


class HardCodedSpec(GroupSpec):
    """A `hard_coded` group as `config.json` stores it."""

    offsets: list[int]  # one per head
    sigma: float
    window: int | None
    indexing: bool
    centre: str


# Self attention over a whole sequence runs as a convolution from this many keys per kernel tap, as a banded table
# product below (where the product is as cheap and one kernel launch fewer).
CONVOLUTION_MIN_LENGTH_PER_TAP = 4


def gaussian_density(distance: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.exp(-(distance**2) / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))


# The dtypes a kernel is truncated for (see `gaussian_radius`); computed once per head group.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def gaussian_radius(sigma: float, dtype: torch.dtype) -> int:
    """Smallest R whose dropped weights (all |distance| > R, both sides) sum to at most half an ulp
    of the peak weight in `dtype`: cutting there changes an output by no more than rounding one
    product does. σ = 1: R = 5 in float32, 8 in float64."""
    tolerance = torch.finfo(dtype).eps / 2
    relative = [math.exp(-(r**2) / (2 * sigma**2)) for r in range(int(40 * sigma) + 2)]  # weight / peak
    # Walk in from the far end while the weights dropped beyond the radius stay within the tolerance.
    radius, dropped = len(relative) - 1, 0.0
    while radius > 0 and 2 * (dropped + relative[radius]) <= tolerance:
        dropped += relative[radius]
        radius -= 1
    return radius


def memoised(key: tuple, build) -> torch.Tensor:
    """`build()` once per key (everything the table depends on, as Python values), kept in the `gaussian_tables`
    memo; built every time while compiling or exporting (in the graph, where it costs a few fused elementwise
    kernels)."""
    return memo_for("gaussian_tables").kept(key, build)


def window_slots(
    context: AttentionContext,
    first: int,
    last: int,
    batch_size: int,
    num_slots: int,
    key_padding_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The static-cache slots at distances first..last from the step's query position, clamped into the cache,
    (taps,) long, and which of them a kernel tap may weigh, (batch, 1, 1, taps) bool: inside the cache and, with
    `key_padding_mask` (batch, slots), real. Made once a step for all the layers that have the same reach."""

    def build():
        slots = context.query_positions + python_constant(list(range(first, last + 1)), context.device, torch.long)
        clamped = slots.clamp(0, num_slots - 1)
        kept = (clamped == slots)[None, None, None, :].expand(batch_size, 1, 1, -1)
        if key_padding_mask is not None:
            kept = kept & key_padding_mask.index_select(1, clamped)[:, None, None, :]
        return clamped, kept

    return context.shared(("hard_coded_window", first, last, batch_size, num_slots), build)


def depthwise_convolution(value: torch.Tensor, channel_kernel: torch.Tensor, first_distance: int) -> torch.Tensor:
    """A depthwise convolution along the sequence, zero outside it, as one `conv1d`.

    value: (batch, heads, len, d); channel_kernel: (heads · d, 1, taps), each head's kernel repeated for its d
    channels, tap t at distance first_distance + t:
    output[:, h, i] = Σ_t kernel[h, t] · value[:, h, i + first_distance + t]; O(len · taps) instead of O(len²).
    """
    batch_size, num_heads, length, head_dim = value.shape
    taps = channel_kernel.shape[-1]
    last_distance = first_distance + taps - 1
    pad_left, pad_right = max(0, -first_distance), max(0, last_distance)
    channels = value.permute(0, 1, 3, 2).reshape(batch_size, num_heads * head_dim, length)  # (batch, h·d, len)
    channels = nn.functional.pad(channels, (pad_left, pad_right))
    # conv1d output index i' reads padded inputs i'..i'+taps-1, i.e. keys i' - pad_left + t; query i is at
    # i' = i + first_distance + pad_left.
    output = nn.functional.conv1d(channels, channel_kernel, groups=num_heads * head_dim)
    start = first_distance + pad_left
    output = output[:, :, start : start + length]
    return output.view(batch_size, num_heads, head_dim, length).transpose(2, 3)


class HardCodedGaussianHeads(AttentionHeads):
    """Fixed Gaussian weights N(j; c(i) + offset_h, σ) per head over the values; no learned scores."""

    kind = "hard_coded"
    summary = "fixed Gaussian weights around `i + offset`; no query or key"
    paper = "You, Sun and Iyyer 2020, Hard-Coded Gaussian Attention for Neural Machine Translation"
    citation = """@inproceedings{you-etal-2020-hard,
  title = {Hard-Coded {G}aussian Attention for Neural Machine Translation},
  author = {You, Weiqiu and Sun, Simeng and Iyyer, Mohit},
  booktitle = {Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics},
  year = {2020}
}"""
    limitations = "hard-coded heads use fixed Gaussian weights that do not depend on the input"

    option_names = ("offsets", "sigma", "window", "indexing", "centre")
    takes_zeroed_padding = True  # padded keys are zeroed values: the weights need no mask

    @classmethod
    def independent_queries(cls, spec: GroupSpec) -> bool:
        return True  # each query's weights come from its position alone

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> HardCodedSpec:
        spec = super().normalize_spec(spec, site, field)
        offsets = spec.get("offsets", DEFAULT_OFFSETS[site])
        if is_integer(offsets):
            offsets = [offsets]
        if (
            not isinstance(offsets, (list, tuple))
            or not offsets
            or any(not is_integer(o) or abs(o) > MAX_DISTANCE for o in offsets)
        ):
            raise LayoutError(
                f"{field}.offsets: expected a non-empty list of integers in [-{MAX_DISTANCE}, {MAX_DISTANCE}], "
                f"got {offsets!r}"
            )
        if site == "decoder_self" and any(o > 0 for o in offsets):
            raise LayoutError(
                f"{field}.offsets: decoder self-attention offsets must be <= 0 (a positive offset centres a head on "
                f"future tokens, which the causal mask removes), got {list(offsets)}"
            )
        sigma = number_in(spec.get("sigma", 1.0), f"{field}.sigma", MIN_SIGMA, MAX_SIGMA)
        window = spec.get("window")
        if window is not None and positive_int(window, f"{field}.window", MAX_DISTANCE) % 2 == 0:
            raise LayoutError(f"{field}.window: expected null or an odd positive integer (e.g. 3), got {window!r}")
        indexing = true_or_false(spec.get("indexing", False), f"{field}.indexing")
        if indexing and window is not None:
            raise LayoutError(
                f"{field}: 'indexing' and 'window' are exclusive (indexing is a window of 1 with weight 1)"
            )
        centre = spec.get("centre", "floor")
        if centre not in CENTRES:
            raise LayoutError(f"{field}.centre: expected one of {list(CENTRES)}, got {centre!r}")
        if centre != "floor" and site != "cross":
            raise LayoutError(
                f"{field}.centre: only cross attention has a length-ratio centre; self attention uses c(i) = i"
            )
        # Per-head offsets: the list is cycled over the heads of the group.
        head_offsets = [offsets[h % len(offsets)] for h in range(spec["num_heads"])]
        return {
            "kind": spec["kind"],
            "num_heads": spec["num_heads"],
            "offsets": head_offsets,
            "sigma": sigma,
            "window": window,
            "indexing": indexing,
            "centre": centre,
        }

    def __init__(self, spec: HardCodedSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        # Kernel radii per compute dtype, worked out here so that no forward calls Python-side numerics.
        self.gaussian_radii = {dtype: gaussian_radius(spec["sigma"], dtype) for dtype in FLOAT_DTYPES}

    def centres(self, query_positions: torch.Tensor) -> torch.Tensor:
        """Gaussian means per head and query: (heads, q_len)."""
        positions = query_positions.to(torch.float64)
        if self.site == "cross":
            positions = self.config.length_ratio * positions
            if self.spec["centre"] == "floor":
                positions = torch.floor(positions)
        offsets = python_constant(self.spec["offsets"], positions.device, torch.float64)
        return positions[None, :] + offsets[:, None]

    def weight_table(
        self, query_positions: torch.Tensor, key_positions: torch.Tensor, is_causal: bool
    ) -> torch.Tensor:
        """Input-agnostic weights (heads, q_len, k_len), cut (not renormalised) by the causal mask."""
        mu = self.centres(query_positions)[:, :, None]
        key_positions = key_positions.to(torch.float64)[None, None, :]
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

    def key_positions(self, context: AttentionContext, key_length: int) -> torch.Tensor:
        """Absolute positions of the keys. Self-attention keys end at the last query, whether the
        cache holds every earlier position or only the last few (see `decoding_lookback`), or are a static cache's
        slots from position 0."""
        positions = torch.arange(key_length, device=context.device)
        if self.site == "cross" or context.query_start is None:
            return positions
        return positions + (context.query_positions[-1] + 1 - key_length)

    def spec_key(self) -> tuple:
        spec = self.spec
        ratio = self.config.length_ratio if self.site == "cross" else None
        return (
            self.site == "cross",
            tuple(spec["offsets"]),
            spec["sigma"],
            spec["window"],
            spec["indexing"],
            spec["centre"],
            ratio,
        )

    def kernel_radius(self, dtype: torch.dtype) -> int:
        """How far from its centre a head puts non-negligible weight (see `gaussian_radius`)."""
        if self.spec["indexing"]:
            return 0
        if self.spec["window"] is not None:
            return self.spec["window"] // 2
        return self.gaussian_radii[dtype]

    def first_distance(self, dtype: torch.dtype) -> int:
        """The smallest key distance j - i that carries weight in self attention."""
        return min(self.spec["offsets"]) - self.kernel_radius(dtype)

    def kernel_reach(self, is_causal: bool, dtype: torch.dtype) -> tuple[int, int]:
        """(first, last): the key distances j - i of self attention's first and last kernel taps."""
        last = max(self.spec["offsets"]) + self.kernel_radius(dtype)
        return self.first_distance(dtype), min(last, 0) if is_causal else last

    def relative_kernel(self, is_causal: bool, dtype: torch.dtype, device) -> torch.Tensor:
        """Self attention as a convolution: the kernel (heads, taps) in `dtype`, where tap t weighs the key at
        distance j - i = first + t (`kernel_reach`)."""
        first, last = self.kernel_reach(is_causal, dtype)

        def build():
            # One query at position -first sees the taps as keys 0..last-first.
            query = torch.full((1,), -first, device=device)
            keys = torch.arange(last - first + 1, device=device)
            return self.weight_table(query, keys, is_causal)[:, 0].to(dtype)

        return memoised(("kernel", self.spec_key(), is_causal, first, last, dtype, device), build)

    def decoding_lookback(self, dtype: torch.dtype) -> int | None:
        """A cached decoder self-attention step on the fast path reads only the kernel's reach."""
        if not self.fast_path or self.site != "decoder_self":
            return None
        return max(0, -self.first_distance(dtype))

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # value: (batch, heads, k_len, d); query and key are None (no query/key projection)
        key_length = value.shape[-2]
        key_padding_mask = context.key_padding_mask
        if key_padding_mask is not None:
            # A decoder cache that dropped early positions holds only the last key_length keys.
            key_padding_mask = key_padding_mask[:, key_padding_mask.shape[1] - key_length :]
        static_positions = context.query_start is None  # a static cache: positions held on the device
        if output_attentions or not self.fast_path:
            return self.reference_forward(value, context, key_padding_mask, output_attentions)
        if static_positions and self.site != "cross" and context.query_length == 1:  # a static decoding step
            return self.window_step(value, key_padding_mask, context), None
        if static_positions and not is_exporting():
            return self.reference_forward(value, context, key_padding_mask, output_attentions)
        if context.padded_values_zeroed:
            key_padding_mask = None  # zeroed once, when the cross-attention cache was filled
        if is_exporting():
            return self.export_forward(value, key_padding_mask, context), None
        start, query_length = context.query_start, context.query_length
        if self.site == "cross":
            positions = context.query_positions
            table = memoised(
                ("cross", self.spec_key(), start, query_length, key_length, value.dtype, value.device),
                lambda: self.weight_table(positions, self.key_positions(context, key_length), False).to(value.dtype),
            )
            return apply_table(table, zero_padding(value, key_padding_mask)), None
        return self.self_attention(value, key_padding_mask, start, query_length, context.is_causal), None

    def self_attention(
        self,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        start: int,
        query_length: int,
        is_causal: bool,
    ) -> torch.Tensor:
        """value: (batch, heads, k_len, d), keys ending at the last query (start + query_length - 1)."""
        key_length, head_dim = value.shape[-2], value.shape[-1]
        first, last = self.kernel_reach(is_causal, value.dtype)
        taps = last - first + 1
        if query_length == key_length and key_length >= CONVOLUTION_MIN_LENGTH_PER_TAP * taps:
            kernel = self.relative_kernel(is_causal, value.dtype, value.device)
            channel_kernel = memoised(
                ("channels", self.spec_key(), is_causal, first, last, head_dim, value.dtype, value.device),
                lambda: kernel.repeat_interleave(head_dim, dim=0)[:, None, :],
            )
            return depthwise_convolution(zero_padding(value, key_padding_mask), channel_kernel, first)
        # Only keys within the kernel's reach of some query: [start + first, last query + last tap].
        first_key = start + query_length - key_length
        reach_start = max(first_key, start + first)
        reach_end = min(first_key + key_length, start + query_length + last)
        if reach_end <= reach_start:
            return value.new_zeros(*value.shape[:2], query_length, value.shape[-1])
        reach = slice(reach_start - first_key, reach_end - first_key)
        value = value[:, :, reach]
        if key_padding_mask is not None:
            value = zero_padding(value, key_padding_mask[:, reach])
        # The weights depend on j - i only: one banded table per (query offset in the reach, sizes).
        relative_start, reach_length = start - reach_start, reach_end - reach_start

        def build():
            queries = torch.arange(relative_start, relative_start + query_length, device=value.device)
            keys = torch.arange(reach_length, device=value.device)
            return self.weight_table(queries, keys, is_causal).to(value.dtype)

        key = (
            "self",
            self.spec_key(),
            is_causal,
            relative_start,
            query_length,
            reach_length,
            value.dtype,
            value.device,
        )
        return apply_table(memoised(key, build), value)

    def export_forward(
        self, value: torch.Tensor, key_padding_mask: torch.Tensor | None, context: AttentionContext
    ) -> torch.Tensor:
        """The fast path without branches on positions (see the module docstring): (batch, heads, q_len, d)."""
        positions = context.query_positions
        if self.site == "cross" or context.query_start is None:
            key_positions = self.key_positions(context, value.shape[-2])
            table = self.weight_table(positions, key_positions, context.is_causal and self.site != "cross")
            # A table per example: a broadcast product would make the exported program refuse a batch of one.
            table = cut_padding(table.to(value.dtype).repeat(value.shape[0], 1, 1, 1), key_padding_mask)
            return torch.matmul(table, value)
        return self.convolve(zero_padding(value, key_padding_mask), positions.shape[0], context.is_causal)

    def window_step(
        self, value: torch.Tensor, key_padding_mask: torch.Tensor | None, context: AttentionContext
    ) -> torch.Tensor:
        """One query at `context.query_positions` (1,) over a static cache's slots (value (batch, heads, slots, d)):
        the slots within the kernel's reach gathered, so a step reads a few slots whatever the cache's size (3x fewer
        than all 21 of a 20-token call at opus-mt size, where weighing every slot took a tenth of sh-x's beam-4 step).
        The same weights as the full table up to the kernel's cut (`gaussian_radius`). Which slots, and which of them
        count, is made once a step for all the layers of the same reach (`window_slots`): a layer selects its kernel's
        taps (a table per example, as exporting needs), gathers the slots and takes one product."""
        first, last = self.kernel_reach(context.is_causal, value.dtype)
        slots, kept = window_slots(context, first, last, value.shape[0], value.shape[-2], key_padding_mask)
        kernel = self.relative_kernel(context.is_causal, value.dtype, value.device)  # (heads, taps)
        table = kernel[:, None, :] * kept  # (batch, heads, 1, taps)
        return torch.matmul(table, value.index_select(2, slots))

    def convolve(self, value: torch.Tensor, query_length: int, is_causal: bool) -> torch.Tensor:
        """Self attention as a sum over the kernel's taps of shifted, zero-padded values (batch, heads, k_len, d),
        the keys ending at the last query: (batch, heads, q_len, d). (ONNX Runtime runs this faster than `conv1d`.)"""
        key_length = value.shape[-2]
        first, last = self.kernel_reach(is_causal, value.dtype)
        kernel = self.relative_kernel(is_causal, value.dtype, value.device)
        value = nn.functional.pad(value, (0, 0, max(0, -first), max(0, last)))
        # Padded index j holds key j - max(0, -first); query i (key index key_length - query_length + i) reads the
        # keys at distances first..last, padded indices from key_length - query_length + i + max(first, 0).
        start = key_length - query_length + max(first, 0)
        output = None
        for tap in range(kernel.shape[-1]):
            term = kernel[:, tap, None, None] * value.narrow(2, start + tap, query_length)
            output = term if output is None else output + term
        return output

    def reference_forward(self, value, context: AttentionContext, key_padding_mask, output_attentions):
        """The full (heads, q_len, k_len) weight table times the (padding-zeroed) values."""
        positions = context.query_positions
        key_positions = self.key_positions(context, value.shape[-2])
        weights = self.weight_table(positions, key_positions, context.is_causal).to(value.dtype)
        output = torch.matmul(weights[None], zero_padding(value, key_padding_mask))
        if not output_attentions:
            return output, None
        batch_weights = weights[None].expand(value.shape[0], -1, -1, -1)
        if key_padding_mask is not None:
            batch_weights = batch_weights * key_padding_mask[:, None, None, :].to(weights.dtype)
        return output, batch_weights
