"""Random layouts, valid or not: a config either builds or fails with a `LayoutError`, nothing else."""

import pytest

from hf_simple_attn import ATTENTION_FAMILIES, LayoutError, SimpleAttnMarianConfig, list_presets

from conftest import TINY_MARIAN


hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")


KINDS = [*sorted(ATTENTION_FAMILIES), "none", "gaussian_blur"]
OPTIONS = sorted(
    {option for family in ATTENTION_FAMILIES.values() for option in family.option_names}
    | {"num_heads", "head_dim", "share_query_key_with", "sigmaa"}
)
WORDS = ["floor", "continuous", "ffn", "tanh_ln", "strict", "none", "gate", "gmm_only", "band-2", "prev-1",
         "next-9999", "identity", "global", "last", "first_half", "0,2", "-1", "all_but_last_2"]  # fmt: skip
SELECTORS = ["all", "last", "first_2", "top_third", "0", "-1", "1,2", "7", "middle"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 8),
    st.integers(-(2**70), 2**70),
    st.floats(),  # nan, ±inf, subnormals, huge
    st.sampled_from(WORDS),
    st.text(max_size=5),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4))
kinds = st.one_of(
    st.sampled_from(KINDS),
    st.sampled_from(KINDS),
    scalars,
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=3), scalars),
)
options = st.dictionaries(st.sampled_from(OPTIONS), values, max_size=3)
groups = st.builds(lambda kind, options: {"kind": kind, **options}, kinds, options)
layers = st.one_of(
    st.sampled_from(KINDS),
    groups,
    groups,
    st.builds(
        lambda members, extra: {"groups": members, **extra},
        st.one_of(st.lists(groups, min_size=1, max_size=3), values),
        st.dictionaries(st.sampled_from(["num_heads", "head_dim", "kind"]), values, max_size=1),
    ),
    scalars,
)
layer_map = st.dictionaries(st.one_of(st.sampled_from(SELECTORS), scalars), layers, max_size=2)
sites = st.one_of(
    layers,
    layers,
    st.lists(layers, min_size=2, max_size=3),  # 2 encoder and 3 decoder layers
    st.fixed_dictionaries(
        {},
        optional={
            "default": layers,
            "layers": st.one_of(layer_map, scalars),
            "tie_query_key": st.one_of(st.sampled_from(SELECTORS), scalars),
        },
    ),
)
flags = st.one_of(st.booleans(), st.booleans(), scalars)
ffn = st.one_of(
    flags,
    st.lists(flags, min_size=2, max_size=3),
    st.fixed_dictionaries(
        {}, optional={"default": flags, "layers": st.dictionaries(st.sampled_from(SELECTORS), flags, max_size=2)}
    ),
)
# One or two sites, or one feed-forward switch: most examples get past the first site to the option checks.
layouts = st.one_of(
    st.dictionaries(st.sampled_from(["encoder_self", "decoder_self", "cross"]), sites, min_size=1, max_size=2),
    st.dictionaries(st.sampled_from(["encoder_ffn", "decoder_ffn"]), ffn, min_size=1, max_size=1),
)


@hypothesis.settings(max_examples=200, deadline=None, derandomize=True)
@hypothesis.given(
    layout=layouts,
    preset=st.one_of(st.none(), st.sampled_from(list_presets("seq2seq"))),
    override=st.one_of(layouts, layouts, values),
)
def test_random_layouts_build_or_raise_a_layout_error(layout, preset, override):
    """Any other exception (TypeError, OverflowError, ...) fails the test."""
    try:
        if preset is None:
            SimpleAttnMarianConfig(attention_layout=layout, **TINY_MARIAN)
        else:
            SimpleAttnMarianConfig.from_preset(preset, attention_layout=override, **TINY_MARIAN)
    except LayoutError:
        pass
