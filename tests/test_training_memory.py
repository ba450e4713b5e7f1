"""Training memory: the chunked cross-entropy loss (`config.loss_chunk_size`) equals the full one, keeps no
vocabulary-sized logits for backward, and is configured, validated and saved like any config field."""

import pytest
import torch

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel

from conftest import TINY_MARIAN, make_model


SOURCES = torch.tensor([[5, 6, 7, 8, 9, 0], [11, 12, 13, 0, 39, 39]])
# 7 scored target tokens out of 12: -100 after each sentence and inside the first one
LABELS = torch.tensor([[14, -100, 16, 17, 0, -100], [19, 20, 0, -100, -100, -100]])
SCORED_TOKENS = 7


def loss_and_gradients(model, loss_chunk_size: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.config.loss_chunk_size = loss_chunk_size
    model.zero_grad()
    loss = model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=LABELS).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset", ["base", "sh-x"])
def test_chunked_loss_and_gradients_equal_the_full_ones(preset):
    model = make_model(preset).train()
    full_loss, full_gradients = loss_and_gradients(model, 0)
    # the full loss is CrossEntropyLoss()'s mean over the scored tokens
    logits = model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=LABELS).logits
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), LABELS.flatten(), ignore_index=-100)
    torch.testing.assert_close(full_loss, expected.detach(), atol=1e-6, rtol=0)
    for chunk_size in (1, 7, 3 * SCORED_TOKENS):
        loss, gradients = loss_and_gradients(model, chunk_size)
        torch.testing.assert_close(loss, full_loss, atol=1e-6, rtol=0)
        assert gradients.keys() == full_gradients.keys()
        for name, gradient in full_gradients.items():
            torch.testing.assert_close(gradients[name], gradient, atol=1e-6, rtol=0, msg=f"{chunk_size}: {name}")


def test_logits_are_left_out_only_in_training_with_labels():
    model = make_model("base")
    assert model.config.loss_chunk_size > 0  # on by default
    with torch.no_grad():
        evaluated = model(input_ids=SOURCES, labels=LABELS)
        assert evaluated.logits.shape == (*LABELS.shape, TINY_MARIAN["vocab_size"])
        model.train()
        trained = model(input_ids=SOURCES, labels=LABELS)
        assert trained.logits is None
        torch.testing.assert_close(trained.loss, evaluated.loss, atol=1e-6, rtol=0)
        without_labels = model(input_ids=SOURCES, decoder_input_ids=SOURCES)
        assert without_labels.logits.shape == (*SOURCES.shape, TINY_MARIAN["vocab_size"])
        model.config.loss_chunk_size = 0
        assert model(input_ids=SOURCES, labels=LABELS).logits is not None


def largest_saved_vocabulary_tensor(model) -> int:
    """Elements of the largest tensor with a vocabulary-sized last axis kept for backward by a training step."""
    vocab_size = model.config.vocab_size
    sizes = [0]

    def pack(tensor):
        if tensor.dim() > 0 and tensor.shape[-1] == vocab_size:
            sizes.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=SOURCES, labels=LABELS).loss
    loss.backward()
    return max(sizes)


def test_chunked_loss_keeps_no_logits_for_backward():
    # a vocabulary larger than d_model, so that logits are the only tensors with a vocabulary-sized last axis
    model = make_model("base", vocab_size=1000).train()
    model.config.loss_chunk_size = 0
    assert largest_saved_vocabulary_tensor(model) >= SCORED_TOKENS * 1000
    model.config.loss_chunk_size = 2
    assert largest_saved_vocabulary_tensor(model) == 0  # each chunk's logits are recomputed in backward


@pytest.mark.parametrize("value", [-1, 1.5, True, None, "512"])
def test_bad_loss_chunk_size_is_refused_naming_the_field(value):
    with pytest.raises(Exception, match="loss_chunk_size"):
        SimpleAttnMarianConfig(**TINY_MARIAN, loss_chunk_size=value)


def test_loss_chunk_size_survives_save_and_load(tmp_path):
    model = make_model("hc-sa", loss_chunk_size=7)
    model.save_pretrained(tmp_path)
    assert SimpleAttnMarianConfig.from_pretrained(tmp_path).loss_chunk_size == 7
    assert SimpleAttnMarianMTModel.from_pretrained(tmp_path).config.loss_chunk_size == 7
