"""The interface every attention family implements, and what it is given.

An attention sublayer (one site of one layer) is split into contiguous *head groups*; each group
is served by one family. The sublayer owns the value and output projections (and the query/key
projections for the families that score queries against keys); a family turns the per-head
queries, keys and values of its group into per-head outputs and weights. A family is a subclass of
`AttentionHeads` that declares what it is (its `kind`, paper, sites, options); `attention_registry.py` lists them.
"""

from dataclasses import dataclass, field
from typing import TypedDict

import torch
from torch import nn


SITES = ("encoder_self", "decoder_self", "cross")

# Upper bounds of what a layout may ask for: far beyond the papers' models, low enough that a typo fails at
# config time instead of as a huge allocation or an endless loop in the model.
MAX_HEADS = 1024
MAX_SIZE = 65536  # head and hidden sizes, learned position tables
MAX_DISTANCE = 4096  # relative positions: hard-coded offsets and windows, local mask distances
MAX_COMPONENTS = 64


class LayoutError(ValueError):
    """A bad attention layout (or config size it depends on); the message names the field and the valid choices."""


class GroupSpec(TypedDict):
    """One expanded head group, as `config.json` stores it: the family's `normalize_spec` adds its options."""

    kind: str
    num_heads: int


class LayerSpec(TypedDict):
    """One expanded layer of a site (an absent sublayer is `None`): its heads split into contiguous groups."""

    num_heads: int
    head_dim: int
    groups: list[GroupSpec]
    share_query_key_with: int | None  # index of the earlier layer whose query/key projections it uses


def is_integer(value) -> bool:
    """Whether `value` is an integer; JSON's true/false are not, although Python's bool is an int."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """Whether `value` is an integer or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(value, field: str, maximum: int | None = None) -> int:
    """`value` if it is an integer (not a bool) in [1, maximum]; else a `LayoutError` naming `field`."""
    if not is_integer(value) or value < 1 or (maximum is not None and value > maximum):
        limit = "" if maximum is None else f" <= {maximum}"
        raise LayoutError(f"{field}: expected a positive integer{limit}, got {value!r}")
    return value


def number_in(value, field: str, minimum: float, maximum: float) -> float:
    """`value` as a float if it is a number (not a bool) in [minimum, maximum]; else a `LayoutError` naming `field`.

    NaN and infinities fail the comparison; integers too large for a float are compared, never converted.
    """
    if not is_number(value) or not minimum <= value <= maximum:
        raise LayoutError(f"{field}: expected a number in [{minimum:g}, {maximum:g}], got {value!r}")
    return float(value)


def true_or_false(value, field: str) -> bool:
    """`value` if it is a bool; else a `LayoutError` naming `field`."""
    if not isinstance(value, bool):
        raise LayoutError(f"{field}: expected true or false, got {value!r}")
    return value


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attending is allowed, the dtype's minimum elsewhere (as transformers does: no NaN on rows without
    any allowed key). Two operators: the minimum everywhere, then 0 where allowed (no negation of the mask)."""
    return torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=allowed.device).masked_fill(
        allowed, 0.0
    )


@dataclass
class AttentionContext:
    """What a family may need besides queries, keys and values.

    Positions and lengths are Python ints that the model knows from shapes and the cache's length, never read from
    tensors, so that no forward waits for the device or breaks a compiled graph; with a static cache the position is
    held on the device instead (`query_start` None), so that every decoding step has the same shapes.

    key_padding_mask: (batch, key_len) bool, True at real tokens; None when the model was given no attention mask.
    query_start: the absolute position of the first query (the number of cached positions before it); None with a
        static cache (`cache.SimpleAttnStaticLayer`), whose position is a tensor: the queries are then at
        `query_positions` (given in `shared_tensors`), and self-attention keys are the cache's slots at positions
        0 .. max_cache_len - 1, those after the last query not written yet (the causal mask hides them); the key
        padding mask then covers those slots too.
    query_length: the number of queries.
    is_causal: whether a query may only see keys at positions <= its own.
    device: where the position tensors are made.
    stack_state: modules shared by all layers of one stack, by `AttentionHeads.stack_state_key`
        (see `build_stack_state`).
    decoding_state: while decoding with a cache, this sublayer's dict of batch-first tensors kept
        from one step to the next (beam search reorders them); None without a cache. A group
        stores under its own `state_name`. An exported decoder step (`hf_simple_attn.deploy.export`) starts
        every state at zeros and needs its shape not to depend on the lengths.
    shared_tensors: tensors the layers of one forward share (masks, positions), made once by `shared`; keyed by
        Python values only, and kept by the copies `dataclasses.replace` makes for each cached sublayer.
    padded_values_zeroed: whether the values are zero at the padded keys already: cross attention's cached values of
        a sublayer whose groups all take them so (`AttentionHeads.takes_zeroed_padding`), zeroed once when the cache
        was filled.
    """

    key_padding_mask: torch.Tensor | None
    query_start: int | None
    query_length: int
    is_causal: bool
    device: torch.device | str = "cpu"
    stack_state: dict | None = None
    decoding_state: dict | None = None
    shared_tensors: dict = field(default_factory=dict)
    padded_values_zeroed: bool = False

    @property
    def query_positions(self) -> torch.Tensor:
        """(query_len,) long: query_start, query_start + 1, ..."""
        return self.shared(
            ("positions",),
            lambda: torch.arange(self.query_start, self.query_start + self.query_length, device=self.device),
        )

    def shared(self, key: tuple, build) -> torch.Tensor:
        """`build()` once per key for all the layers that get this context (one forward of a stack). A length that
        `torch.export` traces symbolically (a `SymInt`, unhashable) enters the key as its symbol's name."""
        key = tuple(repr(part) if isinstance(part, torch.SymInt) else part for part in key)
        tensor = self.shared_tensors.get(key)
        if tensor is None:
            tensor = self.shared_tensors[key] = build()
        return tensor

    def cache_update_kwargs(self) -> dict:
        """Keywords of a self-attention cache layer's `update`: with a static cache, the step's positions, made once for
        all layers (`SimpleAttnStaticLayer.update` writes there); none for a growing cache."""
        return {"cache_position": self.query_positions} if self.query_start is None else {}

    def sees_every_key(self) -> bool:
        """Whether every query may see every key, so that no mask is needed: no attention mask was given and the
        queries are not causal, or there is a single (last) query, as in a cached decoding step (not with a static
        cache, whose slots after the query are not written yet)."""
        if self.key_padding_mask is not None:
            return False
        return not self.is_causal or (self.query_length == 1 and self.query_start is not None)

    def uses_causal_kernel(self, key_length: int) -> bool:
        """Whether the queries are every key's position of an unpadded causal sequence, so that a causal kernel
        (SDPA's `is_causal`) needs no mask tensor."""
        return (
            self.key_padding_mask is None
            and self.is_causal
            and self.query_start is not None
            and self.query_length == key_length
        )

    def attention_bias(self, key_length: int, dtype: torch.dtype) -> torch.Tensor:
        """`allowed_keys` as an `additive_mask`."""
        return self.shared(("bias", key_length, dtype), lambda: additive_mask(self.allowed_keys(key_length), dtype))

    def allowed_keys(self, key_length: int) -> torch.Tensor:
        """Bool mask (batch or 1, 1, query_len, key_len): which keys each query may attend to. Keys start at position
        0, or end at the last query when there are fewer (a cache that kept only its last positions)."""
        return self.shared(("allowed", key_length), lambda: self.build_allowed_keys(key_length))

    def build_allowed_keys(self, key_length: int) -> torch.Tensor:
        allowed = None
        if self.is_causal:
            first_key = 0 if self.query_start is None else max(0, self.query_start + self.query_length - key_length)
            key_positions = torch.arange(first_key, first_key + key_length, device=self.device)
            allowed = (key_positions[None, :] <= self.query_positions[:, None])[None, None]
        if self.key_padding_mask is not None:
            # A static cache's slots start at position 0 (and may be fewer than the mask's: `recurrent`).
            keys = slice(None, key_length) if self.query_start is None else slice(-key_length, None)
            padding = self.key_padding_mask[:, None, None, keys]
            allowed = padding if allowed is None else allowed & padding
        if allowed is None:
            allowed = torch.ones(1, 1, self.query_length, key_length, dtype=torch.bool, device=self.device)
        return allowed


class AttentionStackState(nn.Module):
    """Base class of what a family shares across the layers of one stack (`AttentionHeads.build_stack_state`).

    The stack calls `begin_forward` before its layers run and `end_forward` after them (`stack.stack_forward`),
    so that a state may share work between the layers of one forward and drop it afterwards.
    """

    def init_attention_weights(self) -> None:
        """Initialise raw `nn.Parameter`s and buffers (see `AttentionHeads.init_attention_weights`)."""

    def begin_forward(self, checkpointing: bool) -> None:
        """A forward of the stack's layers starts. checkpointing: whether gradient checkpointing reruns some layer
        in backward; such a layer must recompute everything it used, so nothing may be shared with it."""

    def end_forward(self) -> None:
        """The forward of the stack's layers ended (also when a layer raised): drop what was kept for it."""


class AttentionHeads(nn.Module):
    """Base class of a family: computes the outputs of one group of heads.

    Subclasses declare what the family is (`kind`, `summary`, `paper`, `citation`, `limitations`) and what it needs (`sites`,
    `uses_query_key`, `option_names`), and implement `normalize_spec` and `forward`; the other methods have defaults
    that fit a family without stack state, cached decoding state, raw parameters or a separate fast path.
    `HeadGroups` is the only builder of groups.

    spec: the group's normalised spec; layer_idx: the layer's index in its stack; group_index:
    the group's index in its layer; family_layer_idx: how many earlier layers of the site have a
    group of this family (RAN's k-th layer of a stack has k - 1).
    """

    # The name layouts give the family (`attention_registry.register_attention` files it under this name).
    kind: str = ""
    # What one head computes, a line for the families tables of the README and the docs' home page.
    summary: str = ""
    # The paper it comes from, as the preset catalogue and the docs name it, and its BibTeX, which the model cards
    # and the family's docs page cite ("" for none).
    paper: str = ""
    citation: str = ""
    # What the family gives up, one clause for the model cards' limitations ("" for nothing).
    limitations: str = ""
    sites: tuple[str, ...] = SITES
    uses_query_key: bool = False
    option_names: tuple[str, ...] = ()
    # Families with a fast path run it when True, their reference path when False (the path used for the
    # weights); `attention.set_attention_fast_paths` switches every group of a model.
    fast_path: bool = True
    # Whether the family gives padded keys no weight and a query without any real key a zero output, so that its
    # values may come zeroed at the padded keys: cross attention then caches them zeroed, once per generate instead
    # of once per step (`AttentionContext.padded_values_zeroed` tells the family).
    takes_zeroed_padding: bool = False

    def __init__(
        self,
        spec: GroupSpec,
        config,
        site: str,
        layer_idx: int,
        head_dim: int,
        *,
        group_index: int = 0,
        family_layer_idx: int = 0,
    ):
        super().__init__()
        self.spec = spec
        self.config = config
        self.site = site
        self.layer_idx = layer_idx
        self.family_layer_idx = family_layer_idx
        self.num_heads = spec["num_heads"]
        self.head_dim = head_dim
        self.state_name = f"group{group_index}"  # key of this group's entries in `AttentionContext.decoding_state`

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> GroupSpec:
        """Validate a group spec and fill in defaults; raise `LayoutError` naming `field` on bad input.

        `spec` has `kind` and `num_heads`; the default accepts no further options.
        """
        unknown = sorted(set(spec) - {"kind", "num_heads", *cls.option_names})
        if unknown:
            raise LayoutError(
                f"{field}: unknown option(s) {unknown} for kind {cls.kind!r}; valid options: {sorted(cls.option_names)}"
            )
        if site not in cls.sites:
            raise LayoutError(
                f"{field}: kind {cls.kind!r} cannot be used at site {site!r}; valid sites: {list(cls.sites)}"
            )
        return dict(spec)

    @classmethod
    def num_query_key_slots(cls, spec: GroupSpec) -> int:
        """How many per-head query projections this group needs from the sublayer, each with a key projection of its
        own where `scores_keys`."""
        return spec["num_heads"] if cls.uses_query_key else 0

    @classmethod
    def scores_keys(cls, spec: GroupSpec) -> bool:
        """Whether the group scores its queries against keys. A group that reads its queries alone gets no key
        projections: the sublayer builds no parameter that nothing reads."""
        return cls.uses_query_key

    @classmethod
    def validate_site(cls, layer_specs: list[LayerSpec | None], site: str) -> None:
        """Check rules that span the layers of a site (called at config time with the expanded specs)."""

    @classmethod
    def family_layers(cls, layer_specs: list[LayerSpec | None]) -> list[int]:
        """Indices of the layers of a site (its expanded specs) that have a group of this family."""
        return [
            index
            for index, spec in enumerate(layer_specs)
            if spec is not None and any(group["kind"] == cls.kind for group in spec["groups"])
        ]

    @classmethod
    def stack_state_key(cls, site: str) -> str:
        """The key of this family's module in `AttentionContext.stack_state` (and the state dict) for `site`."""
        return f"{site}_{cls.kind}"

    @classmethod
    def build_stack_state(cls, config, site: str, layer_specs: list[LayerSpec | None]) -> AttentionStackState | None:
        """A module shared by all layers of one stack (e.g. RAN's initial matrices), or None."""
        return None

    @classmethod
    def independent_queries(cls, spec: GroupSpec) -> bool:
        """Whether the group computes each query's output from that query alone (its vector and its position, with
        the keys, values and padding mask), never from the other queries nor from a decoding state: the queries of
        several rows at one position over the same keys may then run as one row's queries (the ONNX engine's beam
        search runs a sentence's beams so, over its cross-attention keys and values once: `deploy/export.py`)."""
        return False

    @classmethod
    def rolls_back(cls, spec: GroupSpec) -> str | None:
        """Why a decoding cache of this group cannot be cropped (assisted and prompt-lookup decoding roll rejected
        tokens back), or None when it can: keys and values alone are cropped, per-step state is not."""
        return None

    def decoding_lookback(self, dtype: torch.dtype) -> int | None:
        """How many earlier positions a cached decoding step of this group reads, so that the cache may drop
        older ones; None when it reads the whole prefix."""
        return None

    def init_attention_weights(self) -> None:
        """Initialise the raw `nn.Parameter`s and buffers of the group (`nn.Linear` and the like are initialised
        by the model). The models' `_init_weights` call it: `from_pretrained` builds on the meta device and
        initialises missing tensors only through that hook."""

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query/key: (batch, slots, q_len|k_len, head_dim) or None; value: (batch, heads, k_len, head_dim).

        Returns the output (batch, heads, q_len, head_dim) and, when asked, the weights
        (batch, heads, q_len, k_len) that produced it.
        """
        raise NotImplementedError
