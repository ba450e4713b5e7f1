"""Static decoding caches (`generate(..., cache_implementation="static")`, a user-built
`EncoderDecoderCache(StaticCache(...), StaticCache(...))`) for every seq2seq preset: the same tokens as the dynamic
cache in greedy search, beam search and sampling, the same logits step by step, buffers filled and reordered in place,
a clear error past max_cache_len, and compiled decoding steps (one graph, no break) that equal eager ones.
"""

import pytest
import torch
from test_user_caches import EVERY_FAMILY
from transformers import CompileConfig, DynamicCache, EncoderDecoderCache, StaticCache

from hf_simple_attn.modeling.cache import SimpleAttnStaticLayer
from hf_simple_attn.modeling.presets import list_presets

from conftest import TINY_MARIAN, assert_same_maths, cached_steps, make_model, model_reductions


PAD = TINY_MARIAN["pad_token_id"]
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0, PAD, PAD, PAD], [14, 15, 16, 17, 0, PAD, PAD]])
SOURCE_MASK = (SOURCE != PAD).long()
TARGET = torch.tensor([[PAD, 14, 15, 16, 17, 18], [PAD, 19, 20, 21, 22, 23], [PAD, 24, 25, 26, 27, 28]])
NEW_TOKENS = 8
# Every preset, and layouts no preset has: `local` heads in the decoder, every family at every site it allows.
CASES = {
    **{preset: (preset, None) for preset in list_presets("seq2seq")},
    "local-decoder": (None, {"decoder_self": {"kind": "local", "masks": ["prev-1", "identity", "prev-2", "band-2"]}}),
    "every-family": (None, EVERY_FAMILY),
}
# One preset of each family, and SH-X (cross attention in one layer only).
COMPILED_PRESETS = ["base", "hc-sa", "sh-x", "ran-all", "hard-dec", "gmm", "local-all"]


def step_inputs(encoder_outputs, position: int) -> dict:
    """The inputs of one cached decoding step of TARGET at `position` (the cache passed apart)."""
    return {
        "encoder_outputs": encoder_outputs,
        "attention_mask": SOURCE_MASK,
        "decoder_input_ids": TARGET[:, position : position + 1],
        "use_cache": True,
    }


def generate(model, **kwargs):
    return model.generate(input_ids=SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=NEW_TOKENS, **kwargs)


def user_static_cache(model, max_cache_len: int = NEW_TOKENS + 1) -> EncoderDecoderCache:
    return EncoderDecoderCache(
        StaticCache(config=model.config, max_cache_len=max_cache_len),
        StaticCache(config=model.config, max_cache_len=SOURCE.shape[1]),
    )


def buffers(cache: EncoderDecoderCache) -> list[int]:
    """The data pointers of every buffer of a static cache: keys, values, positions and family state."""
    pointers = []
    for half in (cache.self_attention_cache, cache.cross_attention_cache):
        for layer in (layer for layer in half.layers if layer.is_initialized):  # not where a sublayer is absent
            tensors = [layer.keys, layer.values, layer.cumulative_length, *layer.states.values()]
            pointers += [tensor.data_ptr() for tensor in tensors if tensor.numel()]
    return pointers


@pytest.mark.parametrize("case", CASES)
def test_static_generate_equals_dynamic_in_greedy_beam_and_sampling(case):
    model = make_model(*CASES[case])
    with torch.no_grad():
        for options in ({"num_beams": 1}, {"num_beams": 4}, {"do_sample": True, "top_k": 0}):
            outputs = []
            for cache_implementation in (None, "static"):
                torch.manual_seed(0)
                outputs.append(generate(model, cache_implementation=cache_implementation, **options))
            torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0, msg=str(options))


@pytest.mark.numerics
@pytest.mark.parametrize("case", CASES)
def test_a_user_built_static_cache_is_filled_in_place_with_the_logits_of_the_dynamic_one(case):
    model = make_model(*CASES[case])
    cache = user_static_cache(model)
    with torch.no_grad():
        logits, returned = cached_steps(model, SOURCE, SOURCE_MASK, TARGET[:, :2], cache=cache)
        assert returned is cache
        halves = (cache.self_attention_cache, cache.cross_attention_cache)
        assert all(isinstance(layer, SimpleAttnStaticLayer) for half in halves for layer in half.layers)
        pointers = buffers(cache)
        # Beam search's reordering, then more steps: in place, the same logits as the dynamic cache reordered alike.
        beam_idx = torch.tensor([2, 0, 0])
        dynamic = model.new_cache()
        expected, _ = cached_steps(model, SOURCE, SOURCE_MASK, TARGET[:, :2], cache=dynamic)
        dynamic.reorder_cache(beam_idx)
        cache.reorder_cache(beam_idx)
        # The cross-attention caches are not reordered (beam search permutes the beams of a sentence only).
        encoder_outputs = model.get_encoder()(input_ids=SOURCE, attention_mask=SOURCE_MASK)
        for position in range(2, TARGET.shape[1]):
            step = step_inputs(encoder_outputs, position)
            expected = torch.cat([expected, model(**step, cache=dynamic).logits], dim=1)
            logits = torch.cat([logits, model(**step, cache=cache).logits], dim=1)
    assert_same_maths(logits, expected, **model_reductions(model.config))
    assert buffers(cache) == pointers


@pytest.mark.parametrize("case", ["hc-sa", "ran-d", "gmm-synthesis"])
def test_generate_fills_a_user_built_static_cache(case):
    model = make_model(case)
    cache = user_static_cache(model)
    with torch.no_grad():
        expected = generate(model, num_beams=4)
        output = generate(model, num_beams=4, cache=cache, return_dict_in_generate=True)
    torch.testing.assert_close(output.sequences, expected, rtol=0, atol=0)
    assert output.cache is cache


def test_decoding_past_max_cache_len_raises_naming_it():
    model = make_model("hc-sa")
    with torch.no_grad(), pytest.raises(ValueError, match=r"max_cache_len=4 positions, and 4 are written"):
        generate(model, cache=user_static_cache(model, max_cache_len=4))


def test_a_static_self_attention_cache_with_a_dynamic_cross_attention_cache_works():
    model = make_model("gmm-synthesis")
    with torch.no_grad():
        expected = generate(model, num_beams=4)
        cache = EncoderDecoderCache(StaticCache(config=model.config, max_cache_len=NEW_TOKENS + 1), DynamicCache())
        torch.testing.assert_close(generate(model, num_beams=4, cache=cache), expected, rtol=0, atol=0)


@pytest.mark.parametrize("preset", [*COMPILED_PRESETS, "gmm-synthesis"])
def test_a_compiled_static_decoding_step_returns_only_its_logits(preset, dynamo_counters):
    """A CUDA graph's outputs are overwritten by its next replay, so a compiled decoding step may return nothing that
    outlives the step but its logits (which `generate` copies): a family that bound a new state tensor to the cache
    at each step, instead of writing into its buffer, would add an output to the graph (gmm-synthesis: running
    means)."""
    returned = []

    def recording_backend(graph_module, example_inputs):
        (outputs,) = [node.args[0] for node in graph_module.graph.nodes if node.op == "output"]
        returned.append([tuple(node.meta["example_value"].shape) for node in outputs])
        return graph_module.forward

    model = make_model(preset)
    compile_config = CompileConfig(backend=recording_backend, mode=None, fullgraph=True)
    with torch.no_grad():
        generate(model, cache_implementation="static", compile_config=compile_config)
    assert returned == [[(SOURCE.shape[0], 1, model.config.vocab_size)]]


@pytest.mark.numerics
@pytest.mark.parametrize("preset", COMPILED_PRESETS)
def test_compiled_static_decoding_steps_have_one_graph_and_equal_eager(preset, dynamo_counters):
    model = make_model(preset)
    compile_config = CompileConfig(backend="aot_eager", mode=None, fullgraph=True)
    with torch.no_grad():
        for options in ({"num_beams": 1}, {"do_sample": True, "top_k": 0}):
            torch.manual_seed(0)
            expected = generate(model, cache_implementation="static", **options)
            torch.manual_seed(0)
            compiled = generate(model, cache_implementation="static", compile_config=compile_config, **options)
            torch.testing.assert_close(compiled, expected, rtol=0, atol=0, msg=str(options))
        # Beam search runs its steps eagerly; the step compiled directly takes its batch of beams and reordering.
        compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
        cache = user_static_cache(model)
        prefix, _ = cached_steps(model, SOURCE, SOURCE_MASK, TARGET[:, :1], cache=cache)
        dynamic = model.new_cache()
        cached_steps(model, SOURCE, SOURCE_MASK, TARGET[:, :1], cache=dynamic)
        encoder_outputs = model.get_encoder()(input_ids=SOURCE, attention_mask=SOURCE_MASK)
        for position in range(1, TARGET.shape[1]):
            step = step_inputs(encoder_outputs, position)
            assert_same_maths(
                compiled_model(**step, cache=cache).logits,
                model(**step, cache=dynamic).logits,
                **model_reductions(model.config),
            )
            cache.reorder_cache(torch.tensor([1, 2, 0]))
            dynamic.reorder_cache(torch.tensor([1, 2, 0]))
    assert dynamo_counters["graph_break"] == {}
    # One graph for generate's steps (greedy and sampling alike) and one for the batch of beams compiled directly.
    assert dynamo_counters["stats"]["unique_graphs"] == 2
