"""Caches built the transformers way (`DynamicCache(config=...)`, `DynamicCache()`,
`EncoderDecoderCache(DynamicCache(), DynamicCache())`) work with every attention family, in greedy and beam search and
step by step: the model takes them over in place (`cache.decoder_cache_for`). What cannot hold a family's decoding
state (a cache another model filled) is refused with an error naming it and what to pass instead. Static caches:
tests/test_static_cache.py.
"""

import re

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache, StaticCache

from hf_simple_attn.modeling.cache import SimpleAttnCacheLayer

from conftest import TINY_MARIAN, assert_same_maths, make_model, model_reductions


pytestmark = pytest.mark.numerics


PAD = TINY_MARIAN["pad_token_id"]
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0, PAD, PAD, PAD]])
SOURCE_MASK = (SOURCE != PAD).long()
TARGET = torch.tensor([[PAD, 14, 15, 16, 17, 18], [PAD, 19, 20, 21, 22, 23]])
# One preset of each family, and the layouts whose caches differ: windowed hard-coded self attention (`keep_last`),
# a decoder without self attention (empty cache layers that count positions), cross attention in one layer only,
# the GMM synthesis network (its running means in the cache layers' `states`); the `local` presets are local in the
# encoder only, so one layout has it in the decoder; and one with every family at every site it allows.
EVERY_FAMILY = {
    site: {"head_dim": 8, "groups": [{"kind": kind, "num_heads": 1} for kind in kinds]}
    for site, kinds in {
        "encoder_self": ["dot", "hard_coded", "hard_retrieval", "local", "random_synthesizer", "recurrent"],
        "decoder_self": ["dot", "hard_coded", "hard_retrieval", "local", "random_synthesizer", "recurrent"],
        "cross": ["dot", "gaussian_mixture", "hard_coded", "hard_retrieval"],
    }.items()
}
CASES = {  # name: (preset, layout)
    **{
        preset: (preset, None)
        for preset in ("base", "hc-sa", "hc-all", "ran-d", "syn-r", "local-all", "gmm", "gmm-synthesis", "hard-dec")
    },
    "base-no-sa": ("base-no-sa", None),
    "sh-x": ("sh-x", None),
    "local-decoder": (None, {"decoder_self": {"kind": "local", "masks": ["prev-1", "identity", "prev-2", "band-2"]}}),
    "every-family": (None, EVERY_FAMILY),
}
USER_CACHES = {
    "DynamicCache(config)": lambda model: DynamicCache(config=model.config),
    "DynamicCache()": lambda model: DynamicCache(),
    "EncoderDecoderCache(DynamicCache(config), DynamicCache(config))": lambda model: EncoderDecoderCache(
        DynamicCache(config=model.config), DynamicCache(config=model.config)
    ),
    "EncoderDecoderCache(DynamicCache(), DynamicCache())": lambda model: EncoderDecoderCache(
        DynamicCache(), DynamicCache()
    ),
    "model.new_cache()": lambda model: model.new_cache(),
}


def generate(model, num_beams: int, **kwargs):
    return model.generate(
        input_ids=SOURCE,
        attention_mask=SOURCE_MASK,
        max_new_tokens=7,
        num_beams=num_beams,
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
        **kwargs,
    )


def decoder_cache_of(cache):
    """The self-attention half of what the user passed: the cache itself, or its self-attention cache."""
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("case", CASES)
def test_generate_with_a_user_built_cache_equals_generate_with_ours(case, num_beams):
    model = make_model(*CASES[case]).double()
    with torch.no_grad():
        expected = generate(model, num_beams)
        for name, build in USER_CACHES.items():
            cache = build(model)
            output = generate(model, num_beams, cache=cache)
            assert output.sequences.tolist() == expected.sequences.tolist(), name
            if num_beams > 1:
                assert_same_maths(output.sequences_scores, expected.sequences_scores, **model_reductions(model.config))
            # The object the user holds is the one generate filled: the returned cache, or its self-attention half.
            returned = output.cache
            assert (
                returned is cache if isinstance(cache, EncoderDecoderCache) else returned.self_attention_cache is cache
            )
            assert all(isinstance(layer, SimpleAttnCacheLayer) for layer in decoder_cache_of(cache).layers), name
            assert decoder_cache_of(cache).get_seq_length() == output.sequences.shape[1] - 1, name


@pytest.mark.parametrize("case", CASES)
def test_decoding_step_by_step_with_a_user_built_cache_equals_the_full_forward(case):
    """The user's `EncoderDecoderCache` passed again at each step (the object the model fills); a plain `DynamicCache`
    passed once, then the `EncoderDecoderCache` the model returns around it."""
    model = make_model(*CASES[case]).double()
    with torch.no_grad():
        full = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
        encoder_outputs = model.get_encoder()(input_ids=SOURCE, attention_mask=SOURCE_MASK)
        for name in ("EncoderDecoderCache(DynamicCache(config), DynamicCache(config))", "DynamicCache(config)"):
            user_cache = cache = USER_CACHES[name](model)
            steps = []
            for position in range(TARGET.shape[1]):
                output = model(
                    encoder_outputs=encoder_outputs,
                    attention_mask=SOURCE_MASK,
                    decoder_input_ids=TARGET[:, position : position + 1],
                    cache=cache,
                    use_cache=True,
                )
                if isinstance(user_cache, EncoderDecoderCache):
                    assert output.cache is user_cache
                else:
                    assert output.cache.self_attention_cache is user_cache
                    cache = output.cache
                steps.append(output.logits)
            assert_same_maths(torch.cat(steps, dim=1), full, **model_reductions(model.config))


def test_a_plain_dynamic_cache_passed_at_every_step_recomputes_the_cross_attention():
    """Without the returned `EncoderDecoderCache`, each step projects the encoder output again: same logits."""
    model = make_model("hc-sa").double()
    with torch.no_grad():
        full = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
        encoder_outputs = model.get_encoder()(input_ids=SOURCE, attention_mask=SOURCE_MASK)
        cache = DynamicCache(config=model.config)
        steps = [
            model(
                encoder_outputs=encoder_outputs,
                attention_mask=SOURCE_MASK,
                decoder_input_ids=TARGET[:, position : position + 1],
                cache=cache,
                use_cache=True,
            ).logits
            for position in range(TARGET.shape[1])
        ]
    assert_same_maths(torch.cat(steps, dim=1), full, **model_reductions(model.config))


def test_a_plain_dynamic_cache_passed_again_cannot_carry_the_running_means_of_the_gmm_synthesis_network():
    """Those means live in the cross-attention cache, which only the returned `EncoderDecoderCache` holds."""
    model = make_model("gmm-synthesis")
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=SOURCE, attention_mask=SOURCE_MASK)
        step = dict(encoder_outputs=encoder_outputs, attention_mask=SOURCE_MASK, cache=cache, use_cache=True)
        model(decoder_input_ids=TARGET[:, :1], **step)
        with pytest.raises(RuntimeError, match="needs the cache that holds the running sum"):
            model(decoder_input_ids=TARGET[:, 1:2], **step)


def filled_transformers_cache(cache: EncoderDecoderCache) -> EncoderDecoderCache:
    """The same keys and values in transformers' own `DynamicLayer`s (as another model or code would leave them)."""
    return EncoderDecoderCache(
        *(
            DynamicCache([(layer.keys, layer.values) for layer in half.layers])
            for half in (cache.self_attention_cache, cache.cross_attention_cache)
        )
    )


def test_a_dot_product_model_continues_a_cache_of_transformers_layers():
    """`dot` heads keep nothing but keys and values: a filled `DynamicLayer` cache is adopted."""
    model = make_model("base").double()
    with torch.no_grad():
        full = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
        prefix = model(
            input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET[:, :4], cache=model.new_cache()
        )
        cache = filled_transformers_cache(prefix.cache)
        step = model(
            input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET[:, 4:], cache=cache, use_cache=True
        )
    assert step.cache is cache and cache.get_seq_length() == TARGET.shape[1]
    assert_same_maths(step.logits, full[:, 4:], **model_reductions(model.config))


@pytest.mark.parametrize("preset", ["hc-sa", "gmm-synthesis", "base-no-sa"])
def test_a_cache_of_transformers_layers_filled_elsewhere_is_refused_where_it_lacks_decoding_state(preset):
    model = make_model(preset)
    with torch.no_grad():
        prefix = model(
            input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET[:, :4], cache=model.new_cache()
        )
        cache = filled_transformers_cache(prefix.cache)
        message = rf"\(DynamicCache\) already holds keys and values .*preset '{preset}'.*model\.new_cache\(\)"
        with pytest.raises(ValueError, match=message):
            model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET[:, 4:], cache=cache)
    # Refused before any change: the caller's cache still holds transformers' layers.
    assert all(type(layer).__name__ == "DynamicLayer" for layer in cache.self_attention_cache.layers)


def test_a_static_cache_filled_elsewhere_is_refused():
    model = make_model("hc-sa")
    cache = EncoderDecoderCache(
        StaticCache(config=model.config, max_cache_len=16), StaticCache(config=model.config, max_cache_len=7)
    )
    cache.self_attention_cache.update(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8), 0)
    message = r"\(StaticCache\) already holds keys and values at layer 0.*only an empty DynamicCache or StaticCache"
    with torch.no_grad(), pytest.raises(ValueError, match=message):
        model(input_ids=SOURCE, decoder_input_ids=TARGET, cache=cache, use_cache=True)


def test_a_legacy_tuple_cache_is_refused():
    model = make_model("base")
    legacy = tuple((torch.zeros(2, 4, 1, 8),) * 4 for _ in range(3))
    with pytest.raises(TypeError, match=r"Passing a tuple for `cache` is not supported anymore.*model\.new_cache\(\)"):
        model(input_ids=SOURCE, decoder_input_ids=TARGET[:, :1], cache=legacy, use_cache=True)


def test_an_unknown_attn_implementation_is_refused_in_transformers_words():
    model = make_model("base")
    with pytest.raises(ValueError, match=re.escape('Specified `attn_implementation="foo"` is not supported')):
        model.set_attn_implementation("foo")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("preset", ["sh-x", "base-no-sa", "hc-sa", "hard-dec"])
def test_prompt_lookup_and_assisted_decoding_with_attentions_equal_greedy(preset):
    """They crop the cache (windowed hard-coded heads keep every position until then) and split the weights per token
    (absent sublayers give weights of zero heads)."""
    model = make_model(preset)
    source = SOURCE[:1, :4]
    with torch.no_grad():
        greedy = model.generate(input_ids=source, max_new_tokens=12)
        prompt = greedy[:, :6]  # repeats itself with these weights: prompt lookup proposes tokens, some rejected
        expected = model.generate(input_ids=source, decoder_input_ids=prompt, max_new_tokens=6)
        for mode in ({"prompt_lookup_num_tokens": 3}, {"assistant_model": make_model("base")}):
            output = model.generate(
                input_ids=source,
                decoder_input_ids=prompt,
                max_new_tokens=6,
                output_attentions=True,
                return_dict_in_generate=True,
                **mode,
            )
            torch.testing.assert_close(output.sequences, expected, rtol=0, atol=0)
            for layer, weights in enumerate(output.cross_attentions[-1]):
                heads = 0 if model.config.attention_layout["cross"][layer] is None else weights.shape[1]
                assert weights.shape[1] == heads and weights.shape[-1] == source.shape[1]


def test_prompt_lookup_decoding_is_refused_where_the_decoding_state_cannot_be_cropped():
    model = make_model("gmm-synthesis")
    with torch.no_grad(), pytest.raises(ValueError, match=r"prompt-lookup decoding .*synthesis network"):
        model.generate(input_ids=SOURCE[:1], max_new_tokens=4, prompt_lookup_num_tokens=3)
