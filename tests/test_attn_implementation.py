"""`attn_implementation` picks how `dot` heads run: "sdpa" (PyTorch's kernel, the default) or "eager" (the weights
computed and applied, as transformers' eager attention); the other families ignore it, other values are refused."""

import re

import pytest
import torch

from hf_simple_attn import (
    SimpleAttnBertConfig,
    SimpleAttnBertForMaskedLM,
    SimpleAttnMarianConfig,
    SimpleAttnMarianMTModel,
)

from conftest import TINY_BERT, TINY_MARIAN, assert_same_maths, model_reductions


pytestmark = pytest.mark.numerics


PAD = TINY_MARIAN["pad_token_id"]
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, PAD, PAD]])
TARGET = torch.tensor([[PAD, 4, 5, 6, 7], [PAD, 8, 9, 0, PAD]])


@pytest.fixture
def sdpa_calls(monkeypatch) -> list:
    """Records every call of PyTorch's SDPA kernel."""
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    return calls


def test_seq2seq_eager_equals_sdpa_and_never_calls_the_kernel(tmp_path, sdpa_calls):
    torch.manual_seed(0)
    model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset("base", **TINY_MARIAN))
    assert model.config._attn_implementation == "sdpa"
    model.save_pretrained(tmp_path)
    logits, generated, kernel_calls = {}, {}, {}
    for implementation in ("eager", "sdpa"):
        # In float64: the two implementations sum in other orders, and only rounding may separate them.
        loaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path, attn_implementation=implementation).eval().double()
        assert loaded.config._attn_implementation == implementation
        sdpa_calls.clear()
        with torch.no_grad():
            # Padded source and target: padding masks in encoder, decoder and cross attention, and the causal mask.
            logits[implementation] = loaded(
                input_ids=SOURCE,
                attention_mask=(SOURCE != PAD).long(),
                decoder_input_ids=TARGET,
                decoder_attention_mask=(TARGET != PAD).long() | (torch.arange(5) == 0),
            ).logits
            generated[implementation] = loaded.generate(
                SOURCE, attention_mask=(SOURCE != PAD).long(), num_beams=2, max_new_tokens=6
            )
        kernel_calls[implementation] = len(sdpa_calls)
    assert kernel_calls["eager"] == 0 and kernel_calls["sdpa"] > 0
    assert_same_maths(logits["eager"], logits["sdpa"], **model_reductions(model.config))
    assert torch.equal(generated["eager"], generated["sdpa"])


def test_encoder_switches_after_loading_and_gives_weights_under_both(sdpa_calls):
    torch.manual_seed(0)
    model = SimpleAttnBertForMaskedLM(SimpleAttnBertConfig(attention_layout={"encoder_self": "dot"}, **TINY_BERT))
    model.eval().double()  # in float64: only rounding may separate the two implementations
    attention_mask = (SOURCE != PAD).long()
    outputs, kernel_calls = {}, {}
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        assert model.config._attn_implementation == implementation
        sdpa_calls.clear()
        with torch.no_grad():
            outputs[implementation] = model(SOURCE, attention_mask=attention_mask)
        kernel_calls[implementation] = len(sdpa_calls)
    assert kernel_calls["eager"] == 0 and kernel_calls["sdpa"] > 0
    assert_same_maths(outputs["eager"].logits, outputs["sdpa"].logits, **model_reductions(model.config))

    # Requested weights are computed the eager way under either implementation.
    with torch.no_grad():
        weights = model(SOURCE, attention_mask=attention_mask, output_attentions=True).attentions
    assert len(weights) == TINY_BERT["num_hidden_layers"] and weights[0].shape == (2, 4, 6, 6)
    assert_same_maths(weights[0].sum(-1), torch.ones(2, 4, 6, dtype=torch.float64), reduction=6, depth=2)


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flex_attention", "paged|eager"])
def test_implementations_the_dot_heads_cannot_run_are_refused(implementation):
    config = SimpleAttnBertConfig(attention_layout={"encoder_self": "dot"}, **TINY_BERT)
    refused = re.escape(f'Specified `attn_implementation="{implementation}"` is not supported')  # transformers' words
    with pytest.raises(ValueError, match=refused):
        SimpleAttnBertForMaskedLM._from_config(config, attn_implementation=implementation)
    model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset("base", **TINY_MARIAN))
    with pytest.raises(ValueError, match=refused + ".*`dot` heads of SimpleAttnMarianMTModel run no other"):
        model.set_attn_implementation(implementation)
    assert model.config._attn_implementation == "sdpa"
