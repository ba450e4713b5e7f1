"""One training step of every preset: every trainable parameter gets a finite gradient.

A parameter that no forward reads (a projection a layout builds but never uses) gets none: it wastes memory, and
DistributedDataParallel without `find_unused_parameters` fails on it. The step runs without dropout (the families'
fast paths) and with it (the reference paths that attention dropout takes), on a padded batch.
"""

import pytest
import torch

from hf_simple_attn import (
    SimpleAttnBertConfig,
    SimpleAttnBertForMaskedLM,
    SimpleAttnMarianConfig,
    SimpleAttnMarianMTModel,
    list_presets,
)

from conftest import TINY_BERT, TINY_MARIAN, padded_bert_batch


DROPOUTS = (0.0, 0.1)
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 39, 39]])  # </s> = 0, padded with <pad> = 39
LABELS = torch.tensor([[13, 14, 15, 16, 0], [17, 18, 0, -100, -100]])


def trainable_parameters_without_finite_gradient(model, loss: torch.Tensor) -> list[str]:
    """The names of the parameters with requires_grad whose gradient is missing or not finite after `loss`."""
    loss.backward()
    return [
        name
        for name, parameter in model.named_parameters()
        if parameter.requires_grad and (parameter.grad is None or not torch.isfinite(parameter.grad).all())
    ]


@pytest.mark.parametrize("preset", list_presets("seq2seq"))
def test_seq2seq_preset_trains_every_parameter(preset):
    for dropout in DROPOUTS:
        torch.manual_seed(0)
        config = SimpleAttnMarianConfig.from_preset(
            preset, **{**TINY_MARIAN, "dropout": dropout, "attention_dropout": dropout, "activation_dropout": dropout}
        )
        model = SimpleAttnMarianMTModel(config).train()
        loss = model(input_ids=SOURCE, attention_mask=SOURCE.ne(config.pad_token_id), labels=LABELS).loss
        assert trainable_parameters_without_finite_gradient(model, loss) == [], f"dropout {dropout}"


@pytest.mark.parametrize("preset", list_presets("encoder"))
def test_encoder_preset_trains_every_parameter(preset):
    input_ids, attention_mask = padded_bert_batch([6, 4])
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    for dropout in DROPOUTS:
        torch.manual_seed(0)
        config = SimpleAttnBertConfig.from_preset(
            preset, **{**TINY_BERT, "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
        )
        model = SimpleAttnBertForMaskedLM(config).train()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        assert trainable_parameters_without_finite_gradient(model, loss) == [], f"dropout {dropout}"
