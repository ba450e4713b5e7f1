"""Hard retrieval attention (Xu et al. 2021): argmax retrieval at inference, sampled one-hot with a
straight-through backward in training, masked keys never retrieved."""

from types import SimpleNamespace

import pytest
import torch

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.modeling.attention_hard_retrieval import HardRetrievalHeads, sample
from hf_simple_attn.modeling.attention_heads import AttentionContext

from conftest import assert_same_maths, model_reductions, sampling_tolerance


pytestmark = pytest.mark.numerics


def hard_heads(num_heads, head_dim, training, fast_path=True):
    spec = HardRetrievalHeads.normalize_spec({"kind": "hard_retrieval", "num_heads": num_heads}, "cross", "test")
    heads = HardRetrievalHeads(spec, SimpleNamespace(attention_dropout=0.0), "cross", 0, head_dim)
    heads.fast_path = fast_path
    return heads.train(training)


def retrieved_one_hot(output, value):
    """The one-hot rows (batch, heads, q_len, k_len) that retrieved `output` from `value` (rows all distinct); zero
    rows where the output is zero: what the fast training path used, read back from what it returned."""
    one_hot = (output[:, :, :, None, :] == value[:, :, None, :, :]).all(-1).to(value.dtype)
    assert (one_hot.sum(-1) <= 1).all()
    return one_hot


def context(query_length, is_causal=False, key_padding_mask=None):
    return AttentionContext(key_padding_mask, query_start=0, query_length=query_length, is_causal=is_causal)


# Hand example, head_dim 1: queries (1, -1), keys (-2, 0.5, 3, 5), key 3 is padding.
# Query 1 scores (-2, 0.5, 3, [5]) -> key 2; query -1 scores (2, -0.5, -3, [-5]) -> key 0.
QUERY = torch.tensor([1.0, -1.0]).view(1, 1, 2, 1)
KEY = torch.tensor([-2.0, 0.5, 3.0, 5.0]).view(1, 1, 4, 1)
VALUE = torch.tensor([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0], [40.0, 4.0]]).view(1, 1, 4, 2)
PADDING = torch.tensor([[True, True, True, False]])


def test_inference_retrieves_the_value_of_the_best_allowed_key():
    heads = hard_heads(1, 1, training=False)
    output, weights = heads(QUERY, KEY, VALUE[..., :1], context(2, key_padding_mask=PADDING), True)
    # retrieval copies values: exact
    torch.testing.assert_close(output[0, 0], torch.tensor([[30.0], [10.0]]), atol=0, rtol=0)
    torch.testing.assert_close(weights[0, 0], torch.tensor([[0.0, 0, 1, 0], [1, 0, 0, 0]]), atol=0, rtol=0)
    # Without padding query 1 takes key 3; causally (positions 0, 1) query 0 sees key 0 only, query 1 keys 0-1.
    output, _ = heads(QUERY, KEY, VALUE[..., :1], context(2))
    torch.testing.assert_close(output[0, 0], torch.tensor([[40.0], [10.0]]), atol=0, rtol=0)
    output, _ = heads(QUERY, KEY, VALUE[..., :1], context(2, is_causal=True))
    torch.testing.assert_close(output[0, 0], torch.tensor([[10.0], [10.0]]), atol=0, rtol=0)


def test_inference_is_argmax_of_scores_and_deterministic():
    torch.manual_seed(0)
    heads = hard_heads(3, 4, training=False)
    query, key, value = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    first, weights = heads(query, key, value, context(5), True)
    second, _ = heads(query, key, value, context(5), True)
    assert torch.equal(first, second)
    index = (query @ key.transpose(-1, -2)).argmax(-1)
    assert torch.equal(first, torch.gather(value, 2, index[..., None].expand(-1, -1, -1, 4)))
    assert torch.equal(weights.argmax(-1), index) and torch.equal(weights.sum(-1), torch.ones(2, 3, 5))


@pytest.mark.parametrize("training", [True, False])
def test_query_without_any_allowed_key_gets_zero(training):
    heads = hard_heads(1, 1, training=training)
    padding = torch.tensor([[False, False, False, False]])
    output, weights = heads(QUERY, KEY, VALUE[..., :1], context(2, key_padding_mask=padding), True)
    assert torch.equal(output, torch.zeros_like(output)) and torch.equal(weights, torch.zeros_like(weights))
    # The fast paths (no weights asked for), with the gradient of that zero output: none.
    query, key, value = (t.clone().requires_grad_(training) for t in (QUERY, KEY, VALUE[..., :1]))
    output, _ = heads(query, key, value, context(2, key_padding_mask=padding))
    assert torch.equal(output, torch.zeros_like(output))
    if training:
        output.sum().backward()
        assert all(torch.equal(t.grad, torch.zeros_like(t)) for t in (query, key, value))


@pytest.mark.parametrize("fast_path", [False, True])
def test_training_never_samples_masked_keys_and_follows_softmax(fast_path):
    batch, length = 4000, 4
    heads = hard_heads(2, length, training=True, fast_path=fast_path)
    zeros = torch.zeros(batch, 2, length, length)  # equal scores: P is uniform over the allowed keys
    padding = torch.ones(batch, length, dtype=torch.bool)
    padding[:, 3] = False
    torch.manual_seed(0)
    if fast_path:
        # Value j is the j-th unit vector: each output row is the one-hot row of the key it retrieved.
        one_hot_values = torch.eye(length).expand(batch, 2, length, length)
        weights, _ = heads(zeros, zeros, one_hot_values, context(length, True, padding))
    else:
        _, weights = heads(zeros, zeros, zeros, context(length, True, padding), True)
    # Query i sees keys 0..min(i, 2): 1, 2, 3, 3 choices.
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert (weights[:, :, ~allowed] == 0).all()
    assert torch.equal(weights.sum(-1), torch.ones(batch, 2, length))
    frequencies = weights.mean(dim=(0, 1))
    expected = allowed / allowed.sum(-1, keepdim=True)
    # each frequency: the mean of batch × 2 heads independent 0/1 draws, of standard deviation at most 1/2
    torch.testing.assert_close(frequencies, expected.float(), atol=sampling_tolerance(0.5, batch * 2), rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sample_draws_as_multinomial_does(dtype):
    """The Gumbel-max draw from the scores is multinomial's draw from their softmax (float32), key for key."""
    scores = (torch.randn(3, 50, 7) * 3).to(dtype)
    scores[0, :, 2] = torch.finfo(dtype).min  # a masked key: never drawn
    scores[1, :, 4] = -torch.inf
    torch.manual_seed(0)
    drawn = sample(scores)
    torch.manual_seed(0)
    probabilities = torch.softmax(scores.float(), dim=-1)
    assert torch.equal(drawn, torch.multinomial(probabilities.view(-1, 7), 1).view(3, 50))
    assert (drawn[0] != 2).all() and (drawn[1] != 4).all()


# (query length, causal, padding of the 5 keys): cross attention's padding, decoder self attention's causal mask
# (the second row's last key padded too), neither.
MASKS = {
    "padding": (4, False, [[True, True, True, True, False]]),
    "causal": (5, True, None),
    "causal-padding": (5, True, [[True] * 5, [True, True, True, True, False]]),
    "none": (4, False, None),
}


@pytest.mark.parametrize("fast_path", [False, True])
@pytest.mark.parametrize("mask", list(MASKS))
def test_straight_through_gradients_match_the_papers_formulas(fast_path, mask):
    query_length, is_causal, padding = MASKS[mask]
    batch = 1 if padding is None else len(padding)
    torch.manual_seed(0)
    heads = hard_heads(2, 3, training=True, fast_path=fast_path)
    # In float64: only rounding separates the module's gradients from the formulas written out.
    query = torch.randn(batch, 2, query_length, 3, dtype=torch.float64, requires_grad=True)
    key = torch.randn(batch, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    value = torch.randn(batch, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    grad_output = torch.randn(batch, 2, query_length, 3, dtype=torch.float64)
    padding = None if padding is None else torch.tensor(padding)
    output, one_hot = heads(query, key, value, context(query_length, is_causal, padding), not fast_path)
    if fast_path:
        assert one_hot is None
        one_hot = retrieved_one_hot(output, value)
    (output * grad_output).sum().backward()
    assert_same_maths(output, one_hot @ value, reduction=5)
    allowed = torch.ones(batch, 1, query_length, 5, dtype=torch.bool)
    if is_causal:
        allowed &= torch.ones(query_length, 5, dtype=torch.bool).tril(5 - query_length)
    if padding is not None:
        allowed &= padding[:, None, None, :]
    assert (one_hot[~allowed.expand_as(one_hot)] == 0).all() and (one_hot.sum(-1) == 1).all()

    # By hand: S = QKᵀ/√3 masked, P = softmax(S); dP = dOut·Vᵀ (Eq. 9, passed straight to P, Eq. 8);
    # softmax backward dS = P ⊙ (dP - Σ_k P_k dP_k); dQ = dS·K/√3, dK = dSᵀ·Q/√3;
    # dV = one_hotᵀ·dOut (Eq. 10: each retrieved row gets the sum of its queries' output gradients).
    with torch.no_grad():
        scores = (query @ key.transpose(-1, -2)) / 3**0.5
        probabilities = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        grad_probabilities = grad_output @ value.transpose(-1, -2)
        grad_scores = probabilities * (grad_probabilities - (grad_probabilities * probabilities).sum(-1, keepdim=True))
        expected_query = grad_scores @ key / 3**0.5
        expected_key = grad_scores.transpose(-1, -2) @ query / 3**0.5
        expected_value = one_hot.transpose(-1, -2) @ grad_output
    # scores (3 terms), softmax (5 keys), dP (3 terms), the softmax's backward (5 keys), dQ or dK (5 terms)
    bound = dict(reduction=5, depth=5)
    assert_same_maths(query.grad, expected_query, **bound)
    assert_same_maths(key.grad, expected_key, **bound)
    assert_same_maths(value.grad, expected_value, **bound)
    assert (value.grad[one_hot.sum(2) == 0] == 0).all()

    # The usual trick (one_hot + P - P.detach())·V gives the same gradients: its dV is
    # (one_hot + P - P.detach())ᵀ·dOut, numerically one_hotᵀ·dOut.
    trick_inputs = [t.detach().clone().requires_grad_(True) for t in (query, key, value)]
    trick_scores = trick_inputs[0] @ trick_inputs[1].transpose(-1, -2) / 3**0.5
    trick_p = torch.softmax(trick_scores.masked_fill(~allowed, float("-inf")), dim=-1)
    (((one_hot + trick_p - trick_p.detach()) @ trick_inputs[2]) * grad_output).sum().backward()
    for ours, trick in zip((query, key, value), trick_inputs):
        assert_same_maths(ours.grad, trick.grad, **bound)


# Model-level behaviour with the paper's setting: decoder self + cross attention.


HARD_DEC = {"decoder_self": "hard_retrieval", "cross": "hard_retrieval"}
SOURCE = torch.tensor([[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 39, 39]])
SOURCE_MASK = (SOURCE != 39).long()
TARGET = torch.tensor([[39, 4, 5, 6, 7], [39, 8, 9, 10, 11]])


def build_model(tiny_marian_kwargs, layout):
    torch.manual_seed(0)
    return SimpleAttnMarianMTModel(SimpleAttnMarianConfig(attention_layout=layout, **tiny_marian_kwargs)).eval()


def test_causality_padding_and_cache(tiny_marian_kwargs):
    # in float64: only rounding may differ
    model = build_model(tiny_marian_kwargs, {**HARD_DEC, "encoder_self": "hard_retrieval"}).double()
    logits = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    changed = TARGET.clone()
    changed[:, 3:] = 20
    later = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=changed).logits
    assert_same_maths(later[:, :3], logits[:, :3], **model_reductions(model.config))
    alone = model(input_ids=SOURCE[1:, :4], decoder_input_ids=TARGET[1:]).logits
    assert_same_maths(logits[1:], alone, **model_reductions(model.config))
    out = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET, output_attentions=True)
    assert (out.cross_attentions[0][1, :, :, 4:] == 0).all() and (out.encoder_attentions[0][1, :, :, 4:] == 0).all()
    assert torch.equal(out.cross_attentions[0].sum(-1), torch.ones(2, 4, 5))
    for num_beams in (1, 3):
        kwargs = dict(
            input_ids=SOURCE, attention_mask=SOURCE_MASK, max_new_tokens=8, num_beams=num_beams, do_sample=False
        )
        assert torch.equal(model.generate(**kwargs, use_cache=True), model.generate(**kwargs, use_cache=False))


def test_training_gradients_and_save_load(tiny_marian_kwargs, tmp_path):
    model = build_model(tiny_marian_kwargs, HARD_DEC)
    dot = build_model(tiny_marian_kwargs, {})
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in dot.state_dict().items()}

    model.train()
    model(input_ids=SOURCE, attention_mask=SOURCE_MASK, labels=TARGET[:, 1:].contiguous()).loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert [n for n, p in trainable if p.grad is None or not p.grad.abs().sum() > 0] == []
    model.eval()

    model.save_pretrained(tmp_path)
    reloaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path).eval()
    expected = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits
    assert torch.equal(
        reloaded(input_ids=SOURCE, attention_mask=SOURCE_MASK, decoder_input_ids=TARGET).logits, expected
    )


def test_fast_training_step_equals_the_reference_from_the_same_seed(tiny_marian_kwargs):
    """The fast path draws as `torch.multinomial` does and its SDPA backward is the reference's dP = dOut·Vᵀ through
    the softmax: from the same RNG state, the same samples, loss and gradients (padding, causal and cross sites)."""
    # in float64: only rounding separates the paths
    model = build_model(tiny_marian_kwargs, {**HARD_DEC, "encoder_self": "hard_retrieval"}).double().train()
    labels = TARGET[:, 1:].clone()
    labels[1, -1] = -100
    results = []
    for fast in (True, False):
        set_attention_fast_paths(model, fast)
        model.zero_grad()
        torch.manual_seed(1)
        loss = model(input_ids=SOURCE, attention_mask=SOURCE_MASK, labels=labels).loss
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), gradients))
    (fast_loss, fast_gradients), (reference_loss, reference_gradients) = results
    # the forward's reductions and as many again in the backward
    bound = model_reductions(model.config)
    bound["depth"] *= 2
    assert_same_maths(fast_loss, reference_loss, **model_reductions(model.config))
    assert fast_gradients.keys() == reference_gradients.keys()
    for name, gradient in reference_gradients.items():
        assert_same_maths(fast_gradients[name], gradient, **bound)


@pytest.mark.parametrize("site", ["encoder_self", "decoder_self", "cross"])
def test_usable_on_every_site(tiny_marian_kwargs, site):
    config = SimpleAttnMarianConfig(
        attention_layout={site: {"kind": "hard_retrieval", "num_heads": 2}}, **tiny_marian_kwargs
    )
    assert config.attention_layout[site][0]["groups"] == [{"kind": "hard_retrieval", "num_heads": 2}]
