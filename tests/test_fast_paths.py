"""Fast attention paths (fixed convolutions, memoised tables, sliding caches, argmax retrieval) equal
the reference paths that build and apply the full weight matrices."""

import pytest
import torch

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.modeling.attention_hard_coded import HardCodedGaussianHeads, depthwise_convolution, gaussian_radius
from hf_simple_attn.modeling.attention_heads import AttentionContext
from hf_simple_attn.modeling.attention_local import LocalMaskHeads
from hf_simple_attn.modeling.cache import SimpleAttnCacheLayer
from hf_simple_attn.modeling.memo import clear_memos, memo_for

from conftest import TINY_MARIAN, assert_hand_computed, assert_same_maths, cached_steps, make_model, model_reductions


pytestmark = pytest.mark.numerics


PAD = TINY_MARIAN["pad_token_id"]
RAN = {"kind": "recurrent", "max_positions": 64}
SYN = {"kind": "random_synthesizer", "max_positions": 64}
# Presets and layouts with a fast path; `length_ratio` 1.3 moves hard-coded cross centres off the diagonal.
LAYOUTS = {
    "hc-sa": None,
    "hc-sa-conv": None,
    "hc-sa-index": None,
    "hc-all": None,
    "sh-x": None,
    "hard-all": None,
    "ran-all": {"encoder_self": RAN, "decoder_self": RAN},
    "syn-r": {"encoder_self": SYN, "decoder_self": SYN},
    "local-renormalized": {
        "encoder_self": {
            "kind": "local",
            "masks": ["identity", "prev-1", "next-2", "band-2", "band-1"],
            "query_key_sets": 3,
            "renormalize": True,
        },
        "decoder_self": {"kind": "local", "masks": ["prev-1", "band-2", "next-1", "identity"], "renormalize": True},
    },
    "hc-sigma2-window5": {
        "encoder_self": {"kind": "hard_coded", "sigma": 2.0, "window": 5, "offsets": [-2, 0, 3]},
        "decoder_self": {
            "groups": [
                {"kind": "hard_coded", "num_heads": 2, "sigma": 2.0, "offsets": [-3, 0]},
                {"kind": "hard_coded", "indexing": True, "offsets": [-1]},
            ]
        },
        "cross": {"kind": "hard_coded", "centre": "continuous", "window": 3},
    },
}
# Long enough for the convolution path (4 × taps <= length) in float64: windowed encoder heads (10 taps at most),
# causal decoder heads at σ = 1 (radius 8 from offset -1: 10 taps). Unwindowed encoder heads (19 taps) take it in the
# module and BERT tests.
SOURCE_LENGTH, TARGET_LENGTH = 48, 40


def padded_batch(length, seed):
    """Two rows of random tokens, the second right-padded by a third."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, PAD, (2, length), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, 2 * length // 3 :], mask[1, 2 * length // 3 :] = PAD, 0
    return ids, mask


def both_paths(model, function):
    """(fast, reference) results of `function()`."""
    set_attention_fast_paths(model, True)
    fast = function()
    set_attention_fast_paths(model, False)
    reference = function()
    set_attention_fast_paths(model, True)
    return fast, reference


# --- hand computations ---------------------------------------------------------------------------


def test_gaussian_radius_drops_less_than_half_an_ulp():
    # σ = 1, weights relative to the peak are exp(-r²/2). Beyond 5 (both sides): 2·(e^-18 + e^-24.5 + ...)
    # = 3.05e-8 <= 2^-24 = 5.96e-8 (half an ulp in float32); beyond 4: 2·e^-12.5 = 7.5e-6 is not.
    assert gaussian_radius(1.0, torch.float32) == 5
    # float64: 2·e^-40.5 = 5.1e-18 <= 2^-53 = 1.1e-16 beyond 8; beyond 7: 2·e^-32 = 2.5e-14 is not.
    assert gaussian_radius(1.0, torch.float64) == 8
    # σ = 2 doubles the distances: exp(-r²/8) <= ... first holds beyond r = 11.
    assert gaussian_radius(2.0, torch.float32) == 11


def test_depthwise_convolution_by_hand():
    # two heads of one channel each: head 0 at distances -1, 0, +1; head 1 at +1, +2, +3 (all after the query)
    value = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 10.0, 100.0, 1000.0]]).view(1, 2, 4, 1)
    # out[i] = 0.5·v[i-1] + v[i] + 0.25·v[i+1], zero outside: [0+1+0.5, 0.5+2+0.75, 1+3+1, 1.5+4+0]
    kernel = torch.tensor([[0.5, 1.0, 0.25]]).view(1, 1, 3)
    output = depthwise_convolution(value[:, :1], kernel, first_distance=-1)
    assert output.flatten().tolist() == [1.5, 3.25, 5.0, 5.5]
    # out[i] = v[i+1] + v[i+2] + v[i+3]: [1110, 1100, 1000, 0]
    output = depthwise_convolution(value[:, 1:], torch.ones(1, 1, 3), first_distance=1)
    assert output.flatten().tolist() == [1110.0, 1100.0, 1000.0, 0.0]
    # both heads at once, each with its own kernel; two channels per head take the head's kernel
    both = depthwise_convolution(
        value.expand(1, 2, 4, 2),
        torch.tensor([[0.5, 1.0, 0.25, 0.0], [0.0, 0.0, 0.0, 1.0]]).repeat_interleave(2, 0)[:, None],
        -1,
    )
    assert both[0, 0, :, 1].tolist() == [1.5, 3.25, 5.0, 5.5]
    assert both[0, 1, :, 0].tolist() == [100.0, 1000.0, 0.0, 0.0]  # head 1 reads distance +2 only


def test_decoding_kernel_of_the_conv_variant_is_the_papers():
    config = SimpleAttnMarianConfig(**TINY_MARIAN)
    spec = HardCodedGaussianHeads.normalize_spec(
        {"kind": "hard_coded", "num_heads": 2, "offsets": [-1, 0], "window": 3}, "decoder_self", "test"
    )
    heads = HardCodedGaussianHeads(spec, config, "decoder_self", 0, head_dim=1)
    first, last = heads.kernel_reach(True, torch.float32)
    kernel = heads.relative_kernel(True, torch.float32, torch.device("cpu"))
    # distances -2, -1, 0: head centred on i-1 keeps [0.242, 0.399, 0.242]; head on i keeps [0, 0.242, 0.399]
    # (its +1 tap is cut by the causal mask). A cached step reads the last 2 earlier positions.
    assert (first, last) == (-2, 0) and heads.decoding_lookback(torch.float32) == 2
    assert_hand_computed(kernel, [[0.241971, 0.398942, 0.241971], [0.0, 0.241971, 0.398942]], decimals=6)


# --- hard-coded heads, module level ------------------------------------------------------------------

SPECS = [
    {"offsets": [-1, 1]},
    {"offsets": [-1, 1], "window": 3},
    {"offsets": [-1, 1], "indexing": True},
    {"offsets": [-2, 0, 3], "sigma": 2.0},
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
@pytest.mark.parametrize("site", ["encoder_self", "decoder_self", "cross"])
@pytest.mark.parametrize("length", [9, 96])
def test_hard_coded_heads_fast_equals_reference(spec, site, length):
    config = SimpleAttnMarianConfig(**{**TINY_MARIAN, "length_ratio": 0.7})
    if site == "decoder_self":
        spec = {**spec, "offsets": [min(o, 0) for o in spec["offsets"]]}
    spec = HardCodedGaussianHeads.normalize_spec({"kind": "hard_coded", "num_heads": 3, **spec}, site, "test")
    heads = HardCodedGaussianHeads(spec, config, site, 0, head_dim=4)
    value = torch.randn(2, 3, length, 4, dtype=torch.float64)  # in float64: only rounding separates the paths
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, length // 2 :] = False
    context = AttentionContext(mask, 0, length, is_causal=site == "decoder_self")
    heads.fast_path = True
    fast, _ = heads(None, None, value, context)
    reference, weights = heads(None, None, value, context, output_attentions=True)
    assert_same_maths(fast, reference, reduction=length)
    assert_same_maths(torch.matmul(weights, value), reference, reduction=length)
    heads.fast_path = False
    assert torch.equal(heads(None, None, value, context)[0], reference)


def test_hard_coded_tables_are_memoised_within_a_bounded_memo(monkeypatch):
    clear_memos()
    memo = memo_for("gaussian_tables")
    monkeypatch.setattr(memo, "max_bytes", 4 * 2**10)
    config = SimpleAttnMarianConfig(**TINY_MARIAN)
    spec = HardCodedGaussianHeads.normalize_spec({"kind": "hard_coded", "num_heads": 2}, "cross", "test")
    heads = HardCodedGaussianHeads(spec, config, "cross", 0, head_dim=1)
    value = torch.randn(1, 2, 16, 1)
    for start in range(20):  # each decoding step has its own (heads, 1, 16) table: 128 bytes
        heads(None, None, value, AttentionContext(None, start, 1, False))
    assert len(memo.tensors) == 20
    heads(None, None, value, AttentionContext(None, 0, 16, False))  # (2, 16, 16) floats: 2 KiB
    assert memo.held_bytes() <= 4 * 2**10 and len(memo.tensors) < 21


@pytest.mark.parametrize("masks, sets", [("band-2", 4), (["identity", "prev-1", "next-2", "band-1", "band-3"], 3)])
@pytest.mark.parametrize("site", ["encoder_self", "decoder_self"])
@pytest.mark.parametrize("length", [1, 7, 40, 240])  # 240: the banded path (32 keys per tap and more)
def test_renormalized_local_heads_banded_equals_reference(masks, sets, site, length):
    config = SimpleAttnMarianConfig(**TINY_MARIAN)
    spec = LocalMaskHeads.normalize_spec(
        {"kind": "local", "num_heads": 5, "masks": masks, "query_key_sets": sets, "renormalize": True}, site, "test"
    )
    heads = LocalMaskHeads(spec, config, site, 0, head_dim=4)
    # In float64: only rounding separates the paths.
    query, key = (torch.randn(2, sets, length, 4, dtype=torch.float64) for _ in range(2))
    value = torch.randn(2, 5, length, 4, dtype=torch.float64)
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, length // 2 + 1 :] = False
    causal = site == "decoder_self"
    # scores (4 terms), softmax and renormalisation over the keys, weights·values: 4 reductions
    bound = dict(reduction=max(length, 4), depth=4)
    for padding in (None, mask):
        context = AttentionContext(padding, 0, length, causal)
        reference, _ = heads(query, key, value, context, output_attentions=True)
        assert_same_maths(heads(query, key, value, context)[0], reference, **bound)
        step = AttentionContext(padding, length - 1, 1, causal)  # a cached decoding step
        last = query[:, :, -1:]
        reference, _ = heads(last, key, value, step, output_attentions=True)
        assert_same_maths(heads(last, key, value, step)[0], reference, **bound)


# --- whole models: forward, cached decoding, generate -------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_model_fast_paths_equal_reference(name):
    model = make_model(name, LAYOUTS[name]).double()  # in float64: only rounding separates the paths
    source, source_mask = padded_batch(SOURCE_LENGTH, seed=1)
    target, _ = padded_batch(TARGET_LENGTH, seed=2)
    target[:, 0] = PAD  # decoder start

    with torch.no_grad():
        fast, reference = both_paths(
            model, lambda: model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target).logits
        )
        assert_same_maths(fast, reference, **model_reductions(model.config))

        # Step by step with the cache (fast paths, sliding windows) equals the reference full forward.
        steps, cache = cached_steps(model, source, source_mask, target)
        assert_same_maths(steps, reference, **model_reductions(model.config))
        assert cache.get_seq_length() == TARGET_LENGTH

        for num_beams in (1, 3):
            kwargs = dict(
                input_ids=source,
                attention_mask=source_mask,
                max_new_tokens=20,
                min_new_tokens=20,
                num_beams=num_beams,
                do_sample=False,
            )
            fast, reference = both_paths(model, lambda: model.generate(**kwargs))
            assert torch.equal(fast, reference)


@pytest.mark.parametrize("name", ["hard-dec", "hard-cross", "hc-all", "base"])
def test_cross_values_zeroed_once_when_the_cache_is_filled(name):
    """Cross attention whose groups all take zeroed padding (hard retrieval, hard-coded) caches its values zeroed at
    the padded keys, once per generate, and its steps skip the zeroing: cached steps equal the reference forward, also
    for a source of padding only (zero outputs where no key is real). `dot` keeps its values as projected."""
    model = make_model(name).double()  # in float64: only rounding separates the paths
    source, source_mask = padded_batch(SOURCE_LENGTH, seed=1)
    source, source_mask = torch.cat([source, source[:1]]), torch.cat([source_mask, torch.zeros_like(source_mask[:1])])
    target, _ = padded_batch(TARGET_LENGTH, seed=2)
    target = torch.cat([target, target[:1]])
    target[:, 0] = PAD  # decoder start
    with torch.no_grad():
        set_attention_fast_paths(model, False)
        reference = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target).logits
        set_attention_fast_paths(model, True)
        steps, cache = cached_steps(model, source, source_mask, target)
    assert_same_maths(steps, reference, **model_reductions(model.config))
    padded = ~source_mask.bool()
    for layer in cache.cross_attention_cache.layers:
        padded_values = layer.values.transpose(1, 2)[padded]  # (padded keys, heads, head_dim)
        assert (padded_values == 0).all() == (name != "base")


@pytest.mark.parametrize("name, kept", [("hc-sa-conv", 2), ("hc-sa-index", 1), ("hc-sa", 6), ("sh-x", 6)])
def test_windowed_decoder_cache_keeps_only_the_window(name, kept):
    """Hard-coded decoder self attention reads the last `kept` earlier positions only (σ = 1: radius 5
    around offset -1 gives 6; window 3 gives 2; indexing at -1 gives 1), so the cache drops the rest
    but still counts every position; beam search reorders the window."""
    # In float32, whose radius the windows are: the tokens of the two paths could swap on a near tie, but the closest
    # candidates here are about 5e-5 apart and the paths' scores differ by rounding (a few 1e-6).
    model = make_model(name, LAYOUTS[name])
    source, source_mask = padded_batch(12, seed=3)
    kwargs = dict(
        input_ids=source,
        attention_mask=source_mask,
        max_new_tokens=15,
        min_new_tokens=15,
        do_sample=False,
        return_dict_in_generate=True,
    )
    with torch.no_grad():
        for num_beams in (1, 3):
            output = model.generate(**kwargs, num_beams=num_beams)
            self_cache = output.cache.self_attention_cache
            assert self_cache.get_seq_length() == 15
            assert {layer.values.shape[-2] for layer in self_cache.layers} == {kept}
            set_attention_fast_paths(model, False)
            reference = model.generate(**kwargs, num_beams=num_beams)
            set_attention_fast_paths(model, True)
            assert torch.equal(output.sequences, reference.sequences)
            assert {layer.values.shape[-2] for layer in reference.cache.self_attention_cache.layers} == {15}


def test_sliding_cache_layer_counts_dropped_positions():
    layer = SimpleAttnCacheLayer()
    for step in range(5):
        value = torch.full((2, 1, 1, 3), float(step))
        layer.update(value[:, :0], value)
        layer.keep_last(2)
    assert layer.get_seq_length() == 5 and layer.values[0, 0, :, 0].tolist() == [3.0, 4.0]
    layer.reorder_cache(torch.tensor([1, 0]))
    assert layer.values.shape == (2, 1, 2, 3) and layer.get_seq_length() == 5
    with pytest.raises(ValueError, match="cannot be cropped"):
        layer.crop(-1)


def test_cross_cache_skips_the_beam_reorder_but_reorders_states():
    """Beam search permutes the beams of each sentence; cross-attention rows are equal within a sentence."""
    layer = SimpleAttnCacheLayer(beam_invariant=True)
    rows = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 1, 3, 2)
    keys, values = layer.update(rows, rows)
    layer.states["means"] = torch.arange(4.0).view(4, 1)
    layer.reorder_cache(torch.tensor([1, 1, 2, 3]))
    assert layer.keys is keys and layer.values is values
    assert layer.states["means"].flatten().tolist() == [1.0, 1.0, 2.0, 3.0]
    layer.batch_select_indices(torch.tensor([0, 2]))  # selecting rows still applies
    assert layer.values[:, 0, 0, 0].tolist() == [0.0, 2.0]


def test_output_attentions_use_the_reference_path_and_the_same_outputs():
    model = make_model("hc-sa", LAYOUTS["hc-sa"]).double()  # in float64: only rounding separates the paths
    source, source_mask = padded_batch(SOURCE_LENGTH, seed=4)
    target, _ = padded_batch(8, seed=5)
    with torch.no_grad():
        plain = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target)
        with_weights = model(
            input_ids=source, attention_mask=source_mask, decoder_input_ids=target, output_attentions=True
        )
    assert_same_maths(with_weights.logits, plain.logits, **model_reductions(model.config))
    assert with_weights.encoder_attentions[0].shape == (2, 4, SOURCE_LENGTH, SOURCE_LENGTH)


@pytest.mark.parametrize("name", ["hc-sa", "ran-all", "syn-r"])
def test_tables_memoised_in_inference_mode_do_not_reach_training(name):
    model = make_model(name, LAYOUTS[name])
    source, source_mask = padded_batch(SOURCE_LENGTH, seed=6)
    labels, _ = padded_batch(TARGET_LENGTH, seed=7)
    no_padding = torch.ones_like(source_mask)
    with torch.inference_mode():
        model.generate(input_ids=source, attention_mask=no_padding, max_new_tokens=5)
    model.train()
    model(input_ids=source, attention_mask=no_padding, labels=labels).loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["ran-all", "syn-r"])
def test_memoised_position_weights_follow_parameter_updates(name):
    model = make_model(name, LAYOUTS[name]).double()  # in float64: only rounding separates the paths
    source, _ = padded_batch(16, seed=8)
    no_padding = torch.ones_like(source)
    target = source[:, :10]
    with torch.no_grad():
        before = model(input_ids=source, attention_mask=no_padding, decoder_input_ids=target).logits
        for parameter in model.parameters():
            if parameter.dim() == 3:  # A0 or the synthesizer's logits
                parameter.mul_(-2.0)
        fast, reference = both_paths(
            model, lambda: model(input_ids=source, attention_mask=no_padding, decoder_input_ids=target).logits
        )
    assert not torch.allclose(fast, before)
    assert_same_maths(fast, reference, **model_reductions(model.config))


BERT_LAYOUTS = {
    "syn-r": {"encoder_self": {**SYN, "max_positions": 128}},
    "band2": {"encoder_self": {"kind": "local", "masks": "band-2", "renormalize": True}},
}


@pytest.mark.parametrize("preset", ["hc-sa", "hc-sa-conv", "hc-sa-index", "hard-all", "syn-r", "band2"])
def test_bert_encoder_fast_paths_equal_reference(preset):
    torch.manual_seed(0)
    layout = {"attention_layout": BERT_LAYOUTS[preset]} if preset in BERT_LAYOUTS else {}
    config = SimpleAttnBertConfig.from_preset(
        preset,
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=128,
        **layout,
    )
    model = SimpleAttnBertModel(config).eval().double()  # in float64: only rounding separates the paths
    # 80 positions: σ = 1 encoder heads take the convolution path in float64 (4 × 19 taps <= length)
    ids = torch.randint(1, 50, (2, 80), generator=torch.Generator().manual_seed(9))
    mask = torch.ones_like(ids)
    mask[1, 40:] = 0
    for attention_mask in (mask, torch.ones_like(mask)):
        with torch.no_grad():
            fast, reference = both_paths(
                model, lambda: model(input_ids=ids, attention_mask=attention_mask).last_hidden_state
            )
        assert_same_maths(fast, reference, **model_reductions(config))
