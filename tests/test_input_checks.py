"""Run-time inputs checked once at the models' entry: mask shapes, empty inputs, lengths beyond `max_positions`."""

import re

import pytest
import torch

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig, SimpleAttnMarianMTModel

from conftest import TINY_BERT, TINY_MARIAN, assert_same_maths, model_reductions


pytestmark = pytest.mark.numerics


IDS = torch.arange(2, 29).reshape(3, 9)  # (3, 9)
ONES = torch.ones(3, 9, dtype=torch.long)


def marian(preset="hc-sa", layout=None):
    torch.manual_seed(0)
    if layout is None:
        config = SimpleAttnMarianConfig.from_preset(preset, **TINY_MARIAN)
    else:
        config = SimpleAttnMarianConfig(attention_layout=layout, **TINY_MARIAN)
    return SimpleAttnMarianMTModel(config).eval()


def bert():
    torch.manual_seed(0)
    config = SimpleAttnBertConfig(attention_layout={"encoder_self": "hard_coded"}, **TINY_BERT)
    return SimpleAttnBertModel(config).eval()


def raises_naming(*parts):
    return pytest.raises(ValueError, match=".*".join(re.escape(part) for part in parts))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"attention_mask": ONES[:1]}, ("attention_mask has shape (1, 9)", "input_ids has shape (3, 9)")),
        (
            {"attention_mask": torch.ones(3, 12, dtype=torch.long)},
            ("attention_mask has shape (3, 12)", "input_ids has shape (3, 9)"),
        ),
        (
            {"attention_mask": ONES.flatten()},
            ("attention_mask has shape (27,)", "input_ids has shape (3, 9)"),
        ),
        (
            {"decoder_attention_mask": ONES[:, :5]},
            ("decoder_attention_mask has shape (3, 5)", "decoder_input_ids has shape (3, 9)"),
        ),
    ],
    ids=["broadcast-batch", "longer", "flat", "decoder"],
)
def test_marian_mask_of_the_wrong_shape_raises(kwargs, message):
    with torch.no_grad(), raises_naming(*message):
        marian()(input_ids=IDS, decoder_input_ids=IDS, **kwargs)


def test_marian_mask_checked_against_embeddings_and_encoder_outputs():
    model = marian()
    with torch.no_grad():
        embeds = model.get_encoder().embed_tokens(IDS)
        with raises_naming("attention_mask has shape (1, 9)", "inputs_embeds has shape (3, 9, 32)"):
            model(inputs_embeds=embeds, attention_mask=ONES[:1], decoder_input_ids=IDS)
        encoder_outputs = model.get_encoder()(input_ids=IDS, attention_mask=ONES)
        with raises_naming("attention_mask has shape (1, 9)", "encoder_hidden_states has shape (3, 9, 32)"):
            model(encoder_outputs=encoder_outputs, attention_mask=ONES[:1], decoder_input_ids=IDS)
        with raises_naming("attention_mask has shape (1, 9)", "input_ids has shape (3, 9)"):
            model.generate(input_ids=IDS, attention_mask=ONES[:1], max_new_tokens=3)


def test_cached_decoder_mask_covers_the_cached_positions():
    model = marian().double()
    with torch.no_grad():
        first = model(input_ids=IDS, decoder_input_ids=IDS[:, :4], use_cache=True)
        step = dict(encoder_outputs=(first.encoder_last_hidden_state,), cache=first.cache)
        with raises_naming("decoder_attention_mask has shape (3, 1)", "plus 4 cached positions", "(3, 5)"):
            model(decoder_input_ids=IDS[:, 4:5], decoder_attention_mask=ONES[:, :1], **step)
        # The valid mask, (batch, cached + new), gives the same logits as the full forward.
        cached = model(decoder_input_ids=IDS[:, 4:5], decoder_attention_mask=ONES[:, :5], **step).logits
        full = model(input_ids=IDS, decoder_input_ids=IDS[:, :5]).logits[:, -1:]
    assert_same_maths(cached, full, **model_reductions(model.config))


def test_the_cache_keyword_of_transformers_before_5_24_still_reaches_the_cache():
    """`past_key_values=` (the name before transformers 5.24) is renamed to `cache`, as in transformers' own models,
    not swallowed by `**kwargs`."""
    model = marian().double()
    with torch.no_grad():
        first = model(input_ids=IDS, decoder_input_ids=IDS[:, :4], use_cache=True)
        encoder_outputs = (first.encoder_last_hidden_state,)
        step = model(encoder_outputs=encoder_outputs, decoder_input_ids=IDS[:, 4:5], past_key_values=first.cache)
        full = model(input_ids=IDS, decoder_input_ids=IDS[:, :5]).logits[:, -1:]
    assert_same_maths(step.logits, full, **model_reductions(model.config))
    assert step.cache.get_seq_length() == 5


def test_bert_mask_of_the_wrong_shape_raises():
    model = bert()
    with torch.no_grad():
        with raises_naming("attention_mask has shape (1, 9)", "input_ids has shape (3, 9)"):
            model(input_ids=IDS, attention_mask=ONES[:1])
        with raises_naming("attention_mask has shape (3, 12)", "inputs_embeds has shape (3, 9, 32)"):
            model(inputs_embeds=torch.zeros(3, 9, 32), attention_mask=torch.ones(3, 12))


@pytest.mark.parametrize("input_ids", [IDS[:0], IDS[:, :0]], ids=["empty-batch", "zero-length"])
def test_empty_inputs_raise_naming_the_input(input_ids):
    shape = str(tuple(input_ids.shape))
    model = marian()
    with torch.no_grad():
        with raises_naming(f"input_ids has shape {shape}"):
            model(input_ids=input_ids, decoder_input_ids=IDS)
        with raises_naming(f"input_ids has shape {shape}"):
            model.generate(input_ids=input_ids, max_new_tokens=3)
        with raises_naming(f"decoder_input_ids has shape {shape}"):
            model(input_ids=IDS, decoder_input_ids=input_ids)
        with raises_naming(f"input_ids has shape {shape}"):
            bert()(input_ids=input_ids)


def count_decoder_calls(model):
    calls = []
    model.get_decoder().register_forward_hook(lambda *args: calls.append(1))
    return calls


def never_stops(model):
    model.generation_config.eos_token_id = None
    model.generation_config.forced_eos_token_id = None
    return model


@pytest.mark.parametrize("kind", ["recurrent", "random_synthesizer"])
def test_generate_beyond_decoder_max_positions_raises_before_decoding(kind):
    model = never_stops(marian(layout={"decoder_self": {"kind": kind, "max_positions": 6}}))
    source = IDS[:, :5]
    calls = count_decoder_calls(model)
    with torch.no_grad():
        # The decoder reads the start token and every generated token but the last: 6 new tokens fit.
        assert model.generate(input_ids=source, max_new_tokens=6).shape == (3, 7)
        calls.clear()
        with raises_naming(
            "max_new_tokens=7",
            "7 decoder positions",
            f"{kind} attention at decoder_self layer 0",
            "max_positions=6",
            "max_new_tokens <= 6",
        ):
            model.generate(input_ids=source, max_new_tokens=7, num_beams=2)
        with raises_naming("max_length=9", f"{kind} attention", "max_positions=6", "max_length <= 7"):
            model.generate(input_ids=source, max_length=9)
        assert calls == []
        # Without a requested length, the default (20 new tokens) is cut to what the decoder covers.
        assert model.generate(input_ids=source).shape == (3, 7)


def test_source_beyond_encoder_max_positions_raises_before_decoding():
    model = marian(layout={"encoder_self": {"kind": "recurrent", "max_positions": 8}})
    calls = count_decoder_calls(model)
    with torch.no_grad(), raises_naming("recurrent attention at encoder_self", "9 positions", "max_positions=8"):
        model.generate(input_ids=IDS, max_new_tokens=3)
    assert calls == []


def test_special_token_ids_outside_the_vocabulary_name_the_field():
    config = SimpleAttnMarianConfig.from_preset(
        "base",
        vocab_size=50,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
    )
    with pytest.raises(ValueError, match=r"pad_token_id: 58100 is outside the vocabulary of vocab_size=50"):
        SimpleAttnMarianMTModel(config)
