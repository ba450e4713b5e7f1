"""Training memory: the fused chunked cross-entropy (`config.loss_chunk_size`, `fused_cross_entropy.py`) equals the
full one with and without label smoothing, keeps no vocabulary-sized logits for backward and recomputes nothing;
the Trainer's label smoothing and gradient accumulation go through it; the field is validated and saved."""

import gc
import weakref

import pytest
import torch
from datasets import Dataset
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Seq2SeqTrainingArguments
from transformers.trainer_pt_utils import LabelSmoother

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.fused_cross_entropy import chunked_cross_entropy
from hf_simple_attn.recipes.sampling import LengthGroupedSeq2SeqTrainer

from conftest import TINY_MARIAN, assert_same_maths, make_model, model_reductions


pytestmark = pytest.mark.numerics


SOURCES = torch.tensor([[5, 6, 7, 8, 9, 0], [11, 12, 13, 0, 39, 39]])
# 7 scored target tokens out of 12: -100 after each sentence and inside the first one
LABELS = torch.tensor([[14, -100, 16, 17, 0, -100], [19, 20, 0, -100, -100, -100]])
SCORED_TOKENS = 7
CHUNK_SIZES = (1, 7, 3 * SCORED_TOKENS)


# The fused loss on its own ---------------------------------------------------------------------------------------


def projection_inputs(bias_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 hidden states (2, 6, 8), weight (50, 8) and bias (50,), all but the bias (with `bias_grad`) leaves."""
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(*LABELS.shape, 8, dtype=torch.float64, generator=generator).requires_grad_()
    weight = torch.randn(50, 8, dtype=torch.float64, generator=generator).requires_grad_()
    bias = torch.randn(50, dtype=torch.float64, generator=generator).requires_grad_(bias_grad)
    return hidden, weight, bias


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias_grad", [False, True])
def test_fused_loss_and_gradients_equal_cross_entropy_on_full_logits(chunk_size, label_smoothing, bias_grad):
    inputs = projection_inputs(bias_grad)
    hidden, weight, bias = inputs
    logits = torch.nn.functional.linear(hidden, weight, bias)  # (2, 6, 50)
    expected = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), LABELS.flatten(), label_smoothing=label_smoothing, reduction="sum"
    )
    # LabelSmoother's per-token formula, which the Trainer applies (it sums the smoothing term in float32: over the
    # vocabulary, then over the tokens)
    smoother = LabelSmoother(epsilon=label_smoothing)
    assert_same_maths(smoother([logits], LABELS), expected / SCORED_TOKENS, reduction=50, depth=2, dtype=torch.float32)
    wanted = [tensor for tensor in inputs if tensor.requires_grad]
    expected_gradients = torch.autograd.grad(expected, wanted)

    loss = chunked_cross_entropy(hidden, weight, bias, LABELS, chunk_size, label_smoothing)
    # the projection, the log-softmax over 50 logits, the sum over the 12 positions (and back)
    assert_same_maths(loss, expected, reduction=50, depth=3)
    for gradient, expected_gradient in zip(torch.autograd.grad(2.5 * loss, wanted), expected_gradients):
        assert_same_maths(gradient, 2.5 * expected_gradient, reduction=50, depth=3)


def test_fused_loss_without_gradients_or_scored_tokens():
    hidden, weight, bias = projection_inputs(bias_grad=False)
    expected = torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(hidden, weight, bias).flatten(0, 1), LABELS.flatten(), reduction="sum"
    )
    with torch.no_grad():
        loss = chunked_cross_entropy(hidden, weight, bias, LABELS, 2)
    assert not loss.requires_grad
    assert_same_maths(loss, expected, reduction=50, depth=3)
    # nothing scored: the sum is 0, its mean NaN as CrossEntropyLoss()'s, and the gradients zero, not NaN
    nothing = torch.full_like(LABELS, -100)
    mean = chunked_cross_entropy(hidden, weight, bias, nothing, 2) / 0
    assert mean.isnan()
    mean.backward()
    assert all(tensor.grad is None or not tensor.grad.any() for tensor in (hidden, weight))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fused_loss_of_no_tokens_is_zero_with_zero_gradients(label_smoothing):
    hidden = torch.randn(0, 4, requires_grad=True)
    weight = torch.randn(6, 4, requires_grad=True)
    loss = chunked_cross_entropy(hidden, weight, None, torch.zeros(0, dtype=torch.long), 2, label_smoothing)
    loss.backward()
    assert loss.item() == 0 and hidden.grad.shape == (0, 4) and not weight.grad.any()


def test_fused_loss_under_autocast_runs_the_matmuls_in_half_precision_and_sums_in_float32():
    hidden, weight, bias = (tensor.detach().float().requires_grad_() for tensor in projection_inputs(False))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.nn.functional.cross_entropy(
            torch.nn.functional.linear(hidden, weight, bias).flatten(0, 1), LABELS.flatten(), reduction="sum"
        )
        loss = chunked_cross_entropy(hidden, weight, bias, LABELS, 3)
    assert loss.dtype == torch.float32
    # Both sides round the same float32 sums of 8 products to bf16 logits (equal here; another CPU's order may move a
    # logit to its bf16 neighbour, 0.4 % of it: about 0.02 of this loss of 50) and sum them in float32.
    # tolerance: not a rounding bound but 1e-3 of the loss, which tells bf16 matmuls from float32 ones (1.2e-3 away).
    torch.testing.assert_close(loss, expected, atol=0, rtol=1e-3)
    gradients = torch.autograd.grad(loss, (hidden, weight))
    expected_gradients = torch.autograd.grad(expected, (hidden, weight))
    for gradient, expected_gradient in zip(gradients, expected_gradients):
        assert gradient.dtype == torch.float32
        # CPU bf16 matmuls sum in float32 and round once: the logits, the gradient product's operands, its result
        assert_same_maths(gradient, expected_gradient, reduction=1, depth=3, dtype=torch.bfloat16)


# In the model ------------------------------------------------------------------------------------------------------


def loss_and_gradients(
    model, loss_chunk_size: int, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.config.loss_chunk_size = loss_chunk_size
    model.zero_grad()
    loss = model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=LABELS, label_smoothing=label_smoothing).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset", ["base", "sh-x"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("tied", [True, False])
def test_chunked_loss_and_gradients_equal_the_full_ones(preset, label_smoothing, tied):
    model = make_model(preset, tie_word_embeddings=tied).train().double()
    assert (model.lm_head.weight is model.model.shared.weight) == tied
    full_loss, full_gradients = loss_and_gradients(model, 0, label_smoothing)
    # the full loss is LabelSmoother's (CrossEntropyLoss()'s without smoothing) mean over the scored tokens
    logits = model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=LABELS).logits
    expected = LabelSmoother(epsilon=label_smoothing)([logits], LABELS)  # its smoothing term summed in float32
    vocab_size = model.config.vocab_size  # float32 sums over the vocabulary, then over the tokens
    assert_same_maths(full_loss, expected.detach(), reduction=vocab_size, depth=2, dtype=torch.float32)
    assert "lm_head.weight" in full_gradients or "model.shared.weight" in full_gradients
    for chunk_size in CHUNK_SIZES:
        loss, gradients = loss_and_gradients(model, chunk_size, label_smoothing)
        assert_same_maths(loss, full_loss, **model_reductions(model.config))
        assert gradients.keys() == full_gradients.keys()
        for name, gradient in full_gradients.items():
            assert_same_maths(gradients[name], gradient, **model_reductions(model.config))


def test_logits_are_left_out_only_in_training_with_labels():
    model = make_model("base").double()
    assert model.config.loss_chunk_size > 0  # on by default
    with torch.no_grad():
        evaluated = model(input_ids=SOURCES, labels=LABELS)
        assert evaluated.logits.shape == (*LABELS.shape, TINY_MARIAN["vocab_size"])
        model.train()
        trained = model(input_ids=SOURCES, labels=LABELS)
        assert trained.logits is None
        assert_same_maths(trained.loss, evaluated.loss, **model_reductions(model.config))
        without_labels = model(input_ids=SOURCES, decoder_input_ids=SOURCES)
        assert without_labels.logits.shape == (*SOURCES.shape, TINY_MARIAN["vocab_size"])
        model.config.loss_chunk_size = 0
        assert model(input_ids=SOURCES, labels=LABELS).logits is not None


def test_a_wrapped_or_hooked_output_layer_is_not_bypassed_by_the_chunked_loss():
    """The chunked loss reads `lm_head.weight`; a hook on the head, or a head replaced by another module (an
    adapter), must still shape the loss: it then goes through `lm_head` with the full logits."""
    model = make_model("base").train().double()
    plain_loss, _ = loss_and_gradients(model, 2)
    handle = model.lm_head.register_forward_hook(lambda module, inputs, output: 2 * output)
    hooked_loss, _ = loss_and_gradients(model, 2)
    handle.remove()
    model.config.loss_chunk_size = 0
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(LABELS)
    hidden_states = model.model(
        input_ids=SOURCES, attention_mask=SOURCES != 39, decoder_input_ids=decoder_input_ids
    ).last_hidden_state
    logits = 2 * model.lm_head(hidden_states) + model.final_logits_bias
    expected = LabelSmoother(epsilon=0.0)([logits], LABELS)
    assert_same_maths(hooked_loss, expected.detach(), **model_reductions(model.config))
    assert not torch.isclose(hooked_loss, plain_loss)

    class ScaledHead(torch.nn.Module):  # a stand-in for an adapter that wraps the output layer
        def __init__(self, linear):
            super().__init__()
            self.linear = linear

        def forward(self, hidden_states):
            return 2 * self.linear(hidden_states)

    model.lm_head = ScaledHead(model.lm_head)
    assert not model.lm_head_is_plain()
    wrapped_loss, gradients = loss_and_gradients(model, 2)
    assert_same_maths(wrapped_loss, hooked_loss, **model_reductions(model.config))
    assert "lm_head.linear.weight" in gradients or "model.shared.weight" in gradients


def saved_vocabulary_shapes(model) -> list[tuple[int, ...]]:
    """Shapes of the tensors with a vocabulary-sized axis that a training step keeps for backward (saved, and still
    alive when the forward has returned: the fused loss's per-chunk graphs are gone by then)."""
    vocab_size = model.config.vocab_size
    saved = []

    def pack(tensor):
        if vocab_size in tensor.shape:
            saved.append(weakref.ref(tensor))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=SOURCES, labels=LABELS).loss
    gc.collect()
    shapes = [tuple(reference().shape) for reference in saved if reference() is not None]
    loss.backward()
    return shapes


def test_chunked_loss_keeps_no_logits_for_backward():
    # a vocabulary larger than d_model, so that logits are the only activations with a vocabulary-sized axis
    model = make_model("base", vocab_size=1000).train()
    model.config.loss_chunk_size = 0
    assert (LABELS.numel(), 1000) in saved_vocabulary_shapes(model)  # the (tokens, vocab) log-softmax
    model.config.loss_chunk_size = 2
    # only the output layer's weight gradient, computed in forward
    assert saved_vocabulary_shapes(model) == [(1000, TINY_MARIAN["d_model"])]


class LogitsProducts(TorchDispatchMode):
    """Counts the matrix products whose result has `vocab_size` columns: those that compute logits."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size, self.count = vocab_size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        products = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm)
        if func.overloadpacket in products and result.shape[-1] == self.vocab_size:
            self.count += 1
        return result


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
def test_chunked_loss_computes_each_chunks_logits_once(chunk_size):
    model = make_model("base", vocab_size=1000, loss_chunk_size=chunk_size).train()
    with LogitsProducts(1000) as forward:
        loss = model(input_ids=SOURCES, labels=LABELS).loss
    with LogitsProducts(1000) as backward:
        loss.backward()
    # chunks of the target positions, the ignored ones included (skipping them would read the labels' values)
    assert forward.count == -(-LABELS.numel() // chunk_size)
    assert backward.count == 0  # nothing recomputed
    assert model.lm_head.weight.grad is not None


# With transformers' Trainer ----------------------------------------------------------------------------------------


def trainer_for(model, tmp_path, **arguments) -> LengthGroupedSeq2SeqTrainer:
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", disable_tqdm=True, **arguments
    )
    return LengthGroupedSeq2SeqTrainer(model=model, args=args)


def batch() -> dict[str, torch.Tensor]:
    return {"input_ids": SOURCES, "attention_mask": (SOURCES != 39).long(), "labels": LABELS}


def test_trainer_label_smoothing_is_computed_by_the_model_in_chunks(tmp_path):
    model = make_model("base", loss_chunk_size=2).double()
    trainer = trainer_for(model, tmp_path, label_smoothing_factor=0.1)
    with torch.no_grad():
        expected = LabelSmoother(epsilon=0.1)(model(**batch()), LABELS)  # on evaluation's full logits
    # LabelSmoother sums its smoothing term in float32: over the vocabulary, then over the tokens
    smoothing_sums = dict(reduction=model.config.vocab_size, depth=2, dtype=torch.float32)
    for mode in (model.train, model.eval):
        mode()
        calls = []
        hook = model.register_forward_hook(lambda module, args, kwargs, output: calls.append(kwargs), with_kwargs=True)
        loss, outputs = trainer.compute_loss(model, batch(), return_outputs=True, num_items_in_batch=SCORED_TOKENS)
        hook.remove()
        assert_same_maths(loss, expected, **smoothing_sums)
        assert calls[0]["label_smoothing"] == 0.1 and "labels" in calls[0]
        assert (outputs.logits is None) == model.training  # chunked in training
        assert trainer.label_smoother.epsilon == 0.1  # kept for the loss next to generated predictions
    eval_loss, _, _ = trainer.prediction_step(model, batch(), prediction_loss_only=True)
    assert_same_maths(eval_loss, expected, **smoothing_sums)


def test_num_items_in_batch_divides_the_summed_loss():
    model = make_model("base", loss_chunk_size=2).train().double()
    mean = model(**batch()).loss
    # the same sum of the token losses, divided once (by 14, or by 7 and then exactly by 2)
    assert_same_maths(model(**batch(), num_items_in_batch=2 * SCORED_TOKENS).loss, mean / 2, reduction=1)
    assert_same_maths(model(**batch(), num_items_in_batch=torch.tensor(SCORED_TOKENS)).loss, mean, reduction=1)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_gradient_accumulation_equals_the_full_batch_through_the_trainer(tmp_path, label_smoothing):
    """Two accumulated sentences (5 and 2 scored tokens) step as their batch: the Trainer passes the tokens of both
    as num_items_in_batch and, as the model accepts loss kwargs, does not divide the loss by the steps."""
    examples = {name: tensor.tolist() for name, tensor in batch().items()}
    dataset = Dataset.from_dict(examples)

    def trained_weights(batch_size: int, accumulation_steps: int) -> dict[str, torch.Tensor]:
        model = make_model("base", loss_chunk_size=2).double()
        trainer = trainer_for(
            model, tmp_path / f"{batch_size}", per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation_steps, max_steps=1, optim="sgd", learning_rate=1.0,
            lr_scheduler_type="constant", max_grad_norm=0.0, label_smoothing_factor=label_smoothing,
            save_strategy="no",
        )  # fmt: skip
        trainer.train_dataset = dataset
        assert trainer.model_accepts_loss_kwargs
        trainer.train()
        return {name: p.detach().clone() for name, p in model.named_parameters()}

    initial_model = make_model("base").double()
    initial = {name: p.detach().clone() for name, p in initial_model.named_parameters()}
    full, accumulated = trained_weights(2, 1), trained_weights(1, 2)
    assert any(not torch.equal(full[name], initial[name]) for name in full)
    for name, weight in full.items():
        assert_same_maths(accumulated[name], weight, **model_reductions(initial_model.config))


# The config field ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 1.5, True, None, "512"])
def test_bad_loss_chunk_size_is_refused_naming_the_field(value):
    with pytest.raises(Exception, match="loss_chunk_size"):
        SimpleAttnMarianConfig(**TINY_MARIAN, loss_chunk_size=value)


def test_loss_chunk_size_survives_save_and_load(tmp_path):
    model = make_model("hc-sa", loss_chunk_size=7)
    model.save_pretrained(tmp_path)
    assert SimpleAttnMarianConfig.from_pretrained(tmp_path).loss_chunk_size == 7
    assert SimpleAttnMarianMTModel.from_pretrained(tmp_path).config.loss_chunk_size == 7
