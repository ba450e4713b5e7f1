"""The registry of attention families: the `kind`s a layout may name, each with its `AttentionHeads` class.

The package's families are imported and registered here, the one place that lists them. A family module does not
import this one, so that any module may be imported first; `from .module import Name` is the form that
`trust_remote_code` loading follows to fetch a checkpoint's modules. A family defined elsewhere registers with
`@register_attention`.
"""

from .attention_dot import DotProductHeads
from .attention_gaussian_mixture import GaussianMixtureHeads
from .attention_hard_coded import HardCodedGaussianHeads
from .attention_hard_retrieval import HardRetrievalHeads
from .attention_heads import AttentionHeads, LayoutError
from .attention_local import LocalMaskHeads
from .attention_recurrent import RandomSynthesizerHeads, RecurrentHeads


ATTENTION_FAMILIES: dict[str, type[AttentionHeads]] = {}


def register_attention(family: type[AttentionHeads]) -> type[AttentionHeads]:
    """Make `family` available to layouts under its `kind`; usable as a class decorator."""
    if not (isinstance(family, type) and issubclass(family, AttentionHeads)):
        raise TypeError(f"an attention family must subclass AttentionHeads, got {family!r}")
    if not family.kind or family.kind == "none":
        raise ValueError(f"{family.__name__}.kind: expected a name other than 'none', got {family.kind!r}")
    if family.kind in ATTENTION_FAMILIES:
        raise ValueError(f"attention family {family.kind!r} is registered twice")
    ATTENTION_FAMILIES[family.kind] = family
    return family


for _family in (
    DotProductHeads,
    GaussianMixtureHeads,
    HardCodedGaussianHeads,
    HardRetrievalHeads,
    LocalMaskHeads,
    RecurrentHeads,
    RandomSynthesizerHeads,
):
    register_attention(_family)


def get_attention_family(kind: str, field: str = "kind") -> type[AttentionHeads]:
    if not isinstance(kind, str) or kind not in ATTENTION_FAMILIES:
        raise LayoutError(
            f"{field}: unknown attention kind {kind!r}; valid kinds: {sorted(ATTENTION_FAMILIES)} or 'none'"
        )
    return ATTENTION_FAMILIES[kind]
