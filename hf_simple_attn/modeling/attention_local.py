"""Local attention: fixed masks on dot-product heads (Pande et al. 2020, On the Importance of Local
Information in Transformer Based Models).

Each head h multiplies a fixed binary mask onto its softmax output (the paper's Eq. 9):

    α̃_h = mask_h ⊙ softmax(Q_h K_hᵀ/√d + padding/causal mask)

not renormalised, so a head keeps the probabilities computed over all tokens at its allowed
positions only. Masks, with i the query and j the key position: `prev-k` (j = i - k), `next-k`
(j = i + k), `band-k` (|i - j| <= k), `identity` (j = i) and `global` (no mask: a standard head).
(The paper's sentence "1 if j - i = k" for prev-k contradicts its name; SPEC.md's reading is used.)

Heads may share one query/key projection set ("sharing the same α_h is equivalent to sharing
W_q, W_k"): heads that share a set share the softmax and differ only by their masks, while
values and the output projection stay per head and per layer. Sharing across layers is the
site-level `tie_query_key` of the layout.

Options:
- `masks`: one mask name or a list, cycled over the group's heads (default: the paper's "all 7
  masks", identity used twice).
- `query_key_sets`: number of W_q/W_k sets; the heads are split into that many contiguous groups
  of equal size, the first ones one head larger when the count does not divide, and never more
  sets than heads (default: one set per head, no sharing). `heads_per_query_key_set` gives the group size instead (2 = the paper's
  configuration g, pairs of heads; with an odd head count the last set has one head). The
  normalized spec stores `query_key_sets` only.
- `renormalize`: mask before the softmax (softmax over the allowed positions only; a row without
  any allowed key gets zero weights) instead of Eq. 9.

In decoder self-attention the masks combine with causality: `next-k` heads see no key at all and
their weights (and outputs) are zero; `band-k` heads keep their past half.

The fast path (the default; the reference path runs when the weights are requested, and while exporting) runs
both forms through one `scaled_dot_product_attention` call, so they keep its fused kernel (`fused`: Eq. 9 as
attention over the keys twice, the second time with zero values). Its additive mask is each head's pattern, which
depends on the positions and lengths only and is kept across forwards (`fused_pattern`), with the padded keys set
in one `where` per forward. With `renormalize` and no `global` head, long sequences never form the (q_len, k_len)
scores: each query is scored against the keys at the distances its heads may see (the union of their bands,
`taps`), one shifted elementwise product per distance, and the values are summed the same way: O(n·taps) time and
memory (`banded`). With a static cache (positions held on the device) the pattern is made in each step from them
(`fused`, never `banded`, which shifts by Python positions).
"""

import re

import torch
from torch import nn

from .attention_heads import (
    MAX_DISTANCE,
    MAX_HEADS,
    AttentionContext,
    AttentionHeads,
    GroupSpec,
    LayoutError,
    additive_mask,
    positive_int,
    true_or_false,
)
from .attention_ops import (
    attention_dropout,
    is_exporting,
    python_constant,
    scaled_scores,
)
from .memo import memo_for


# The paper's "all 7 masks, identity used twice" for 8 heads, ordered so that fewer heads (a prefix)
# still mix previous, next and band masks.
ALL_SEVEN_MASKS = ["identity", "prev-1", "next-1", "band-1", "prev-2", "next-2", "band-2", "identity"]
MASK_PATTERN = re.compile(r"(prev|next|band)-(\d+)|identity|global")
# The renormalised form runs banded (O(n·taps)) from this many keys per distance its heads see, in one fused
# attention kernel below.
BANDED_MIN_KEYS_PER_TAP = 32
VALID_MASKS = f"'prev-<k>', 'next-<k>', 'band-<k>' (k an integer in [1, {MAX_DISTANCE}]), 'identity', 'global'"
# `fused`'s additive mask, in fractions of the dtype's minimum: 0 where a query sees a key, HIDDEN where it does not
# (and at a padded key of the first block), SECOND_CHOICE at a padded key of Eq. 9's second block and at the
# renormalised form's zero key. Next to a seen key both weigh exp(-huge) = 0 exactly, as the reference's minimum
# does; a query without any seen key weighs only the SECOND_CHOICE keys, whose values are zero. Scores plus these
# stay finite.
HIDDEN = 1 / 2
SECOND_CHOICE = 1 / 4


class LocalSpec(GroupSpec):
    """A `local` group as `config.json` stores it."""

    masks: list[str]  # one per head
    query_key_sets: int
    renormalize: bool


def parse_mask(name: str) -> tuple[str, int]:
    """'band-2' -> ('band', 2); 'identity' -> ('identity', 0); 'global' -> ('global', 0)."""
    match = MASK_PATTERN.fullmatch(name)
    if match.group(1) is None:
        return name, 0
    return match.group(1), int(match.group(2))


def normalize_mask(name, field: str) -> str:
    match = MASK_PATTERN.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise LayoutError(f"{field}: unknown mask {name!r}; valid masks: {VALID_MASKS}")
    if match.group(1) is None:
        return name
    distance = int(match.group(2))
    if not 1 <= distance <= MAX_DISTANCE:
        raise LayoutError(
            f"{field}: the distance k of {name!r} must be an integer in [1, {MAX_DISTANCE}]; "
            f"valid masks: {VALID_MASKS}"
        )
    return f"{match.group(1)}-{distance}"


def local_masks(mask_names: list[str], query_positions: torch.Tensor, key_length: int) -> torch.Tensor:
    """Per-head binary masks (heads, q_len, k_len), True where head h lets query i see key j."""
    key_positions = torch.arange(key_length, device=query_positions.device)
    offset = key_positions[None, :] - query_positions[:, None]  # (q_len, k_len): j - i
    masks = []
    for name in mask_names:
        kind, distance = parse_mask(name)
        if kind == "global":
            masks.append(torch.ones_like(offset, dtype=torch.bool))
        elif kind == "identity":
            masks.append(offset == 0)
        elif kind == "prev":
            masks.append(offset == -distance)
        elif kind == "next":
            masks.append(offset == distance)
        else:
            masks.append(offset.abs() <= distance)
    return torch.stack(masks)


def fused_pattern(
    mask_names: list[str], renormalize: bool, positions: AttentionContext, key_length: int, dtype: torch.dtype
) -> torch.Tensor:
    """`fused`'s additive mask before padding: (1, heads, q_len, 2, k_len) for Eq. 9 (the two key blocks),
    (1, heads, q_len, k_len + 1) renormalised (the keys, then the zero key). It depends on the masks, the positions
    and the lengths only (`positions`: a context without padding), so it is kept across forwards.

    Eq. 9: the first block shows each head's kept keys, the second the keys the softmax sums but the head cuts; a
    query without any allowed key sees the whole second block (never an empty softmax), so its output is zero.
    Renormalised: the kept keys, and the zero key at SECOND_CHOICE, which only a query keeping no key weighs.
    """
    allowed = positions.build_allowed_keys(key_length)[0, 0]  # (q_len, k_len): causal, or every key
    local = local_masks(mask_names, positions.query_positions, key_length)  # (heads, q_len, k_len)
    seen = allowed & local
    if not renormalize:
        rest = (allowed & ~local) | ~allowed.any(dim=-1, keepdim=True)
        seen = torch.stack([seen, rest], dim=-2)  # (heads, q_len, 2, k_len)
    minimum = torch.finfo(dtype).min
    pattern = torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill(~seen, minimum * HIDDEN)
    if renormalize:
        zero_key = pattern.new_full((*pattern.shape[:-1], 1), minimum * SECOND_CHOICE)
        pattern = torch.cat([pattern, zero_key], dim=-1)
    return pattern[None]


def mask_distances(name: str) -> range | None:
    """The key distances j - i a mask lets through, or None for `global` (every distance)."""
    kind, distance = parse_mask(name)
    if kind == "global":
        return None
    if kind == "identity":
        return range(0, 1)
    if kind == "prev":
        return range(-distance, -distance + 1)
    if kind == "next":
        return range(distance, distance + 1)
    return range(-distance, distance + 1)


def shifted_keys(states: torch.Tensor, first_query: int, query_length: int, distance: int) -> torch.Tensor:
    """(batch, heads, q_len, d): for query i (at position first_query + i) the state at position
    first_query + i + distance of `states` (batch, heads, k_len, d), zero outside the keys."""
    key_length = states.shape[-2]
    start = first_query + distance
    inside_start, inside_end = max(start, 0), min(start + query_length, key_length)
    if inside_start == start and inside_end == start + query_length:
        return states[:, :, start : start + query_length]
    shifted = states.new_zeros(*states.shape[:2], query_length, states.shape[-1])
    if inside_end > inside_start:
        shifted[:, :, inside_start - start : inside_end - start] = states[:, :, inside_start:inside_end]
    return shifted


class LocalMaskHeads(AttentionHeads):
    """Dot-product heads whose weights are cut to a fixed local pattern per head (Eq. 9)."""

    kind = "local"
    summary = "dot-product heads cut to a fixed mask (`prev-k`, `next-k`, `band-k`, `identity`)"
    paper = (
        "Pande, Budhraja, Nema, Kumar and Khapra 2020, On the Importance of Local Information in Transformer Based "
        "Models"
    )
    citation = """@misc{pande-etal-2020-importance,
  title = {On the Importance of Local Information in Transformer Based Models},
  author = {Pande, Madhura and Budhraja, Aakriti and Nema, Preksha and Kumar, Pratyush and Khapra, Mitesh M.},
  year = {2020},
  eprint = {2008.05828},
  archivePrefix = {arXiv}
}"""
    limitations = "local heads attend only within their fixed masks"

    sites = ("encoder_self", "decoder_self")
    uses_query_key = True
    option_names = ("masks", "query_key_sets", "heads_per_query_key_set", "renormalize")

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> LocalSpec:
        spec = super().normalize_spec(spec, site, field)
        num_heads = spec["num_heads"]
        masks = spec.get("masks", ALL_SEVEN_MASKS)
        if isinstance(masks, str):
            masks = [masks]
        if not isinstance(masks, (list, tuple)) or not masks:
            raise LayoutError(
                f"{field}.masks: expected a mask name or a non-empty list of them; valid masks: {VALID_MASKS}"
            )
        masks = [normalize_mask(name, f"{field}.masks[{index}]") for index, name in enumerate(masks)]

        if "query_key_sets" in spec and "heads_per_query_key_set" in spec:
            raise LayoutError(f"{field}: give either 'query_key_sets' or 'heads_per_query_key_set', not both")
        if "heads_per_query_key_set" in spec:
            set_size = positive_int(spec["heads_per_query_key_set"], f"{field}.heads_per_query_key_set", MAX_HEADS)
            query_key_sets = -(-num_heads // set_size)
        else:
            # More sets than heads degenerates to one set per head, so presets scale down to one head.
            query_key_sets = positive_int(spec.get("query_key_sets", num_heads), f"{field}.query_key_sets", MAX_HEADS)
            query_key_sets = min(query_key_sets, num_heads)

        return {
            "kind": spec["kind"],
            "num_heads": num_heads,
            "masks": [masks[h % len(masks)] for h in range(num_heads)],
            "query_key_sets": query_key_sets,
            "renormalize": true_or_false(spec.get("renormalize", False), f"{field}.renormalize"),
        }

    @classmethod
    def num_query_key_slots(cls, spec: LocalSpec) -> int:
        return spec["query_key_sets"]

    def __init__(self, spec: LocalSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        sets = spec["query_key_sets"]
        # Contiguous sets as equal as possible, the first ones larger: 5 heads in 3 sets -> 2, 2, 1.
        self.heads_per_set = [self.num_heads // sets + (index < self.num_heads % sets) for index in range(sets)]
        self.set_of_head = [index for index, count in enumerate(self.heads_per_set) for _ in range(count)]
        # `fused` expands sets of one size as views; sets of unequal sizes are gathered.
        self.equal_sets = len(set(self.heads_per_set)) == 1
        # The banded path: the distances any head sees (`taps`) and which head sees which.
        head_distances = [mask_distances(name) for name in spec["masks"]]
        self.taps = None
        if spec["renormalize"] and None not in head_distances:
            self.taps = sorted({d for distances in head_distances for d in distances})
            self.head_taps = [[tap in distances for tap in self.taps] for distances in head_distances]

    def expand_sets_to_heads(self, per_set: torch.Tensor) -> torch.Tensor:
        """(batch, sets, ...) -> (batch, heads, ...), each set repeated for its heads."""
        if len(self.heads_per_set) == self.num_heads:
            return per_set
        return per_set.index_select(1, python_constant(self.set_of_head, per_set.device))

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, sets, q_len, d); key: (batch, sets, k_len, d); value: (batch, heads, k_len, d)
        key_length = key.shape[-2]
        if self.fast_path and not output_attentions and not is_exporting():
            banded = self.taps is not None and key_length >= BANDED_MIN_KEYS_PER_TAP * len(self.taps)
            if banded and context.query_start is not None:
                return self.banded(query, key, value, context), None
            return self.fused(query, key, value, context), None
        allowed = context.allowed_keys(key_length)  # (batch or 1, 1, q_len, k_len)
        keep = allowed & self.local_masks(context, key_length)  # (batch or 1, heads, q_len, k_len)
        scores = scaled_scores(query, key)  # (batch, sets, q_len, k_len)
        if self.spec["renormalize"]:
            scores = self.expand_sets_to_heads(scores)
            weights = torch.softmax(scores + additive_mask(keep, scores.dtype), dim=-1)
        else:
            # Eq. 9: one softmax per query/key set, shared by its heads, then each head's mask.
            weights = torch.softmax(scores + context.attention_bias(key_length, scores.dtype), dim=-1)
            weights = self.expand_sets_to_heads(weights)
        # Exact zeros outside each head's pattern; also empties rows with no allowed key at all.
        weights = attention_dropout(weights * keep, self.config.attention_dropout, self.training)
        output = torch.matmul(weights, value)  # (batch, heads, q_len, d)
        return output, weights if output_attentions else None

    def local_masks(self, context: AttentionContext, key_length: int) -> torch.Tensor:
        """(1, heads, q_len, k_len) bool: each head's pattern, made once a forward for the layers with these masks."""
        masks = tuple(self.spec["masks"])
        return context.shared(
            ("local", masks, key_length), lambda: local_masks(list(masks), context.query_positions, key_length)[None]
        )

    def fused(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        """Both forms in one `scaled_dot_product_attention` call (its fused kernel): (batch, heads, q_len, d).

        Each query attends over the keys twice: first to the keys its head's pattern keeps, with their values, then
        to a second block of keys whose values are zero, so that it adds to the softmax's sum and nothing to the
        output. Eq. 9 puts the other allowed keys there: the softmax's sum is then over every allowed key while the
        output sums the kept ones only, mask ⊙ softmax(QKᵀ/√d). The renormalised form puts a single zero key there,
        weighed only by a query that keeps no key at all, whose output is then zero as in the reference.
        """
        query, keys, values = self.fused_inputs(query, key, value)
        key_length = key.shape[-2]
        # Made once a forward: SDPA would turn a boolean mask into an additive one at every call.
        mask = context.shared(
            ("local-sdpa", tuple(self.spec["masks"]), self.spec["renormalize"], key_length, query.dtype),
            lambda: self.fused_mask(context, key_length, query.dtype),
        )
        dropout = self.config.attention_dropout if self.training else 0.0
        return nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, dropout_p=dropout)

    def fused_inputs(self, query, key, value) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`fused`'s query (batch, heads, q_len, d), keys and values (batch, heads, k_len + second block, d).

        One `cat` makes the key blocks and [value, zeros], and for sets of several heads each head's copy of its
        set's query and key (sets of unequal sizes are gathered first). It joins them positions first, as the
        projections lay them out, so that the gradients reach the projections in their layout.
        """
        batch_size, num_heads, key_length, head_dim = value.shape
        if not self.equal_sets:
            query, key = self.expand_sets_to_heads(query), self.expand_sets_to_heads(key)
        num_sets = key.shape[1]
        set_size = num_heads // num_sets
        heads_shape = (num_sets, set_size) if set_size > 1 else (num_heads,)

        def positions_first(states: torch.Tensor) -> torch.Tensor:
            """(batch, sets, len, d) -> (batch, len, *heads_shape, d): a view, each head of a set reading its set's."""
            states = states.transpose(1, 2)
            return states[:, :, :, None].expand(-1, -1, -1, set_size, -1) if set_size > 1 else states

        zero = python_constant([0.0], value.device, value.dtype)
        key = positions_first(key)
        second_keys = zero.expand(batch_size, 1, *heads_shape, head_dim) if self.spec["renormalize"] else key
        second_length = second_keys.shape[1]
        blocks = [
            key,
            second_keys,
            value.transpose(1, 2).unflatten(2, heads_shape),
            zero.expand(batch_size, second_length, *heads_shape, head_dim),
        ]
        sizes = [key_length + second_length] * 2
        if set_size > 1:
            blocks.insert(0, positions_first(query))
            sizes.insert(0, query.shape[-2])
        joined = torch.cat(blocks, dim=1).flatten(2, -2)  # (batch, [q_len +] 2·(k_len + second), heads, d)
        parts = [part.transpose(1, 2) for part in joined.split(sizes, dim=1)]  # (batch, heads, len, d)
        if set_size > 1:
            query = parts.pop(0)
        keys, values = parts
        return query, keys, values

    def fused_mask(self, context: AttentionContext, key_length: int, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask of `fused`: (batch or 1, heads, q_len, 2·k_len) for Eq. 9, (..., k_len + 1)
        renormalised: the kept pattern (`fused_pattern`) with the padded keys set to HIDDEN, and to SECOND_CHOICE in
        Eq. 9's second block, so that a query whose keys are all padding weighs that block's zero values only."""
        pattern = self.kept_pattern(context, key_length, dtype)
        if context.key_padding_mask is not None:
            real = context.key_padding_mask[:, -key_length:]  # (batch, k_len)
            minimum = torch.finfo(dtype).min
            if self.spec["renormalize"]:
                real = nn.functional.pad(real, (0, 1), value=True)[:, None, None]  # the zero key is never padding
                padded = python_constant([minimum * HIDDEN], real.device, dtype)
            else:
                real = real[:, None, None, None]  # (batch, 1, 1, 1, k_len)
                padded = python_constant([[minimum * HIDDEN], [minimum * SECOND_CHOICE]], real.device, dtype)
            pattern = torch.where(real, pattern, padded)
        return pattern if self.spec["renormalize"] else pattern.flatten(-2)

    def kept_pattern(self, context: AttentionContext, key_length: int, dtype: torch.dtype) -> torch.Tensor:
        """`fused_pattern` of this group's masks at the context's positions, kept across forwards in the
        `local_patterns` memo; built in the graph while compiling, and in each forward at positions held on the
        device."""
        masks, renormalize = self.spec["masks"], self.spec["renormalize"]
        positions = AttentionContext(
            None, context.query_start, context.query_length, context.is_causal, context.device
        )

        def build():
            return fused_pattern(masks, renormalize, positions, key_length, dtype)

        if context.query_start is None:
            positions.shared_tensors[("positions",)] = context.query_positions
            return build()

        memo_key = (
            tuple(masks),
            renormalize,
            context.query_start,
            context.query_length,
            key_length,
            context.is_causal,
            str(context.device),
            dtype,
        )
        return memo_for("local_patterns").kept(memo_key, build)

    def banded(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        """Renormalised weights over each head's band only (the fast path): (batch, heads, q_len, d)."""
        first_query, query_length, key_length = context.query_start, query.shape[-2], key.shape[-2]
        taps = python_constant(self.taps, query.device)
        # Scores against the key at each distance: (batch, sets, q_len, taps), then per head.
        scores = torch.stack(
            [(query * shifted_keys(key, first_query, query_length, d)).sum(-1) for d in self.taps], dim=-1
        )
        scores = self.expand_sets_to_heads(scores * self.head_dim**-0.5)  # (batch, heads, q_len, taps)
        # The (query, tap) pairs a head may use: its mask, inside the sequence, causal, not padding.
        key_positions = context.query_positions[:, None] + taps[None, :]  # (q_len, taps)
        keep = (key_positions >= 0) & (key_positions < key_length)
        if context.is_causal:
            keep = keep & (taps[None, :] <= 0)
        keep = keep[None, None] & python_constant(self.head_taps, query.device)[None, :, None, :]
        if context.key_padding_mask is not None:
            real = context.key_padding_mask.to(torch.int8)[:, None, :, None]  # (batch, 1, k_len, 1)
            real = torch.stack([shifted_keys(real, first_query, query_length, d)[..., 0] for d in self.taps], -1)
            keep = keep & real.bool()  # (batch, heads, q_len, taps)
        # As the reference: softmax over the kept keys, and rows without any kept key all zero.
        weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1) * keep
        weights = attention_dropout(weights, self.config.attention_dropout, self.training)
        output = None
        for index, distance in enumerate(self.taps):
            term = weights[..., index, None] * shifted_keys(value, first_query, query_length, distance)
            output = term if output is None else output + term
        return output
