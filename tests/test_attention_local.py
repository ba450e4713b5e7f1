"""Local attention masks (Pande et al. 2020): Eq. 9 by hand, the fast path against the reference, W_q/W_k sharing,
the paper's weight counts."""

import math
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from torch.utils._python_dispatch import TorchDispatchMode

from hf_simple_attn import LayoutError, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling import attention_local
from hf_simple_attn.modeling.attention_heads import AttentionContext
from hf_simple_attn.modeling.attention_local import ALL_SEVEN_MASKS, LocalMaskHeads
from hf_simple_attn.modeling.memo import clear_memos
from hf_simple_attn.modeling.modeling_simple_attn_marian import SimpleAttnMarianEncoder
from hf_simple_attn.modeling.presets import get_preset

from conftest import assert_same_maths, model_reductions


pytestmark = pytest.mark.numerics


# The paper's encoder configurations b-l (Figure 4, Tables 1-3) in the preset catalogue.
PAPER_LOCAL_PRESETS = [
    "local-2heads",
    "local-4heads",
    "local-first3",
    "local-last3",
    "local-all",
    "local-4tied",
    "local-2tied",
    "local-1tied",
    "local-1tied-first3",
    "local-half-tied",
    "local-fully-tied",
]

# Tables 2-3: encoder attention weights (no biases) at d_model 512, 8 heads, 6 layers.
PAPER_WEIGHT_COUNTS = {
    "base": 6_291_456,  # 6 layers x 4 projections x 512 x 512
    "local-4tied": 4_718_592,  # g: 6 x (2 x 512 x 256 + 2 x 512 x 512)
    "local-2tied": 3_932_160,  # h: 6 x (2 x 512 x 128 + 2 x 512 x 512)
    "local-1tied": 3_538_944,  # i: 6 x (2 x 512 x 64 + 2 x 512 x 512)
    "local-1tied-first3": 4_915_200,  # j: 3 x 589,824 + 3 x 1,048,576
    "local-half-tied": 4_784_128,  # k: 2 x 512 x 64 once + 3 x 2 x 512 x 512 + 3 x 1,048,576
    "local-fully-tied": 3_211_264,  # l: 2 x 512 x 64 once + 6 x 2 x 512 x 512
}


def paper_layout(name):
    return get_preset(name, "seq2seq")["layout"]


def local_heads(site="encoder_self", head_dim=1, **options):
    spec = LocalMaskHeads.normalize_spec({"kind": "local", **options}, site, "test")
    return LocalMaskHeads(spec, SimpleNamespace(attention_dropout=0.0), site, 0, head_dim)


def context(length, is_causal=False, key_padding_mask=None):
    return AttentionContext(key_padding_mask=key_padding_mask, query_start=0, query_length=length, is_causal=is_causal)


# Hand example: head_dim 1, every query q = 1, keys k = (0, ln 2, ln 3), so every row of
# QKᵀ/√1 is (0, ln 2, ln 3) and softmax = (1, 2, 3)/6. Values v = (10, 20, 30).
QUERY = torch.ones(1, 1, 3, 1)
KEY = torch.tensor([0.0, math.log(2), math.log(3)]).view(1, 1, 3, 1)
VALUE = torch.tensor([10.0, 20.0, 30.0]).view(1, 1, 3, 1)
MASKS = ["band-1", "prev-1", "next-1", "identity", "global", "prev-2"]
EQ9_WEIGHTS = (
    torch.tensor(
        [
            # band-1: |i - j| <= 1
            [[1, 2, 0], [1, 2, 3], [0, 2, 3]],
            # prev-1: j = i - 1 (row 0 has no previous token)
            [[0, 0, 0], [1, 0, 0], [0, 2, 0]],
            # next-1: j = i + 1
            [[0, 2, 0], [0, 0, 3], [0, 0, 0]],
            # identity
            [[1, 0, 0], [0, 2, 0], [0, 0, 3]],
            # global
            [[1, 2, 3], [1, 2, 3], [1, 2, 3]],
            # prev-2
            [[0, 0, 0], [0, 0, 0], [1, 0, 0]],
        ]
    )
    / 6.0
)
RENORMALIZED_WEIGHTS = torch.tensor(
    [
        [[1 / 3, 2 / 3, 0], [1 / 6, 2 / 6, 3 / 6], [0, 2 / 5, 3 / 5]],
        [[0, 0, 0], [1, 0, 0], [0, 1, 0]],
        [[0, 1, 0], [0, 0, 1], [0, 0, 0]],
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        [[1 / 6, 2 / 6, 3 / 6]] * 3,
        [[0, 0, 0], [0, 0, 0], [1, 0, 0]],
    ]
)


@pytest.mark.parametrize(
    "renormalize, expected, band_row0_output",
    [
        (False, EQ9_WEIGHTS, 50 / 6),  # Eq. 9, band-1, row 0: 1/6·10 + 2/6·20
        (True, RENORMALIZED_WEIGHTS, 50 / 3),  # renormalized over j in {0, 1}: 1/3·10 + 2/3·20
    ],
)
def test_mask_weights_and_outputs_by_hand(renormalize, expected, band_row0_output):
    heads = local_heads(num_heads=6, masks=MASKS, query_key_sets=1, renormalize=renormalize)
    value = VALUE.expand(1, 6, 3, 1)
    output, weights = heads(QUERY, KEY, value, context(3), output_attentions=True)
    # the rounding of a softmax over 3 keys (and of renormalising it), then of weights·values
    assert_same_maths(weights[0], expected, reduction=3, depth=2)
    assert_same_maths(output[0, :, :, 0], expected @ VALUE[0, 0, :, 0], reduction=3, depth=3)
    assert_same_maths(output[0, 0, 0, 0], band_row0_output, reduction=3, depth=3)
    assert output[0, 1, 0, 0].item() == 0.0  # prev-1, row 0: nothing to attend


def test_decoder_masks_combine_with_causality():
    heads = local_heads(
        site="decoder_self", num_heads=4, masks=["next-1", "band-1", "prev-1", "global"], query_key_sets=1
    )
    _, weights = heads(QUERY, KEY, VALUE.expand(1, 4, 3, 1), context(3, is_causal=True), output_attentions=True)
    # Causal softmax rows: (1), (1, 2)/3, (1, 2, 3)/6; next-1 heads see nothing.
    causal = torch.tensor([[1, 0, 0], [1 / 3, 2 / 3, 0], [1 / 6, 2 / 6, 3 / 6]])
    assert_same_maths(weights[0, 0], torch.zeros(3, 3), reduction=3)  # the rounding of a softmax over 3 keys
    assert_same_maths(weights[0, 1], causal * torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]]), reduction=3)
    assert_same_maths(weights[0, 2], causal * torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0]]), reduction=3)
    assert_same_maths(weights[0, 3], causal, reduction=3)


def test_cached_queries_use_their_absolute_positions():
    heads = local_heads(site="decoder_self", num_heads=2, masks=["prev-1", "identity"], query_key_sets=1)
    step = AttentionContext(key_padding_mask=None, query_start=2, query_length=1, is_causal=True)
    _, weights = heads(QUERY[:, :, :1], KEY, VALUE.expand(1, 2, 3, 1), step, output_attentions=True)
    assert_same_maths(weights[0, :, 0], torch.tensor([[0, 2 / 6, 0], [0, 0, 3 / 6]]), reduction=3)


def test_renormalized_rows_without_keys_are_zero_and_differentiable():
    query = QUERY.clone().requires_grad_(True)
    heads = local_heads(num_heads=1, masks="prev-1", renormalize=True)
    padding = torch.tensor([[True, False, True]])  # key 1 is padding: row 2 has no allowed key left
    output, weights = heads(query, KEY, VALUE, context(3, key_padding_mask=padding), output_attentions=True)
    # the rounding of a softmax over 3 keys, then of renormalising it
    assert_same_maths(weights[0, 0], torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 0, 0]]), reduction=3, depth=2)
    output.sum().backward()
    assert torch.isfinite(query.grad).all()


def test_heads_of_one_query_key_set_share_the_softmax():
    torch.manual_seed(0)
    heads = local_heads(num_heads=4, masks=["global", "band-1"], query_key_sets=2, head_dim=4)
    # In float64: only rounding separates the module's weights from the softmax written out.
    query, key = (torch.randn(2, 2, 5, 4, dtype=torch.float64) for _ in range(2))
    value = torch.randn(2, 4, 5, 4, dtype=torch.float64)
    _, weights = heads(query, key, value, context(5), output_attentions=True)
    band = (torch.arange(5)[None, :] - torch.arange(5)[:, None]).abs() <= 1
    for slot in range(2):
        shared = torch.softmax(query[:, slot] @ key[:, slot].transpose(-1, -2) / 2.0, dim=-1)
        assert_same_maths(weights[:, 2 * slot], shared, reduction=5, depth=2)  # scores (4 terms), softmax (5 keys)
        assert_same_maths(weights[:, 2 * slot + 1], shared * band, reduction=5, depth=2)


# The fast path (`fused`): one SDPA call over the keys twice, its mask pattern kept across forwards.

# (heads, query/key sets, masks): one set per head, equal sets of two and of eight heads, unequal sets (2, 2, 1).
FUSED_GROUPS = [
    (8, 8, ALL_SEVEN_MASKS),
    (8, 4, ["identity", "band-2"]),
    (8, 1, ALL_SEVEN_MASKS),
    (5, 3, ["band-1", "global", "next-2"]),
]


def outputs_and_gradients(heads, fast, query, key, value, context):
    """The output of `heads` on the fast or the reference path and the gradients of a weighted sum of it."""
    heads.fast_path = fast
    query, key, value = (tensor.clone().requires_grad_(True) for tensor in (query, key, value))
    output, _ = heads(query, key, value, context)
    (output * torch.linspace(-1, 1, output.numel(), dtype=output.dtype).view(output.shape)).sum().backward()
    return output, query.grad, key.grad, value.grad


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("site", ["encoder_self", "decoder_self"])
@pytest.mark.parametrize("num_heads, sets, masks", FUSED_GROUPS)
def test_fused_path_equals_reference_with_gradients(renormalize, site, num_heads, sets, masks):
    torch.manual_seed(0)
    heads = local_heads(site, 4, num_heads=num_heads, masks=masks, query_key_sets=sets, renormalize=renormalize)
    length = 7
    query = torch.randn(4, sets, length, 4, dtype=torch.float64)
    key = torch.randn(4, sets, length, 4, dtype=torch.float64)
    value = torch.randn(4, num_heads, length, 4, dtype=torch.float64)
    padding = torch.ones(4, length, dtype=torch.bool)
    padding[1, 5:] = False  # right padding
    padding[2] = False  # a sentence of padding only: no query has an allowed key
    padding[3, :3] = False  # left padding: the first decoder queries have no allowed key
    for key_padding_mask in (None, padding):
        for start, query_length in ((0, length), (length - 1, 1)):  # every position; a cached decoding step
            step = AttentionContext(key_padding_mask, start, query_length, site == "decoder_self")
            step_query = query[:, :, start : start + query_length]
            fast = outputs_and_gradients(heads, True, step_query, key, value, step)
            reference = outputs_and_gradients(heads, False, step_query, key, value, step)
            for fast_tensor, reference_tensor in zip(fast, reference):
                # the fused path sums over the keys twice (2 · length terms); its output and gradients chain at
                # most 8 reductions (scores, softmax, renormalisation, weights·values and their backward)
                assert_same_maths(fast_tensor, reference_tensor, reduction=2 * length, depth=8)
            if key_padding_mask is not None:
                assert torch.equal(fast[0][2], torch.zeros_like(fast[0][2]))  # as the reference: zero, not NaN


class OperatorNames(TorchDispatchMode):
    """The names of the ATen operators run under it, views left out."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_fused_pattern_is_built_once_and_padding_costs_one_operator(monkeypatch):
    clear_memos()
    builds = []

    def counted_pattern(*args):
        builds.append(args)
        return fused_pattern(*args)

    fused_pattern = attention_local.fused_pattern
    monkeypatch.setattr(attention_local, "fused_pattern", counted_pattern)
    heads = local_heads(num_heads=8, head_dim=4)
    for batch_size in (2, 2, 3):  # the first forward builds the pattern (and the constants); then padding only
        padding = torch.ones(batch_size, 6, dtype=torch.bool)
        padding[0, 4:] = False
        query, key, value = (torch.randn(batch_size, 8, 6, 4) for _ in range(3))
        with OperatorNames() as operators:
            heads(query, key, value, context(6, key_padding_mask=padding))
    # The keys twice and the values with a zero block in one cat, the padding in one where, one SDPA call.
    assert [name for name in operators.names if "scaled_dot_product" not in name] == ["aten.cat", "aten.where"]
    assert len(builds) == 1


def test_normalized_spec_cycles_masks_resolves_sets_and_is_idempotent():
    spec = LocalMaskHeads.normalize_spec(
        {"kind": "local", "num_heads": 8, "masks": ["identity", "band-02"], "heads_per_query_key_set": 2},
        "encoder_self",
        "f",
    )
    assert spec == {
        "kind": "local",
        "num_heads": 8,
        "masks": ["identity", "band-2"] * 4,
        "query_key_sets": 4,
        "renormalize": False,
    }
    assert LocalMaskHeads.normalize_spec(dict(spec), "encoder_self", "f") == spec
    default = LocalMaskHeads.normalize_spec({"kind": "local", "num_heads": 8}, "encoder_self", "f")
    assert default["masks"] == ALL_SEVEN_MASKS and default["query_key_sets"] == 8


FIELD = r"attention_layout\.encoder_self\[0\](\.groups\[0\])?"  # a single-group layer may omit .groups[0]


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"masks": ["band-2", "previous-1"]},
            FIELD + r"\.masks\[1\]: unknown mask 'previous-1'; valid masks: 'prev-<k>', 'next-<k>', 'band-<k>'",
        ),
        ({"masks": "prev-0"}, FIELD + r"\.masks\[0\]: the distance k of 'prev-0' must be an integer in \[1, 4096\]"),
        ({"masks": "band-1.5"}, FIELD + r"\.masks\[0\]: unknown mask 'band-1.5'"),
        ({"masks": []}, FIELD + r"\.masks: expected a mask name or a non-empty list"),
        ({"query_key_sets": 0}, FIELD + r"\.query_key_sets: expected a positive integer"),
        (
            {"query_key_sets": 2, "heads_per_query_key_set": 2},
            FIELD + r": give either 'query_key_sets' or 'heads_per_query_key_set'",
        ),
        ({"renormalize": "yes"}, FIELD + r"\.renormalize: expected true or false"),
        (
            {"mask": "band-1"},
            r"unknown option\(s\) \['mask'\] for kind 'local'; valid options: \['heads_per_query_key_set', 'masks'",
        ),
    ],
)
def test_bad_options_fail_at_config_time(tiny_marian_kwargs, options, message):
    with pytest.raises(LayoutError, match=message):
        SimpleAttnMarianConfig(attention_layout={"encoder_self": {"kind": "local", **options}}, **tiny_marian_kwargs)


def test_cross_attention_is_refused(tiny_marian_kwargs):
    with pytest.raises(
        LayoutError,
        match=r"kind 'local' cannot be used at site 'cross'; valid sites: \['encoder_self', 'decoder_self'\]",
    ):
        SimpleAttnMarianConfig(attention_layout={"cross": "local"}, **tiny_marian_kwargs)


def encoder_attention_weight_count(encoder) -> int:
    """Unique q/k/v/out projection weights (no biases) of the encoder self-attention, tied ones once."""
    weights = {}
    for layer in encoder.layers:
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            projection = getattr(layer.self_attn, name, None)
            if projection is not None:
                weights[id(projection.weight)] = projection.weight.numel()
    return sum(weights.values())


@pytest.mark.parametrize("name", list(PAPER_WEIGHT_COUNTS))
def test_paper_weight_counts_at_paper_size(name):
    config = SimpleAttnMarianConfig(
        vocab_size=10,
        d_model=512,
        encoder_layers=6,
        decoder_layers=1,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=8,
        decoder_ffn_dim=8,
        max_position_embeddings=16,
        pad_token_id=9,
        decoder_start_token_id=9,
        eos_token_id=0,
        forced_eos_token_id=0,
        attention_layout=paper_layout(name),
    )
    with torch.device("meta"):
        encoder = SimpleAttnMarianEncoder(config)
    assert encoder_attention_weight_count(encoder) == PAPER_WEIGHT_COUNTS[name]


def test_paper_layouts_at_paper_size_have_the_papers_masks_and_sets():
    kwargs = dict(d_model=512, encoder_layers=6, encoder_attention_heads=8)
    layouts = {
        name: SimpleAttnMarianConfig(attention_layout=paper_layout(name), **kwargs).attention_layout["encoder_self"]
        for name in PAPER_LOCAL_PRESETS
    }

    def local_group(spec):
        return spec["groups"][0] if spec["groups"][0]["kind"] == "local" else None

    two = local_group(layouts["local-2heads"][0])
    assert sorted(m for m in two["masks"] if m != "global") == ["band-1", "band-2"]
    four = local_group(layouts["local-4heads"][0])
    assert sorted(m for m in four["masks"] if m != "global") == ["band-1", "band-1", "band-2", "band-2"]
    seven = ["band-1", "band-2", "identity", "identity", "next-1", "next-2", "prev-1", "prev-2"]
    first3 = [local_group(spec) for spec in layouts["local-first3"]]
    assert [g is not None for g in first3] == [True, True, True, False, False, False]
    assert sorted(first3[0]["masks"]) == seven
    assert [local_group(s) is not None for s in layouts["local-last3"]] == [False, False, False, True, True, True]
    g = local_group(layouts["local-4tied"][0])
    assert g["query_key_sets"] == 4 and g["masks"] == ["identity", "band-2"] * 4  # pairs (0,1), (2,3), ...
    h = local_group(layouts["local-2tied"][0])
    assert h["query_key_sets"] == 2 and h["masks"] == ["identity", "band-2", "prev-1", "next-1"] * 2
    for name in ("local-1tied", "local-fully-tied"):
        assert all(
            local_group(s)["query_key_sets"] == 1 and sorted(local_group(s)["masks"]) == seven for s in layouts[name]
        )
    assert [s["share_query_key_with"] for s in layouts["local-half-tied"]] == [None, 0, 0, None, None, None]
    assert [s["share_query_key_with"] for s in layouts["local-fully-tied"]] == [None, 0, 0, 0, 0, 0]


def test_uneven_head_counts_give_near_equal_contiguous_sets():
    # 5 heads in pairs: sets (0, 1), (2, 3), (4); every head of a set shares its softmax.
    heads = local_heads(num_heads=5, masks=["global"], heads_per_query_key_set=2, head_dim=2)
    assert heads.spec["query_key_sets"] == 3 and heads.heads_per_set == [2, 2, 1]
    # In float64: only rounding separates the module's weights from the softmax written out.
    query, key = (torch.randn(1, 3, 4, 2, dtype=torch.float64) for _ in range(2))
    context = AttentionContext(None, 0, 4, False)
    _, weights = heads(query, key, torch.randn(1, 5, 4, 2, dtype=torch.float64), context, output_attentions=True)
    expected = torch.softmax(query @ key.transpose(-1, -2) / 2**0.5, dim=-1)
    assert_same_maths(weights, expected[:, [0, 0, 1, 1, 2]], reduction=4, depth=2)  # scores, softmax over 4 keys
    assert local_heads(num_heads=5, query_key_sets=2).heads_per_set == [3, 2]
    assert local_heads(num_heads=1, query_key_sets=2).heads_per_set == [1]


def test_sharing_scales_with_head_count(tiny_marian_kwargs):
    kwargs = {**tiny_marian_kwargs, "encoder_attention_heads": 16}
    g = SimpleAttnMarianConfig(attention_layout=paper_layout("local-4tied"), **kwargs).attention_layout[
        "encoder_self"
    ][0]
    h = SimpleAttnMarianConfig(attention_layout=paper_layout("local-2tied"), **kwargs).attention_layout[
        "encoder_self"
    ][0]
    assert g["groups"][0]["query_key_sets"] == 8  # still pairs of heads
    assert h["groups"][0]["query_key_sets"] == 2  # still two halves


# BERT (Table 4; 12 layers x 12 heads): band-6 everywhere, W_q/W_k tied across all, all but the last, all but the last two.
@pytest.mark.parametrize("tie, query_key_sets", [(None, 12), ("all", 1), ("all_but_last", 2), ("all_but_last_2", 3)])
def test_band6_tying_across_layers(tie, query_key_sets):
    site = {"layers": {"all": {"kind": "local", "masks": "band-6"}}}
    if tie is not None:
        site["tie_query_key"] = tie
    config = SimpleAttnMarianConfig(
        d_model=24,
        encoder_layers=12,
        decoder_layers=1,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        attention_layout={"encoder_self": site},
    )
    with torch.device("meta"):
        encoder = SimpleAttnMarianEncoder(config)
    query_weights = {id(layer.self_attn.q_proj.weight) for layer in encoder.layers}
    key_weights = {id(layer.self_attn.k_proj.weight) for layer in encoder.layers}
    assert len(query_weights) == len(key_weights) == query_key_sets
    assert len({id(layer.self_attn.v_proj.weight) for layer in encoder.layers}) == 12


# Model-level behaviour.


def build_model(tiny_marian_kwargs, layout, seed=0):
    torch.manual_seed(seed)
    config = SimpleAttnMarianConfig(attention_layout=layout, **tiny_marian_kwargs)
    return SimpleAttnMarianMTModel(config).eval()


SOURCE = torch.tensor([[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 39, 39]])
SOURCE_MASK = (SOURCE != 39).long()
TARGET = torch.tensor([[39, 4, 5, 6, 7], [39, 8, 9, 10, 11]])

MIXED_LAYOUT = {
    "encoder_self": {
        "groups": [
            {"kind": "dot", "num_heads": 1},
            {"kind": "local", "masks": ["band-1", "prev-1", "next-2"], "query_key_sets": 1},
        ]
    },
    "decoder_self": {"kind": "local", "masks": ["prev-1", "identity", "band-2", "global"], "query_key_sets": 2},
}


def test_all_global_local_heads_equal_dot_attention(tiny_marian_kwargs):
    dot = build_model(tiny_marian_kwargs, {})
    local = build_model(
        tiny_marian_kwargs,
        {"encoder_self": {"kind": "local", "masks": "global"}, "decoder_self": {"kind": "local", "masks": "global"}},
        seed=1,
    )
    local.load_state_dict(dot.state_dict())
    dot.double()  # in float64: only rounding separates the two
    local.double()
    expected = dot(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    actual = local(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    assert_same_maths(actual, expected, **model_reductions(local.config))


def test_mixed_layer_slices_query_key_sets(tiny_marian_kwargs):
    model = build_model(tiny_marian_kwargs, MIXED_LAYOUT).double()  # in float64: only rounding may differ
    attention = model.model.encoder.layers[0].self_attn
    assert attention.q_proj.weight.shape == (2 * 8, 32)  # 1 dot head + 1 shared set for 3 local heads
    assert model.model.decoder.layers[0].self_attn.k_proj.weight.shape == (2 * 8, 32)
    out = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET, output_attentions=True)
    encoder_weights = out.encoder_attentions[0]  # (batch, 4, 6, 6)
    offsets = torch.arange(6)[None, :] - torch.arange(6)[:, None]
    assert (encoder_weights[:, 1][:, offsets.abs() > 1] == 0).all()
    assert (encoder_weights[:, 2][:, offsets != -1] == 0).all()
    assert (encoder_weights[:, 3][:, offsets != 2] == 0).all()
    assert (encoder_weights[1, :, :, 4:] == 0).all()  # padding
    # Heads 1-3 share one softmax: where two masks overlap, they hold the same weight.
    # (layer 0: projections of 32 features, scores, softmax)
    assert_same_maths(
        encoder_weights[:, 1][:, offsets == -1], encoder_weights[:, 2][:, offsets == -1], reduction=32, depth=3
    )


def test_causality_padding_and_cache(tiny_marian_kwargs):
    model = build_model(tiny_marian_kwargs, MIXED_LAYOUT).double()  # in float64: only rounding may differ
    logits = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    changed = TARGET.clone()
    changed[:, 3:] = 20
    later = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=changed).logits
    assert_same_maths(later[:, :3], logits[:, :3], **model_reductions(model.config))
    alone = model(input_ids=SOURCE[1:, :4], decoder_input_ids=TARGET[1:]).logits
    assert_same_maths(logits[1:], alone, **model_reductions(model.config))
    for num_beams in (1, 3):
        kwargs = dict(
            input_ids=SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=8, num_beams=num_beams, do_sample=False
        )
        with_cache = model.generate(**kwargs, use_cache=True)
        without_cache = model.generate(**kwargs, use_cache=False)
        assert torch.equal(with_cache, without_cache)


# At 4 layers: half-tied ties layers 0-1 (2-3 are global), fully-tied ties all four.
@pytest.mark.parametrize(
    "name, tied_copies, untied_layers", [("local-half-tied", 1, [0, 2, 3]), ("local-fully-tied", 3, [0])]
)
def test_tied_query_key_counted_once_trained_together_and_saved_tied(
    tiny_marian_kwargs, tmp_path, name, tied_copies, untied_layers
):
    kwargs = {**tiny_marian_kwargs, "encoder_layers": 4}
    model = build_model(kwargs, paper_layout(name))
    layers = model.model.encoder.layers
    assert layers[0].self_attn.q_proj.weight is layers[1].self_attn.q_proj.weight
    assert layers[0].self_attn.k_proj.bias is layers[1].self_attn.k_proj.bias
    assert layers[0].self_attn.v_proj.weight is not layers[1].self_attn.v_proj.weight
    untied_site = {k: v for k, v in paper_layout(name)["encoder_self"].items() if k != "tie_query_key"}
    untied = build_model(kwargs, {"encoder_self": untied_site})
    one_set = 2 * (8 * 32 + 8)  # one q_proj and one k_proj (a single set of head_dim 8), weights and biases
    assert (
        sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in model.parameters())
        == tied_copies * one_set
    )

    model.train()
    loss = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, labels=TARGET[:, 1:].contiguous()).loss
    loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert [n for n, p in trainable if p.grad is None or not p.grad.abs().sum() > 0] == []
    model.eval()

    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as saved:
        saved_query_key = sorted(k for k in saved.keys() if "encoder.layers" in k and "q_proj.weight" in k)
    assert saved_query_key == [f"model.encoder.layers.{i}.self_attn.q_proj.weight" for i in untied_layers]
    reloaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path).eval()
    reloaded_layers = reloaded.model.encoder.layers
    assert reloaded_layers[0].self_attn.q_proj.weight is reloaded_layers[1].self_attn.q_proj.weight
    assert torch.equal(reloaded_layers[1].self_attn.k_proj.weight, layers[1].self_attn.k_proj.weight)
    expected = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    actual = reloaded(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    assert torch.equal(actual, expected)
