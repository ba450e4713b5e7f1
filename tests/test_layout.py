"""Attention layouts: validation at config time, expansion, presets by name."""

import json
import math

import pytest
import torch

import hf_simple_attn
from hf_simple_attn import LayoutError, SimpleAttnBertConfig, SimpleAttnMarianConfig
from hf_simple_attn.modeling.layout import select_layers
from hf_simple_attn.modeling.presets import get_preset


def make(tiny_marian_kwargs, layout):
    return SimpleAttnMarianConfig(attention_layout=layout, **tiny_marian_kwargs)


@pytest.mark.parametrize(
    "layout, message",
    [
        (
            {"encoder_self": "gaussian_blur"},
            r"attention_layout\.encoder_self\[0\]\.kind: unknown attention kind 'gaussian_blur'; valid kinds: \[",
        ),
        (
            {"encoder_self": {"kind": "dot", "num_heads": 3}},
            r"encoder_self\[0\]\.num_heads: d_model 32 is not divisible by 3 heads",
        ),
        (
            {
                "encoder_self": {
                    "groups": [{"kind": "dot", "num_heads": 3}, {"kind": "hard_coded", "num_heads": 3}],
                    "num_heads": 4,
                }
            },
            r"the head groups add up to 6 heads but the layer has 4",
        ),
        (
            {"encoder_self": {"kind": "dot", "num_heads": 0}},
            r"encoder_self\[0\]\.num_heads: expected a positive integer",
        ),
        (
            {"decoder_self": ["dot", "dot"]},
            r"attention_layout\.decoder_self: a per-layer list needs exactly 3 entries, got 2",
        ),
        (
            {"decoder_self": {"kind": "hard_coded", "offsets": [-1, 1]}},
            r"decoder_self\[0\]\.offsets: decoder self-attention offsets must be <= 0",
        ),
        (
            {"encoder_self": {"kind": "hard_coded", "offsets": [0.5]}},
            r"encoder_self\[0\]\.offsets: expected a non-empty list of integers",
        ),
        ({"encoder_self": {"kind": "hard_coded", "window": 2}}, r"\.window: expected null or an odd positive integer"),
        ({"encoder_self": {"kind": "hard_coded", "centre": "continuous"}}, r"\.centre: only cross attention"),
        (
            {"cross": {"kind": "hard_coded", "centre": "middle"}},
            r"\.centre: expected one of \['floor', 'continuous'\]",
        ),
        (
            {"encoder_self": {"kind": "hard_coded", "sigmaa": 1}},
            r"unknown option\(s\) \['sigmaa'\] for kind 'hard_coded'; valid options: \[",
        ),
        (
            {"encoder_self": {"kind": "dot", "offsets": [1]}},
            r"unknown option\(s\) \['offsets'\] for kind 'dot'; valid options: \[\]",
        ),
        (
            {"cross": {"default": "dot", "layers": {"penultimate": "none"}}},
            r"cross\.layers: unknown layer selector 'penultimate'; valid: \[",
        ),
        ({"cross": {"default": "dot", "layers": {"5": "none"}}}, r"layer index 5 is out of range for 3 layers"),
        ({"encoder_ffn": [True]}, r"attention_layout\.encoder_ffn: a per-layer list needs exactly 2 entries"),
        ({"encoder_ffn": "yes"}, r"attention_layout\.encoder_ffn: expected a layer spec"),
        (
            {"decoder": "dot"},
            r"attention_layout: unknown key\(s\) \['decoder'\]; valid keys: \['encoder_self', 'decoder_self', 'cross', 'encoder_ffn', 'decoder_ffn'\]",
        ),
        (
            {"encoder_self": {"default": "dot", "layers": {"all": "dot"}, "tie_query_key": "all", "share": 1}},
            r"unknown key\(s\) \['share'\]",
        ),
        (
            {"encoder_self": {"default": "hard_coded", "layers": {}, "tie_query_key": "all"}},
            r"need the same number of query/key heads \(>0\)",
        ),
        (
            {"encoder_self": [{"kind": "dot"}, {"kind": "dot", "num_heads": 2, "share_query_key_with": 0}]},
            r"encoder_self\[1\]\.share_query_key_with: layers 0 and 1 need the same number",
        ),
        (
            {"encoder_self": [{"kind": "dot"}, {"kind": "dot", "share_query_key_with": 1}]},
            r"expected the index of an earlier layer \(0\.\.0\), got 1",
        ),
    ],
)
def test_bad_layouts_fail_at_config_time_naming_the_field(tiny_marian_kwargs, layout, message):
    with pytest.raises(LayoutError, match=message):
        make(tiny_marian_kwargs, layout)


POSITIVE_UP_TO = r": expected a positive integer <= "


@pytest.mark.parametrize(
    "site, spec, message",
    [
        ("encoder_self", {"kind": []}, r"\.kind: unknown attention kind \[\]; valid kinds: \['dot'"),
        ("encoder_self", {"groups": [{"kind": {}}]}, r"\.groups\[0\]\.kind: unknown attention kind \{\}; valid kinds"),
        *[
            ("encoder_self", {"kind": "hard_coded", "sigma": sigma}, r"\.sigma: expected a number in \[0\.001, 1000\]")
            for sigma in (math.inf, -math.inf, math.nan, 1e-300, 1e5, 10**400, 0)
        ],
        ("encoder_self", {"kind": "hard_coded", "window": 4097}, r"\.window" + POSITIVE_UP_TO + "4096"),
        (
            "encoder_self",
            {"kind": "hard_coded", "offsets": [-1, 10**6]},
            r"\.offsets: expected a non-empty list of integers in \[-4096, 4096\]",
        ),
        ("encoder_self", {"kind": "recurrent", "max_positions": 65537}, r"\.max_positions" + POSITIVE_UP_TO + "65536"),
        (
            "decoder_self",
            {"kind": "random_synthesizer", "max_positions": 10**9},
            r"\.max_positions" + POSITIVE_UP_TO + "65536",
        ),
        (
            "encoder_self",
            {"kind": "recurrent", "transition": "ffn", "transition_ffn_dim": 10**6},
            r"\.transition_ffn_dim" + POSITIVE_UP_TO + "65536",
        ),
        (
            "encoder_self",
            {"kind": "local", "masks": "band-5000"},
            r"\.masks\[0\]: the distance k of 'band-5000' must be an integer in \[1, 4096\]",
        ),
        (
            "encoder_self",
            {"kind": "local", "heads_per_query_key_set": 10**30},
            r"\.heads_per_query_key_set" + POSITIVE_UP_TO + "1024",
        ),
        ("cross", {"kind": "gaussian_mixture", "num_components": 65}, r"\.num_components" + POSITIVE_UP_TO + "64"),
        ("cross", {"kind": "gaussian_mixture", "hidden_size": 65537}, r"\.hidden_size" + POSITIVE_UP_TO + "65536"),
        ("cross", {"kind": "dot", "num_heads": 1, "head_dim": 65537}, r"\.head_dim" + POSITIVE_UP_TO + "65536"),
        ("cross", {"kind": "dot", "num_heads": 10**6, "head_dim": 1}, r"\.num_heads" + POSITIVE_UP_TO + "1024"),
        (
            "cross",
            {"groups": [{"kind": "dot", "num_heads": 1025}], "head_dim": 1},
            r"\.groups\[0\]\.num_heads" + POSITIVE_UP_TO + "1024",
        ),
    ],
)
def test_bad_kinds_and_out_of_range_options_fail_naming_the_field(tiny_marian_kwargs, site, spec, message):
    with pytest.raises(LayoutError, match=rf"^attention_layout\.{site}\[0\]" + message):
        make(tiny_marian_kwargs, {site: spec})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("length_ratio", math.inf, r"length_ratio: expected a number in \[0\.001, 1000\], got inf"),
        ("length_ratio", math.nan, r"length_ratio: expected a number in \[0\.001, 1000\], got nan"),
        ("length_ratio", 0, r"length_ratio: expected a number in \[0\.001, 1000\], got 0"),
        ("length_ratio", -1.5, r"length_ratio: expected a number in \[0\.001, 1000\], got -1\.5"),
        ("d_model", 0, r"d_model: expected a positive integer, got 0"),
        ("encoder_layers", -1, r"encoder_layers: expected a positive integer, got -1"),
        ("decoder_layers", 0, r"decoder_layers: expected a positive integer, got 0"),
        ("encoder_attention_heads", 0, r"encoder_attention_heads: expected a positive integer, got 0"),
        ("decoder_attention_heads", -2, r"decoder_attention_heads: expected a positive integer, got -2"),
        ("encoder_ffn_dim", 0, r"encoder_ffn_dim: expected a positive integer, got 0"),
        ("decoder_ffn_dim", -1, r"decoder_ffn_dim: expected a positive integer, got -1"),
        ("vocab_size", 0, r"vocab_size: expected a positive integer, got 0"),
        ("decoder_vocab_size", -5, r"decoder_vocab_size: expected a positive integer, got -5"),
        ("max_position_embeddings", 0, r"max_position_embeddings: expected a positive integer, got 0"),
    ],
)
def test_bad_marian_config_fields_fail_naming_the_field(tiny_marian_kwargs, field, value, message):
    with pytest.raises(LayoutError, match=message):
        SimpleAttnMarianConfig(**{**tiny_marian_kwargs, field: value})


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 0),
        ("num_hidden_layers", -1),
        ("num_attention_heads", 0),
        ("intermediate_size", 0),
        ("vocab_size", 0),
        ("max_position_embeddings", -1),
        ("type_vocab_size", 0),
    ],
)
def test_bad_bert_config_fields_fail_naming_the_field(field, value):
    with pytest.raises(LayoutError, match=rf"^{field}: expected a positive integer, got {value}$"):
        SimpleAttnBertConfig(**{field: value})


@pytest.mark.parametrize("config_class, preset", [(SimpleAttnMarianConfig, "base"), (SimpleAttnBertConfig, "band6")])
@pytest.mark.parametrize("layout", [["dot"], "dot", 3])
def test_preset_with_a_layout_that_is_not_a_mapping(config_class, preset, layout):
    with pytest.raises(LayoutError, match=r"attention_layout: expected a mapping of sites to specs, got "):
        config_class.from_preset(preset, attention_layout=layout)


def test_bad_preset_lookups_name_the_valid_choices():
    with pytest.raises(ValueError, match=r"model_kind: expected one of \['encoder', 'seq2seq'\], got 'decoder'"):
        get_preset("base", "decoder")
    with pytest.raises(ValueError, match=r"model_kind: expected one of \['encoder', 'seq2seq'\], got \[\]"):
        get_preset("base", [])
    with pytest.raises(ValueError, match=r"attention_preset: unknown seq2seq preset \[\]; valid presets: \['base'"):
        SimpleAttnMarianConfig.from_preset([])


def test_bad_preset_name_lists_the_valid_ones(tiny_marian_kwargs):
    with pytest.raises(ValueError, match=r"unknown seq2seq preset 'hc-sb'; valid presets: \['base', 'hc-sa'"):
        SimpleAttnMarianConfig.from_preset("hc-sb", **tiny_marian_kwargs)


def test_layout_expands_to_explicit_per_layer_specs(tiny_marian_kwargs):
    config = make(
        tiny_marian_kwargs,
        {
            "encoder_self": {"groups": [{"kind": "dot", "num_heads": 1}, {"kind": "hard_coded", "offsets": [-1, 1]}]},
            "cross": {"default": "none", "layers": {"last": {"kind": "dot", "num_heads": 1}}},
            "decoder_ffn": {"default": True, "layers": {"0": False}},
        },
    )
    layout = config.attention_layout
    assert layout["encoder_self"][0] == {
        "num_heads": 4,
        "head_dim": 8,
        "groups": [
            {"kind": "dot", "num_heads": 1},
            {
                "kind": "hard_coded",
                "num_heads": 3,
                "offsets": [-1, 1, -1],
                "sigma": 1.0,
                "window": None,
                "indexing": False,
                "centre": "floor",
            },
        ],
        "share_query_key_with": None,
    }
    assert layout["cross"] == [
        None,
        None,
        {"num_heads": 1, "head_dim": 32, "groups": [{"kind": "dot", "num_heads": 1}], "share_query_key_with": None},
    ]
    assert layout["decoder_self"][2]["groups"] == [{"kind": "dot", "num_heads": 4}]
    assert layout["decoder_ffn"] == [False, True, True]
    assert layout["encoder_ffn"] == [True, True]


def test_expanded_layout_survives_json_round_trip(tiny_marian_kwargs):
    config = SimpleAttnMarianConfig.from_preset("sh-x", **tiny_marian_kwargs)
    reloaded = SimpleAttnMarianConfig.from_dict(json.loads(config.to_json_string()))
    assert reloaded.attention_layout == config.attention_layout
    assert reloaded.attention_preset == "sh-x"


@pytest.mark.parametrize(
    "selector, layers, expected",
    [
        ("first_half", 6, [0, 1, 2]),
        ("last_half", 6, [3, 4, 5]),
        ("bottom_third", 6, [0, 1]),
        ("middle_third", 6, [2, 3]),
        ("top_third", 6, [4, 5]),
        ("last", 6, [5]),
        ("last_4", 6, [2, 3, 4, 5]),
        ("last_4", 2, [0, 1]),
        ("all_but_last", 12, list(range(11))),
        ("all_but_last_2", 12, list(range(10))),
        ("first_half", 1, [0]),
        ("top_third", 4, [3]),
        ("0,-1", 6, [0, 5]),
        (2, 6, [2]),
    ],
)
def test_selectors_scale_with_depth(selector, layers, expected):
    assert select_layers(selector, layers, "field") == expected


def test_presets_are_listed_and_scale_to_any_size(tiny_marian_kwargs):
    names = hf_simple_attn.list_presets("seq2seq")
    for name in [
        "base",
        "hc-sa",
        "hc-all",
        "sh-x",
        "sh-x-spread",
        "base-no-sa",
        "sh-x-no-sa",
        "base-no-ff",
        "hc-sa-no-ff",
        "hc-sa-conv",
        "hc-sa-index",
    ]:
        assert name in names
    with pytest.raises(ValueError, match=r"model_kind: expected one of \['encoder', 'seq2seq'\]"):
        hf_simple_attn.list_presets("decoder")
    wide = SimpleAttnMarianConfig.from_preset("hc-all", **{**tiny_marian_kwargs, "decoder_attention_heads": 8})
    assert wide.attention_layout["cross"][0]["groups"][0]["offsets"] == [-1, 0, 1, -1, 0, 1, -1, 0]


def test_paper_sizes_give_the_papers_configurations():
    sh_x = SimpleAttnMarianConfig.from_preset(
        "sh-x", encoder_layers=6, decoder_layers=6, d_model=512, encoder_attention_heads=8, decoder_attention_heads=8
    )
    layout = sh_x.attention_layout
    assert layout["cross"][:5] == [None] * 5
    assert layout["cross"][5] == {
        "num_heads": 1,
        "head_dim": 512,
        "groups": [{"kind": "dot", "num_heads": 1}],
        "share_query_key_with": None,
    }
    assert all(spec["groups"][0]["offsets"] == [-1, 1] * 4 for spec in layout["encoder_self"])
    assert all(spec["groups"][0]["offsets"] == [-1, 0] * 4 for spec in layout["decoder_self"])
    spread = SimpleAttnMarianConfig.from_preset(
        "sh-x-spread", decoder_layers=6, d_model=512, encoder_attention_heads=8, decoder_attention_heads=8
    )
    assert [spec is not None for spec in spread.attention_layout["cross"]] == [False, False, True, True, True, True]
    conv = SimpleAttnMarianConfig.from_preset("hc-sa-conv").attention_layout
    assert conv["encoder_self"][0]["groups"][0]["window"] == 3


def test_preset_override_replaces_one_site(tiny_marian_kwargs):
    config = SimpleAttnMarianConfig.from_preset(
        "sh-x-spread",
        attention_layout={"cross": {"default": "none", "layers": {"last_2": {"kind": "dot", "num_heads": 1}}}},
        **tiny_marian_kwargs,
    )
    assert [spec is not None for spec in config.attention_layout["cross"]] == [False, True, True]
    assert config.attention_layout["encoder_self"][0]["groups"][0]["kind"] == "hard_coded"


@pytest.mark.parametrize("model_kind", ["seq2seq", "encoder"])
def test_every_preset_builds_at_any_depth_and_head_count(model_kind):
    from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianMTModel

    for name in hf_simple_attn.list_presets(model_kind):
        for layers, heads in [(1, 1), (2, 3), (5, 5), (7, 2)]:
            if model_kind == "seq2seq":
                config = SimpleAttnMarianConfig.from_preset(
                    name,
                    d_model=8 * heads,
                    encoder_layers=layers,
                    decoder_layers=layers,
                    vocab_size=20,
                    encoder_attention_heads=heads,
                    decoder_attention_heads=heads,
                    pad_token_id=19,
                    decoder_start_token_id=19,
                    encoder_ffn_dim=8,
                    decoder_ffn_dim=8,
                )
                model_class = SimpleAttnMarianMTModel
            else:
                config = SimpleAttnBertConfig.from_preset(
                    name,
                    hidden_size=8 * heads,
                    num_hidden_layers=layers,
                    num_attention_heads=heads,
                    intermediate_size=8,
                    vocab_size=20,
                )
                model_class = SimpleAttnBertModel
            with torch.device("meta"):
                model_class(config)
