"""The contract every registered attention family keeps, parametrised from the registry itself.

A family in the registry is tested here without being named: at each site it
declares, in a Marian-style model (and at `encoder_self` in a BERT-style encoder), sharing its
layers with a `dot` group, and in one model with every other family side by side, it must give the documented shapes, keep the decoder causal, give a
padded batch the same result as each example alone, decode step by step with the cache as the
full forward, give the same outputs on its fast and reference paths, and survive save/load.
"""

import pytest
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.modeling.attention_heads import SITES, AttentionHeads
from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES

from conftest import TINY_BERT, TINY_MARIAN, assert_same_maths, cached_steps, make_model, model_reductions


pytestmark = pytest.mark.numerics


PAD = TINY_MARIAN["pad_token_id"]
HEADS = TINY_MARIAN["encoder_attention_heads"]
CASES = [(kind, site) for kind, family in sorted(ATTENTION_FAMILIES.items()) for site in family.sites]
# ("every-family", "all"): every family at every site it allows, several in one layer.
MODELS = CASES + [("every-family", "all")]
ENCODER_KINDS = sorted(kind for kind, family in ATTENTION_FAMILIES.items() if "encoder_self" in family.sites)
SOURCES = [[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0]]
TARGETS = [[PAD, 14, 15, 16, 17, 18], [PAD, 19, 20, 21]]


def family_layout(kind: str, site: str) -> dict:
    """Half of every layer's heads at `site` from the family (its default options), half `dot`; `dot` elsewhere."""
    return {site: {"groups": [{"kind": kind, "num_heads": HEADS // 2}, {"kind": "dot"}]}}


def every_family_layout() -> dict:
    """At each site, one head of every family registered for it, all in one layer (their heads side by side)."""
    return {
        site: {"head_dim": 8, "groups": [{"kind": kind, "num_heads": 1} for kind, s in CASES if s == site]}
        for site in SITES
    }


def marian_model(kind: str, site: str) -> SimpleAttnMarianMTModel:
    return make_model(layout=every_family_layout() if kind == "every-family" else family_layout(kind, site))


def float64_model(kind: str, site: str) -> SimpleAttnMarianMTModel:
    """`marian_model` in float64, for the tests that compare two orders of the same sums: only rounding separates
    them."""
    return marian_model(kind, site).double()


def right_padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    return ids, mask


def logits(model, source, source_mask, target, target_mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model(
            input_ids=source, attention_mask=source_mask, decoder_input_ids=target, decoder_attention_mask=target_mask
        ).logits


def test_every_registered_family_is_covered():
    assert CASES, "the registry is empty"
    assert {site for _, site in CASES} <= set(SITES)
    for kind, family in ATTENTION_FAMILIES.items():
        assert issubclass(family, AttentionHeads) and family.kind == kind and family.sites
    layout = marian_model("every-family", "all").config.attention_layout
    for site in SITES:
        kinds = {group["kind"] for spec in layout[site] for group in spec["groups"]}
        assert kinds == {kind for kind, allowed in CASES if allowed == site}


@pytest.mark.parametrize("kind, site", MODELS)
def test_shapes_and_attention_weights(kind, site):
    model = marian_model(kind, site)
    source, source_mask = right_padded(SOURCES)
    target, target_mask = right_padded(TARGETS)
    with torch.no_grad():
        output = model(
            input_ids=source,
            attention_mask=source_mask,
            decoder_input_ids=target,
            decoder_attention_mask=target_mask,
            output_attentions=True,
        )
    batch, source_length, target_length = source.shape[0], source.shape[1], target.shape[1]
    heads = {site: model.config.attention_layout[site][0]["num_heads"] for site in SITES}
    assert output.logits.shape == (batch, target_length, TINY_MARIAN["vocab_size"])
    expected = {
        "encoder_attentions": (
            TINY_MARIAN["encoder_layers"],
            (batch, heads["encoder_self"], source_length, source_length),
        ),
        "decoder_attentions": (
            TINY_MARIAN["decoder_layers"],
            (batch, heads["decoder_self"], target_length, target_length),
        ),
        "cross_attentions": (TINY_MARIAN["decoder_layers"], (batch, heads["cross"], target_length, source_length)),
    }
    for name, (layers, shape) in expected.items():
        weights = getattr(output, name)
        assert len(weights) == layers and all(tuple(layer.shape) == shape for layer in weights), name
        assert all(torch.isfinite(layer).all() for layer in weights), name


@pytest.mark.parametrize("kind, site", [case for case in MODELS if case[1] != "encoder_self"])
def test_decoder_never_sees_later_tokens(kind, site):
    model = float64_model(kind, site)
    source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
    changed = target.clone()
    changed[0, 3:] = torch.tensor([25, 26, 27])
    assert_same_maths(
        logits(model, source, None, target)[:, :3],
        logits(model, source, None, changed)[:, :3],
        **model_reductions(model.config),
    )


@pytest.mark.parametrize("kind, site", MODELS)
def test_padded_batch_equals_each_example_alone(kind, site):
    model = float64_model(kind, site)
    source, source_mask = right_padded(SOURCES)
    target, target_mask = right_padded(TARGETS)
    batch = logits(model, source, source_mask, target, target_mask)
    for row, (one_source, one_target) in enumerate(zip(SOURCES, TARGETS)):
        alone = logits(model, torch.tensor([one_source]), None, torch.tensor([one_target]))
        assert_same_maths(batch[row, : len(one_target)], alone[0], **model_reductions(model.config))


@pytest.mark.parametrize("kind, site", MODELS)
def test_cached_steps_equal_the_full_forward_on_both_paths(kind, site):
    model = float64_model(kind, site)
    source, source_mask = right_padded(SOURCES)
    target = torch.tensor([TARGETS[0], TARGETS[1] + [22, 23]])
    reference = None
    for fast in (False, True):
        set_attention_fast_paths(model, fast)
        full = logits(model, source, source_mask, target)
        with torch.no_grad():
            steps, _ = cached_steps(model, source, source_mask, target)
        assert_same_maths(steps, full, **model_reductions(model.config))
        if reference is None:
            reference = full
        assert_same_maths(full, reference, **model_reductions(model.config))


@pytest.mark.parametrize("kind, site", MODELS)
def test_generate_with_cache_equals_without(kind, site):
    # In float64: candidates a few 1e-6 apart (beam search of a tiny random model) cannot swap on float32 rounding.
    model = float64_model(kind, site)
    source, source_mask = right_padded(SOURCES)
    kwargs = dict(input_ids=source, attention_mask=source_mask, max_new_tokens=6, num_beams=2, do_sample=False)
    with torch.no_grad():
        assert model.generate(use_cache=True, **kwargs).tolist() == model.generate(use_cache=False, **kwargs).tolist()


@pytest.mark.parametrize("kind, site", MODELS)
def test_save_and_load_give_the_same_model(kind, site, tmp_path):
    model = marian_model(kind, site)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.attention_layout == model.config.attention_layout
    source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
    torch.testing.assert_close(
        logits(reloaded, source, None, target), logits(model, source, None, target), atol=0, rtol=0
    )


@pytest.mark.parametrize("kind", ENCODER_KINDS)
def test_encoder_model_padding_paths_and_save_load(kind, tmp_path):
    torch.manual_seed(0)
    config = SimpleAttnBertConfig(attention_layout=family_layout(kind, "encoder_self"), **TINY_BERT)
    model = SimpleAttnBertModel(config).eval().double()  # in float64: only rounding separates the paths
    ids, mask = right_padded(SOURCES)
    with torch.no_grad():
        output = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        hidden = output.last_hidden_state
        for row, one in enumerate(SOURCES):
            alone = model(input_ids=torch.tensor([one])).last_hidden_state
            assert_same_maths(hidden[row, : len(one)], alone[0], **model_reductions(config))
        set_attention_fast_paths(model, False)
        assert_same_maths(
            model(input_ids=ids, attention_mask=mask).last_hidden_state, hidden, **model_reductions(config)
        )
        set_attention_fast_paths(model, True)
    # Saved and loaded in float32, as made (float64 back to float32 is exact): the round trip must give the same bits,
    # and where the loaded weights lie in memory changes the order of float64 matrix products (not of float32 ones).
    model.float()
    heads = TINY_BERT["num_attention_heads"]
    assert all(tuple(layer.shape) == (2, heads, ids.shape[1], ids.shape[1]) for layer in output.attentions)
    model.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask).last_hidden_state,
            model(input_ids=ids, attention_mask=mask).last_hidden_state,
            atol=0,
            rtol=0,
        )
