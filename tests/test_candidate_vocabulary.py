"""A search over the shortlist's candidates carries the generation config's token ids into candidate indices (checked
by hand here); that it decodes as the whole-vocabulary search does is tested with ONNX Runtime in test_export.py."""

import copy

import pytest
import torch

from hf_simple_attn.modeling.candidate_vocabulary import CandidateVocabulary

from conftest import TINY_MARIAN, assert_same_maths, make_model


pytestmark = pytest.mark.numerics


CANDIDATE_IDS = torch.tensor([0, 3, 7, 39])  # eos 0, pad and decoder start 39: indices 0 and 3


def prepared(model, **options):
    """The model's generation config with `options`, as `generate` prepares it."""
    generation_config = copy.deepcopy(model.generation_config)
    generation_config.update(**options)
    model._prepare_special_tokens(generation_config, True, device=model.device)
    return generation_config


def candidates(model) -> CandidateVocabulary:
    weight, bias = model.lm_head.weight.detach(), model.final_logits_bias.detach().reshape(-1)
    return CandidateVocabulary(CANDIDATE_IDS, weight[CANDIDATE_IDS], bias[CANDIDATE_IDS], TINY_MARIAN["vocab_size"])


def test_token_ids_become_candidate_indices():
    model = make_model("base").double()
    vocabulary = candidates(model)
    search_config = vocabulary.search_config(
        prepared(
            model,
            bad_words_ids=[[7], [5], [3, 7], [3, 5]],
            suppress_tokens=[5, 7],
            begin_suppress_tokens=[4],
            forced_eos_token_id=0,
        ),
        model,
    )
    assert search_config.pad_token_id == 3 and search_config.decoder_start_token_id == 3
    assert search_config.eos_token_id == [0] and search_config.forced_eos_token_id == 0
    # A bad word with a token that is not a candidate can never be produced: dropped.
    assert search_config.bad_words_ids == [[2], [1, 2]]
    assert search_config.suppress_tokens == [2] and search_config.begin_suppress_tokens is None
    assert int(search_config._pad_token_tensor) == 3 and search_config._eos_token_tensor.tolist() == [0]
    assert vocabulary.to_vocabulary(torch.tensor([[3, 2, 0, -1]])).tolist() == [[39, 7, 0, -1]]
    hidden_states = torch.randn(2, TINY_MARIAN["d_model"], dtype=torch.float64)
    assert_same_maths(
        vocabulary.logits(hidden_states),
        model.lm_head(hidden_states)[:, CANDIDATE_IDS] + model.final_logits_bias[0, CANDIDATE_IDS],
        reduction=TINY_MARIAN["d_model"],
    )


@pytest.mark.parametrize(
    "options",
    [
        dict(forced_bos_token_id=5),  # a forced token that is not a candidate
        dict(forced_eos_token_id=[0, 5]),  # one of several forced tokens is not a candidate
        dict(sequence_bias={(5,): -1.0}),
        dict(encoder_repetition_penalty=1.2),  # compares source ids with target ids
        dict(encoder_no_repeat_ngram_size=2),
        dict(pad_token_id=5),
    ],
)
def test_options_that_cannot_be_carried_give_none(options):
    model = make_model("base")
    assert candidates(model).search_config(prepared(model, **options), model) is None
