"""The registry of attention families and the interface every family implements.

An attention sublayer (one site of one layer) is split into contiguous *head groups*; each group
is served by one family. The sublayer owns the value and output projections (and the query/key
projections for the families that score queries against keys); a family turns the per-head
queries, keys and values of its group into per-head outputs and weights.
"""

from dataclasses import dataclass

import torch
from torch import nn


SITES = ("encoder_self", "decoder_self", "cross")

ATTENTION_FAMILIES: dict[str, type["AttentionHeads"]] = {}

# Upper bounds of what a layout may ask for: far beyond the papers' models, low enough that a typo fails at
# config time instead of as a huge allocation or an endless loop in the model.
MAX_HEADS = 1024
MAX_SIZE = 65536  # head and hidden sizes, learned position tables
MAX_DISTANCE = 4096  # relative positions: hard-coded offsets and windows, local mask distances
MAX_COMPONENTS = 64


class LayoutError(ValueError):
    """A bad attention layout (or config size it depends on); the message names the field and the valid choices."""


def positive_int(value, field: str, maximum: int | None = None) -> int:
    """`value` if it is an integer (not a bool) in [1, maximum]; else a `LayoutError` naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (maximum is not None and value > maximum):
        limit = "" if maximum is None else f" <= {maximum}"
        raise LayoutError(f"{field}: expected a positive integer{limit}, got {value!r}")
    return value


def number_in(value, field: str, minimum: float, maximum: float) -> float:
    """`value` as a float if it is a number (not a bool) in [minimum, maximum]; else a `LayoutError` naming `field`.

    NaN and infinities fail the comparison; integers too large for a float are compared, never converted.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        raise LayoutError(f"{field}: expected a number in [{minimum:g}, {maximum:g}], got {value!r}")
    return float(value)


def register_attention(name: str):
    """Class decorator that makes a family available to layouts under `name`."""

    def decorator(cls):
        if name in ATTENTION_FAMILIES:
            raise ValueError(f"attention family {name!r} is registered twice")
        cls.kind = name
        ATTENTION_FAMILIES[name] = cls
        return cls

    return decorator


def get_attention_family(kind: str, field: str = "kind") -> type["AttentionHeads"]:
    if not isinstance(kind, str) or kind not in ATTENTION_FAMILIES:
        raise LayoutError(f"{field}: unknown attention kind {kind!r}; valid kinds: {sorted(ATTENTION_FAMILIES)} or 'none'")
    return ATTENTION_FAMILIES[kind]


@dataclass
class AttentionContext:
    """What a family may need besides queries, keys and values.

    key_padding_mask: (batch, key_len) bool, True at real tokens; None when nothing is padded.
    query_positions: (query_len,) long, absolute positions of the queries (cache offset included).
    is_causal: whether a query may only see keys at positions <= its own.
    stack_state: modules shared by all layers of one stack, by family (see `build_stack_state`).
    decoding_state: while decoding with a cache, this sublayer's dict of batch-first tensors kept
        from one step to the next (beam search reorders them); None without a cache. A group
        stores under its own `state_name`.
    """

    key_padding_mask: torch.Tensor | None
    query_positions: torch.Tensor
    is_causal: bool
    stack_state: dict | None = None
    decoding_state: dict | None = None

    def allowed_keys(self, key_length: int) -> torch.Tensor:
        """Bool mask (batch or 1, 1, query_len, key_len): which keys each query may attend to."""
        device = self.query_positions.device
        allowed = torch.ones(1, 1, self.query_positions.shape[0], key_length, dtype=torch.bool, device=device)
        if self.is_causal:
            key_positions = torch.arange(key_length, device=device)
            allowed = allowed & (key_positions[None, :] <= self.query_positions[:, None])[None, None]
        if self.key_padding_mask is not None:
            allowed = allowed & self.key_padding_mask[:, None, None, :]
        return allowed


class AttentionHeads(nn.Module):
    """Base class of a family: computes the outputs of one group of heads.

    Subclasses set `sites` (where the family may be used), `uses_query_key` (whether the group
    needs query/key projections), `option_names`, and implement `normalize_spec` and `forward`.
    A module with raw `nn.Parameter`s or buffers (here or in a stack state) defines
    `init_attention_weights()`, which the model's `_init_weights` calls: `from_pretrained`
    builds on the meta device and initialises missing tensors only through that hook.
    """

    kind: str = ""
    state_name: str = ""  # key of this group's entries in `AttentionContext.decoding_state`
    sites: tuple[str, ...] = SITES
    uses_query_key: bool = False
    option_names: tuple[str, ...] = ()

    def __init__(self, spec: dict, config, site: str, layer_idx: int, head_dim: int):
        super().__init__()
        self.spec = spec
        self.config = config
        self.site = site
        self.layer_idx = layer_idx
        self.num_heads = spec["num_heads"]
        self.head_dim = head_dim

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> dict:
        """Validate a group spec and fill in defaults; raise `LayoutError` naming `field` on bad input.

        `spec` has `kind` and `num_heads`; the default accepts no further options.
        """
        unknown = sorted(set(spec) - {"kind", "num_heads", *cls.option_names})
        if unknown:
            raise LayoutError(
                f"{field}: unknown option(s) {unknown} for kind {cls.kind!r}; valid options: {sorted(cls.option_names)}"
            )
        if site not in cls.sites:
            raise LayoutError(f"{field}: kind {cls.kind!r} cannot be used at site {site!r}; valid sites: {list(cls.sites)}")
        return dict(spec)

    @classmethod
    def num_query_key_slots(cls, spec: dict) -> int:
        """How many per-head query/key projections this group needs from the sublayer."""
        return spec["num_heads"] if cls.uses_query_key else 0

    @classmethod
    def validate_site(cls, layer_specs: list, site: str) -> None:
        """Check rules that span the layers of a site (called at config time with the expanded specs)."""

    @classmethod
    def build_stack_state(cls, config, site: str, layer_specs: list) -> nn.Module | None:
        """A module shared by all layers of one stack (e.g. RAN's initial matrices), or None."""
        return None

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
