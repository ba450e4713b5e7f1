"""Converting pretrained Marian and BERT checkpoints into any attention layout."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForQuestionAnswering, BertModel, MarianConfig, MarianMTModel

from hf_simple_attn import (
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertModel,
    SimpleAttnMarianMTModel,
)
from hf_simple_attn.recipes.convert import convert_bert_checkpoint, convert_marian_checkpoint

from conftest import TINY_BERT, assert_same_maths, model_reductions


pytestmark = pytest.mark.numerics


def query_key_names(prefix: str, layers, attention: str, projections=("q_proj", "k_proj")) -> set[str]:
    return {
        f"{prefix}.{index}.{attention}.{projection}.{tensor}"
        for index in layers
        for projection in projections
        for tensor in ("weight", "bias")
    }


def assert_copied_exactly(model, source, info, prefix: str = ""):
    """Every tensor reported as copied equals the source tensor of the same name (up to the base prefix)."""
    source_state = source.state_dict()
    target_state = model.state_dict()
    assert info["copied"]
    for name in info["copied"]:
        source_name = name if name in source_state else name.removeprefix(prefix)
        assert torch.equal(target_state[name], source_state[source_name]), name


@torch.no_grad()
def randomized_biases(model):
    """Fresh models have zero biases everywhere; distinct values make "copied from where" checkable."""
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):
            parameter.normal_(std=0.1)
    return model.eval()


@pytest.fixture
def marian(tiny_marian_kwargs):
    torch.manual_seed(0)
    return randomized_biases(MarianMTModel(MarianConfig(**tiny_marian_kwargs)))


def marian_batch():
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 39, 39]])
    attention_mask = (input_ids != 39).long()
    decoder_input_ids = torch.tensor([[39, 5, 6, 7], [39, 8, 9, 10]])
    return dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)


# ----------------------------------------------------------------------------------------------
# Marian


def test_marian_base_conversion_is_exact(marian):
    model, info = convert_marian_checkpoint(marian, output_loading_info=True)
    assert type(model) is SimpleAttnMarianMTModel
    assert (info["new"], info["dropped"], info["mismatched"]) == ([], [], [])
    assert_copied_exactly(model, marian, info)
    batch = marian_batch()
    model, marian = model.double(), marian.double()
    with torch.no_grad():
        assert_same_maths(model(**batch).logits, marian(**batch).logits, **model_reductions(model.config))
        source = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        expected = marian.generate(**source, max_new_tokens=6, do_sample=False)
        actual = model.generate(**source, max_new_tokens=6, do_sample=False)
    assert actual.tolist() == expected.tolist()


def test_marian_hc_sa_drops_self_attention_query_key(marian, tiny_marian_kwargs):
    model, info = convert_marian_checkpoint(marian, preset="hc-sa", output_loading_info=True)
    assert model.config.attention_preset == "hc-sa"
    encoder_layers = range(tiny_marian_kwargs["encoder_layers"])
    decoder_layers = range(tiny_marian_kwargs["decoder_layers"])
    assert set(info["dropped"]) == (
        query_key_names("model.encoder.layers", encoder_layers, "self_attn")
        | query_key_names("model.decoder.layers", decoder_layers, "self_attn")
    )
    assert (info["new"], info["mismatched"]) == ([], [])
    assert "model.decoder.layers.0.encoder_attn.q_proj.weight" in info["copied"]
    assert_copied_exactly(model, marian, info)


def test_marian_tied_query_key_are_seeded_by_the_first_tied_layer(marian):
    layout = {"decoder_self": {"default": "dot", "layers": {}, "tie_query_key": "all"}}
    model, info = convert_marian_checkpoint(marian, attention_layout=layout, output_loading_info=True)
    assert set(info["dropped"]) == query_key_names("model.decoder.layers", (1, 2), "self_attn")
    for index in (1, 2):
        tied = model.model.decoder.layers[index].self_attn
        assert tied.q_proj.weight is model.model.decoder.layers[0].self_attn.q_proj.weight
    torch.testing.assert_close(  # copied: exactly equal
        model.model.decoder.layers[2].self_attn.k_proj.weight,
        marian.model.decoder.layers[0].self_attn.k_proj.weight,
        atol=0,
        rtol=0,
    )


def test_marian_conversion_from_a_folder_with_overrides(marian, tmp_path):
    marian.save_pretrained(tmp_path)
    one_cross_head = {"cross": {"kind": "dot", "num_heads": 1}}
    model = convert_marian_checkpoint(str(tmp_path), attention_layout=one_cross_head, length_ratio=1.5)
    assert type(model) is SimpleAttnMarianMTModel and model.config.length_ratio == 1.5
    model, marian = model.double(), marian.double()
    # One cross head of width d_model: query/key/value/out of the cross sublayers keep their shapes.
    assert model.model.decoder.layers[0].encoder_attn.q_proj.weight.shape == (32, 32)
    with torch.no_grad():
        assert_same_maths(
            model.model.encoder(marian_batch()["input_ids"]).last_hidden_state,
            marian.model.encoder(marian_batch()["input_ids"]).last_hidden_state,
            **model_reductions(model.config),
        )


# ----------------------------------------------------------------------------------------------
# BERT


@pytest.fixture
def bert():
    torch.manual_seed(0)
    return randomized_biases(BertModel(BertConfig(**TINY_BERT)))


def bert_batch():
    input_ids = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 3, 0, 0]])
    return dict(input_ids=input_ids, attention_mask=(input_ids != 0).long())


def test_bert_base_conversion_is_exact(bert):
    model, info = convert_bert_checkpoint(bert, output_loading_info=True)
    assert type(model) is SimpleAttnBertModel
    assert (info["new"], info["dropped"], info["mismatched"]) == ([], [], [])
    assert_copied_exactly(model, bert, info)
    with torch.no_grad():
        expected, actual = bert.double()(**bert_batch()), model.double()(**bert_batch())
    assert_same_maths(actual.last_hidden_state, expected.last_hidden_state, **model_reductions(model.config))
    assert_same_maths(actual.pooler_output, expected.pooler_output, **model_reductions(model.config))


def test_bert_model_to_a_classifier_with_hard_coded_attention(bert):
    model, info = convert_bert_checkpoint(
        bert,
        attention_layout={"encoder_self": "hard_coded"},
        model_class=SimpleAttnBertForSequenceClassification,
        num_labels=3,
        output_loading_info=True,
    )
    assert model.config.num_labels == 3 and model.classifier.out_features == 3
    assert info["new"] == ["classifier.weight", "classifier.bias"]
    assert set(info["dropped"]) == query_key_names("encoder.layer", range(3), "attention.self", ("query", "key"))
    assert "bert.encoder.layer.0.attention.self.value.weight" in info["copied"]
    assert_copied_exactly(model, bert, info, prefix="bert.")


def test_bert_fewer_query_key_sets_are_reinitialised(bert):
    """local-1tied style: one W_q/W_k set per layer (width head_dim) cannot take BERT's per-head ones."""
    layout = {"encoder_self": {"kind": "local", "masks": ["band-1"], "query_key_sets": 1}}
    model, info = convert_bert_checkpoint(bert, attention_layout=layout, output_loading_info=True)
    query_key = query_key_names("encoder.layer", range(3), "attention.self", ("query", "key"))
    assert model.encoder.layer[0].attention.self.query.weight.shape == (8, 32)
    assert set(info["mismatched"]) == set(info["new"]) == query_key
    assert set(info["dropped"]) == query_key


def test_bert_masked_lm_folder_keeps_its_tied_decoder(tmp_path):
    torch.manual_seed(0)
    source = randomized_biases(BertForMaskedLM(BertConfig(**TINY_BERT)))
    source.save_pretrained(tmp_path)
    model, info = convert_bert_checkpoint(str(tmp_path), preset="base", output_loading_info=True)
    assert type(model) is SimpleAttnBertForMaskedLM
    # The decoder is tied to the word embeddings in both: nothing is dropped, nothing new.
    assert (info["new"], info["dropped"]) == ([], [])
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    model, source = model.double(), source.double()
    with torch.no_grad():
        assert_same_maths(
            model(**bert_batch()).logits, source(**bert_batch()).logits, **model_reductions(model.config)
        )


def test_unknown_architecture_needs_a_model_class():
    torch.manual_seed(0)
    source = BertForQuestionAnswering(BertConfig(**TINY_BERT))
    with pytest.raises(ValueError, match="model_class: no default target for a BertForQuestionAnswering"):
        convert_bert_checkpoint(source)
    model, info = convert_bert_checkpoint(source, model_class=SimpleAttnBertModel, output_loading_info=True)
    assert info["new"] == ["pooler.dense.weight", "pooler.dense.bias"]
    assert info["dropped"] == ["qa_outputs.bias", "qa_outputs.weight"]
