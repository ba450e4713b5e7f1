"""Recurrent attention (RAN, Zeng et al. 2021) and its Random Synthesizer baseline (Syn-R, Tay et al. 2020)."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForSeq2SeqLM

from hf_simple_attn import SimpleAttnMarianConfig
from hf_simple_attn.modeling import attention_recurrent
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.modeling.attention_heads import AttentionContext, LayoutError
from hf_simple_attn.modeling.attention_recurrent import (
    RandomSynthesizerHeads,
    RecurrentAttentionState,
    RecurrentHeads,
    attend,
    logit_attention,
    position_weights,
    query_width,
)

from conftest import (
    TINY_MARIAN,
    assert_hand_computed,
    assert_same_maths,
    cached_steps,
    make_model,
    model_reductions,
    sampling_tolerance,
)


pytestmark = pytest.mark.numerics


PAD = TINY_MARIAN["pad_token_id"]
M = 16  # max_positions in the model tests (the paper's 256 makes no difference to the maths)
RAN = {"kind": "recurrent", "max_positions": M}
SYN = {"kind": "random_synthesizer", "max_positions": M}
LAYOUTS = {
    "ran-all": {"encoder_self": RAN, "decoder_self": RAN},
    "syn-r": {"encoder_self": SYN, "decoder_self": SYN},
    # the public code's FFN transition, frozen A0, RAN heads beside dot heads, a decoder layer without RAN
    "ran-mixed": {
        "encoder_self": {
            "groups": [{**RAN, "num_heads": 2, "transition": "ffn", "freeze_initial": True}, {"kind": "dot"}]
        },
        "decoder_self": [{**RAN, "layer_norm_residual": False}, "dot", {**RAN, "layer_norm_residual": False}],
    },
}
# RAN's attention dropout defaults to the paper's 0.2: switch it off where training runs are compared
RAN_NO_DROPOUT = {"encoder_self": {**RAN, "attention_dropout": 0.0}, "decoder_self": {**RAN, "attention_dropout": 0.0}}
SOURCES = [[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0]]
TARGETS = [[PAD, 14, 15, 16, 17, 18], [PAD, 19, 20, 21]]


def stack_state(model, site):
    stack = model.model.encoder if site == "encoder_self" else model.model.decoder
    return stack.attention_state[f"{site}_recurrent"]


def right_padded(rows):
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    return ids, mask


def tiny_state(**options):
    """A stack state with one head and M = 2: A0 = [[0.5, -1], [2, 0]], transition set by hand."""
    spec = RecurrentHeads.normalize_spec(
        {"kind": "recurrent", "num_heads": 1, "max_positions": 2, **options}, "encoder_self", "test"
    )
    state = RecurrentAttentionState(spec, num_layers=2)
    with torch.no_grad():
        state.initial_logits.copy_(torch.tensor([[[0.5, -1.0], [2.0, 0.0]]]))
    return state


# --- the transition, by hand -------------------------------------------------------------------


def test_tanh_ln_transition_step_by_hand():
    state = tiny_state().double()  # in float64: the rounding of computing it far below the 6 decimals written
    with torch.no_grad():
        state.transition.linear.weight.copy_(torch.tensor([[1.0, 2.0], [-0.5, 0.25]]))
        state.transition.linear.bias.copy_(torch.tensor([0.1, -0.2], dtype=torch.float64))  # 0.1: none in float32
        state.transition.layer_norm.weight.copy_(torch.tensor([2.0, 0.5]))
        state.transition.layer_norm.bias.copy_(torch.tensor([0.1, -0.1], dtype=torch.float64))
    # Row 0, a = (0.5, -1): z = W·a + b = (0.5 - 2 + 0.1, -0.25 - 0.25 - 0.2) = (-1.4, -0.7)
    # tanh(z) = (-0.885352, -0.604368); mean -0.744860, variance 0.140492² = 0.019738
    # LayerNorm: ±0.140492 / sqrt(0.019738 + 1e-5) = ∓0.999747 → gain·n + shift = (-1.899494, 0.399873)
    # residual: + a → A1 row 0 = (-1.399494, -0.600127)
    # Row 1, a = (2, 0): z = (2.1, -1.2), tanh = (0.970452, -0.833655), n = (0.999994, -0.999994)
    # → (2·0.999994 + 0.1 + 2, 0.5·-0.999994 - 0.1 + 0) = (4.099988, -0.599997)
    expected_a1 = [[[-1.399494, -0.600127], [4.099988, -0.599997]]]
    bound = dict(reduction=2, depth=3)  # the linear map and the LayerNorm's mean and variance, of 2 terms
    with torch.no_grad():
        a1, a2 = state.chain(2)
        assert_hand_computed(a1, expected_a1, decimals=6, **bound)

        # The same step written out with plain ops on A1 gives A2 (the transition is one shared map).
        def step(rows):
            out = []
            for a in rows.tolist():
                z = [1.0 * a[0] + 2.0 * a[1] + 0.1, -0.5 * a[0] + 0.25 * a[1] - 0.2]
                t = [math.tanh(v) for v in z]
                mean = (t[0] + t[1]) / 2
                std = math.sqrt(((t[0] - mean) ** 2 + (t[1] - mean) ** 2) / 2 + 1e-5)
                out.append([2.0 * (t[0] - mean) / std + 0.1 + a[0], 0.5 * (t[1] - mean) / std - 0.1 + a[1]])
            return torch.tensor([out], dtype=torch.float64)

        assert_same_maths(a2, step(a1[0]), **bound)
        # The k-th RAN layer (0-based) gets A_{k+1}: the first layer already uses A1, not A0.
        assert_same_maths(state.layer_logits(0), a1, **bound)
        assert_same_maths(state.layer_logits(1), a2, **bound)


def test_transition_without_layer_norm_and_residual_is_tanh_alone():
    state = tiny_state(layer_norm_residual=False).double()  # in float64: rounding far below the 6 decimals
    assert state.transition.layer_norm is None
    with torch.no_grad():
        state.transition.linear.weight.copy_(torch.tensor([[1.0, 2.0], [-0.5, 0.25]]))
        state.transition.linear.bias.copy_(torch.tensor([0.1, -0.2], dtype=torch.float64))  # 0.1: none in float32
        # A1 = tanh(W·a + b): row 0 tanh(-1.4, -0.7), row 1 tanh(2.1, -1.2)
        expected = [[[-0.885352, -0.604368], [0.970452, -0.833655]]]
        assert_hand_computed(state.chain(1)[0], expected, decimals=6, reduction=2)  # W·a: 2 terms


def test_ffn_transition_step_by_hand():
    state = tiny_state(transition="ffn", transition_ffn_dim=3).double()  # in float64: rounding aside
    with torch.no_grad():
        state.transition.fc1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        state.transition.fc1.bias.copy_(torch.tensor([0.0, 0.5, -1.0]))
        state.transition.fc2.weight.copy_(torch.tensor([[1.0, -1.0, 0.5], [0.0, 2.0, 1.0]]))
        state.transition.fc2.bias.copy_(torch.tensor([0.1, 0.0], dtype=torch.float64))  # 0.1: none in float32
        # Row 0, a = (0.5, -1): h = relu(0.5, -0.5, -1.5) = (0.5, 0, 0); W2·h + b2 = (0.6, 0)
        #   → a + (0.6, 0) = (1.1, -1)
        # Row 1, a = (2, 0): h = relu(2, 0.5, 1) = (2, 0.5, 1); W2·h + b2 = (2 - 0.5 + 0.5 + 0.1, 1 + 1) = (2.1, 2)
        #   → a + (2.1, 2) = (4.1, 2)
        expected = torch.tensor([[[1.1, -1.0], [4.1, 2.0]]], dtype=torch.float64)
        assert_same_maths(state.chain(1)[0], expected, reduction=3, depth=2)  # W1·a (2 terms), W2·h (3 terms)


def test_synthesizer_softmax_over_allowed_keys_by_hand(tiny_marian_kwargs):
    config = SimpleAttnMarianConfig(**tiny_marian_kwargs)
    spec = RandomSynthesizerHeads.normalize_spec(
        {"kind": "random_synthesizer", "num_heads": 1, "max_positions": 3}, "decoder_self", "test"
    )
    heads = RandomSynthesizerHeads(spec, config, "decoder_self", 0, head_dim=1).eval().double()  # rounding aside
    with torch.no_grad():
        logits = [[[0.0, 5.0, 5.0], [1.0, 0.0, 9.0], [0.0, math.log(2.0), math.log(3.0)]]]
        heads.logits.copy_(torch.tensor(logits, dtype=torch.float64))
    value = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64).view(1, 1, 3, 1)
    causal = AttentionContext(None, 0, 3, is_causal=True)
    output, weights = heads(None, None, value, causal, output_attentions=True)
    # causal rows: [1, 0, 0]; softmax(1, 0) = (e/(e+1), 1/(e+1)) = (0.731059, 0.268941); (1, 2, 3)/6
    expected = torch.tensor(
        [[1.0, 0.0, 0.0], [math.e / (math.e + 1), 1 / (math.e + 1), 0.0], [1 / 6, 2 / 6, 3 / 6]], dtype=torch.float64
    )
    assert_same_maths(weights[0, 0], expected, reduction=3)  # a softmax over 3 keys
    assert_same_maths(output[0, 0, :, 0], expected @ value.flatten(), reduction=3, depth=2)
    # a cached step at position 2 with 3 keys reads row 2
    step = AttentionContext(None, 2, 1, is_causal=True)
    assert_same_maths(heads(None, None, value, step, output_attentions=True)[1][0, 0, 0], expected[2], reduction=3)
    # a padded last key: row 2 renormalises over the real keys, softmax(0, log 2) = (1/3, 2/3)
    padded = AttentionContext(torch.tensor([[True, True, False]]), 0, 3, is_causal=True)
    assert_same_maths(
        heads(None, None, value, padded, output_attentions=True)[1][0, 0, 2],
        torch.tensor([1 / 3, 2 / 3, 0.0], dtype=torch.float64),
        reduction=3,
    )


# --- RAN inside the model ---------------------------------------------------------------------


def test_layers_attend_with_softmax_of_their_recurrent_logits():
    model = make_model(layout=LAYOUTS["ran-mixed"]).double()  # in float64: only rounding may differ
    bound = dict(reduction=M, depth=7)  # 2 steps of the chain (3 reductions of M terms each), the softmax
    source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
    with torch.no_grad():
        out = model(input_ids=source, decoder_input_ids=target, output_attentions=True)
        encoder_state, decoder_state = stack_state(model, "encoder_self"), stack_state(model, "decoder_self")
        a1, a2 = encoder_state.chain(2)
        n = source.shape[1]
        for layer, logits in enumerate((a1, a2)):
            # RAN heads are the first 2 of 4 (the group order); the dot heads follow
            assert_same_maths(out.encoder_attentions[layer][0, :2], logits[:, :n, :n].softmax(-1), **bound)
        d1, d2 = decoder_state.chain(2)
        t = target.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        # decoder layers 0 and 2 use RAN (layer 1 is dot): they are RAN layers 1 and 2, so A1 and A2
        for layer, logits in ((0, d1), (2, d2)):
            expected = logits[:, :t, :t].masked_fill(~causal, float("-inf")).softmax(-1)
            assert_same_maths(out.decoder_attentions[layer][0], expected, **bound)
    # one A0 per stack with the RAN heads only: 2 heads in the encoder, 4 in the decoder
    assert encoder_state.initial_logits.shape == (2, M, M) and decoder_state.initial_logits.shape == (4, M, M)


@pytest.mark.parametrize("name", ["ran-all", "syn-r"])
def test_weights_do_not_depend_on_the_tokens(name):
    model = make_model(layout=LAYOUTS[name])
    with torch.no_grad():
        first = model(
            input_ids=torch.tensor([[5, 6, 7, 0]]),
            decoder_input_ids=torch.tensor([[PAD, 8, 9]]),
            output_attentions=True,
        )
        second = model(
            input_ids=torch.tensor([[20, 21, 22, 0]]),
            decoder_input_ids=torch.tensor([[PAD, 30, 31]]),
            output_attentions=True,
        )
    for a, b in zip(
        first.encoder_attentions + first.decoder_attentions, second.encoder_attentions + second.decoder_attentions
    ):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert not torch.equal(first.logits, second.logits)


def count_calls(module):
    calls = []
    module.register_forward_hook(lambda *args: calls.append(1))
    return calls


@pytest.mark.parametrize("num_beams", [1, 3])
def test_decoding_computes_the_transition_once(num_beams):
    model = make_model(layout=LAYOUTS["ran-all"])
    encoder_calls = count_calls(stack_state(model, "encoder_self").transition)
    decoder_calls = count_calls(stack_state(model, "decoder_self").transition)
    source = torch.tensor([SOURCES[0]])
    kwargs = dict(input_ids=source, min_new_tokens=6, max_new_tokens=6, num_beams=num_beams, do_sample=False)
    with torch.no_grad():
        generated = model.generate(**kwargs)
        assert generated.shape[1] == 7
        # one chain per stack (A1..A_L), not one per step and layer: 2 encoder and 3 decoder layers
        assert (len(encoder_calls), len(decoder_calls)) == (2, 3)
        assert model.generate(**kwargs).tolist() == generated.tolist()
        assert (len(encoder_calls), len(decoder_calls)) == (2, 3)  # still cached
        # an in-place parameter update invalidates the cache
        stack_state(model, "decoder_self").transition.linear.bias.add_(1.0)
        model.generate(**kwargs)
        assert (len(encoder_calls), len(decoder_calls)) == (2, 6)
    # train()/eval() clear it
    model.train().eval()
    with torch.no_grad():
        model.generate(**kwargs)
    assert (len(encoder_calls), len(decoder_calls)) == (4, 9)


def test_training_builds_a_fresh_graph_every_step():
    model = make_model(layout=LAYOUTS["ran-all"]).train()
    state = stack_state(model, "encoder_self")
    calls = count_calls(state.transition)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    source, labels = torch.tensor([SOURCES[0]]), torch.tensor([[14, 15, 16, 0]])
    for _ in range(2):
        optimizer.zero_grad()
        model(input_ids=source, labels=labels).loss.backward()
        assert state.initial_logits.grad is not None and state.transition.linear.weight.grad is not None
        optimizer.step()
    # with gradients each forward runs the chain A0 -> A2 once, shared by the 2 encoder layers
    assert len(calls) == 2 * 2
    # nothing is kept after the forward: outside one, a layer's logits come from a chain of its own
    state.layer_logits(1)
    assert len(calls) == 2 * 2 + 2


@pytest.mark.parametrize("preset", ["ran-all", "ran-d", "ran-e"])
def test_one_chain_per_forward_gives_the_per_layer_chains_loss_and_gradients(preset):
    """k transitions per forward for a stack of k RAN layers instead of 1 + 2 + ... + k; gradient checkpointing
    keeps the per-layer chains (a checkpointed layer recomputes what it used), so it gives the reference."""
    # In float64, so that the other order of the same sums (the gradients of the shared chain add up before it)
    # leaves no float32 rounding differences. RAN's attention dropout 0.2 is on: the seed fixes its masks.
    model = make_model(preset).double().train()
    source, labels = torch.tensor([SOURCES[0]]), torch.tensor([[14, 15, 16, 0]])
    states = {
        site: stack.attention_state[f"{site}_recurrent"]
        for site, stack in (("encoder_self", model.model.encoder), ("decoder_self", model.model.decoder))
        if f"{site}_recurrent" in stack.attention_state
    }
    assert states
    calls = {site: count_calls(state.transition) for site, state in states.items()}
    layers = {"encoder_self": TINY_MARIAN["encoder_layers"], "decoder_self": TINY_MARIAN["decoder_layers"]}

    def loss_gradients_and_forward_calls():
        model.zero_grad()
        for site_calls in calls.values():
            site_calls.clear()
        torch.manual_seed(0)
        loss = model(input_ids=source, labels=labels).loss
        forward_calls = {site: len(site_calls) for site, site_calls in calls.items()}
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return loss.detach(), gradients, forward_calls

    loss, gradients, forward_calls = loss_gradients_and_forward_calls()
    assert forward_calls == {site: layers[site] for site in states}
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    reference_loss, reference_gradients, forward_calls = loss_gradients_and_forward_calls()
    assert forward_calls == {site: layers[site] * (layers[site] + 1) // 2 for site in states}
    assert_same_maths(loss, reference_loss, **model_reductions(model.config))
    assert gradients.keys() == reference_gradients.keys()
    assert any("transition" in name for name in gradients)
    bound = model_reductions(model.config)
    bound["depth"] *= 2  # the forward's reductions and as many again in the backward
    for name, reference in reference_gradients.items():
        assert_same_maths(gradients[name], reference, **bound)


@pytest.mark.parametrize(
    "layout",
    [
        LAYOUTS["ran-all"],
        LAYOUTS["ran-mixed"],
        {site: {**SYN, "attention_dropout": 0.2} for site in ("encoder_self", "decoder_self")},
    ],
    ids=["ran-all", "ran-mixed", "syn-r"],
)
def test_training_fast_path_equals_the_reference_path(layout):
    """Training with padding and attention dropout 0.2 (RAN's default): one softmax for all the layers of a stack,
    the chain on the rows read, the kept causal mask (fast path) give each layer's own softmax's loss and gradients
    (reference); each layer draws its own dropout masks, in the same order on both paths."""
    model = make_model(layout=layout).double().train()  # in float64: only rounding separates the paths
    source, source_mask = right_padded(SOURCES)
    labels = torch.tensor([[14, 15, 16, 0], [17, 18, 0, -100]])

    def loss_and_gradients():
        model.zero_grad()
        torch.manual_seed(0)
        loss = model(input_ids=source, attention_mask=source_mask, labels=labels).loss
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    fast_loss, fast_gradients = loss_and_gradients()
    set_attention_fast_paths(model, False)
    loss, gradients = loss_and_gradients()
    assert_same_maths(fast_loss, loss, **model_reductions(model.config))
    assert fast_gradients.keys() == gradients.keys()
    bound = model_reductions(model.config)
    bound["depth"] *= 2  # the forward's reductions and as many again in the backward
    for parameter_name, gradient in gradients.items():
        assert_same_maths(fast_gradients[parameter_name], gradient, **bound)


class SoftmaxCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.softmaxes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.softmaxes += func.overloadpacket == torch.ops.aten._softmax
        return func(*args, **(kwargs or {}))


def test_one_softmax_per_stack_and_forward_in_training():
    model = make_model(layout=LAYOUTS["ran-all"]).train()
    source, source_mask = right_padded(SOURCES)
    with SoftmaxCounter() as counter:
        model(input_ids=source, attention_mask=source_mask, labels=torch.tensor([[14, 15, 0], [16, 0, -100]]))
    # the encoder's 2 RAN layers and the decoder's 3 take one softmax per stack (the cross attention is dot's SDPA)
    assert counter.softmaxes == 2


def test_chain_on_the_rows_read_equals_the_full_chain():
    model = make_model(layout=LAYOUTS["ran-mixed"]).double()  # in float64: only rounding separates the two
    for site in ("encoder_self", "decoder_self"):
        state = stack_state(model, site)
        for full, rows in zip(state.chain(2), state.chain(2, rows=5)):
            # 2 steps of the transition: its products of M terms (2 with the FFN's) and the LayerNorm's mean, variance
            assert_same_maths(rows, full[:, :5], reduction=M, depth=6)


def test_chain_runs_in_float32_under_autocast():
    state = stack_state(make_model(layout=LAYOUTS["ran-all"]), "decoder_self")
    with torch.no_grad():
        expected = state.chain(3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            under_autocast = state.chain(3)
    for a, b in zip(under_autocast, expected):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=0, rtol=0)


# --- the fused route: the logits as SDPA's queries -------------------------------------------------------------

PADDED_KEYS = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [False] * 6])  # the last example: no real key
FUSED_CASES = {
    # name: (key padding mask, query_start, query_length, key_length, is_causal, head_dim)
    "encoder with padding": (PADDED_KEYS, 0, 6, 6, False, 8),
    "decoder": (None, 0, 6, 6, True, 8),
    "decoder with padding": (PADDED_KEYS, 0, 6, 6, True, 8),
    "cached step": (None, 5, 1, 6, True, 8),
    "cached step with padding": (PADDED_KEYS, 5, 1, 6, True, 8),
    "later queries of a prefix": (None, 2, 4, 6, True, 8),
    "more keys than the head's width": (PADDED_KEYS, 0, 6, 6, True, 4),
}


@pytest.mark.parametrize("case", list(FUSED_CASES))
def test_logit_attention_equals_the_softmax_of_the_logits_times_the_values(case):
    """One SDPA call with the logits' rows as queries and unit vectors as keys gives softmax(logits + mask)·V and its
    gradients. A query without any allowed key (the last example) gets uniform weights, as on the explicit path and in
    `dot`, but SDPA's CPU kernel does not give their gradient (nor does it for `dot`): it is left out of the loss."""
    key_padding_mask, query_start, query_length, key_length, is_causal, head_dim = FUSED_CASES[case]
    torch.manual_seed(0)
    logits = torch.randn(2, 7, M, dtype=torch.float64, requires_grad=True)  # (heads, rows, M)
    value = torch.randn(3, key_length, 2, head_dim, dtype=torch.float64).transpose(1, 2).requires_grad_()
    context = AttentionContext(key_padding_mask, query_start, query_length, is_causal)
    output = logit_attention(logits, value, context, dropout=0.0)
    weights = position_weights(logits, context, key_length, value.dtype)
    expected, _ = attend(weights, value, context, 0.0, output_attentions=False)
    assert output.shape == expected.shape == (3, 2, query_length, head_dim)
    # scores (queries as wide as M at most), softmax, weights·values; their backward as many again
    assert_same_maths(output, expected, reduction=M, depth=3)
    if query_width(key_length, head_dim, M) == head_dim:  # SDPA's CPU kernel: laid out for a merge of the heads
        assert output.transpose(1, 2).is_contiguous()
    grad_output = torch.ones_like(output)
    if key_padding_mask is not None:
        grad_output[~key_padding_mask.any(-1)] = 0
    gradients = torch.autograd.grad(output, (logits, value), grad_output)
    expected_gradients = torch.autograd.grad(expected, (logits, value), grad_output)
    for gradient, expected_gradient in zip(gradients, expected_gradients):
        assert_same_maths(gradient, expected_gradient, reduction=M, depth=6)


@pytest.mark.parametrize(
    "key_length, head_dim, max_positions, width",
    [(48, 64, 256, 64), (64, 64, 256, 64), (65, 64, 256, 72), (100, 64, 256, 104), (250, 64, 252, 252)],
)
def test_query_width_is_the_head_width_or_the_keys_aligned_to_8(key_length, head_dim, max_positions, width):
    assert query_width(key_length, head_dim, max_positions) == width


def test_logit_attention_drops_weights_with_the_given_probability():
    """Attention dropout inside SDPA (CUDA's fused kernels; the CPU runs SDPA's unfused maths): each draw differs,
    the mean of many draws is the output without dropout (inverted dropout keeps the expectation)."""
    torch.manual_seed(0)
    logits, value = torch.randn(2, 4, M), torch.randn(2, 2, 4, 8)
    context = AttentionContext(None, 0, 4, True)
    without_dropout = logit_attention(logits, value, context, dropout=0.0)
    draws = torch.stack([logit_attention(logits, value, context, dropout=0.5) for _ in range(4000)])
    assert not torch.allclose(draws[0], draws[1])
    # A draw is Σ_j w_j·v_j·m_j / (1 - p), m_j ~ Bernoulli(1 - p) independent: variance Σ_j w_j²·v_j²·p / (1 - p)
    weights = position_weights(logits, context, 4, value.dtype)
    spread = (weights.square() @ value.square()).sqrt().max().item()  # p / (1 - p) = 1
    torch.testing.assert_close(draws.mean(0), without_dropout, atol=sampling_tolerance(spread, 4000), rtol=0)


class OperatorCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


NO_DROPOUT = {"attention_dropout": 0.0}
RAN_MIXED_NO_DROPOUT = {
    "encoder_self": {
        "groups": [{**RAN, "num_heads": 2, "transition": "ffn", "freeze_initial": True, **NO_DROPOUT}, {"kind": "dot"}]
    },
    "decoder_self": [
        {**RAN, "layer_norm_residual": False, **NO_DROPOUT},
        "dot",
        {**RAN, "layer_norm_residual": False, **NO_DROPOUT},
    ],
}


@pytest.mark.parametrize(
    "layout",
    [RAN_NO_DROPOUT, RAN_MIXED_NO_DROPOUT, dict.fromkeys(("encoder_self", "decoder_self"), SYN)],
    ids=["ran-all", "ran-mixed", "syn-r"],
)
def test_training_through_sdpa_equals_the_reference_path(layout):
    """Training with padding and without attention dropout, where the CPU's flash kernel takes `logit_attention`
    (queries as wide as the values): the reference's loss and gradients, and no layer forms its weights (no
    softmax)."""
    model = make_model(layout=layout).double().train()  # in float64: only rounding separates the paths
    source, source_mask = right_padded(SOURCES)
    labels = torch.tensor([[14, 15, 16, 0], [17, 18, 0, -100]])

    def loss_and_gradients():
        model.zero_grad()
        with OperatorCounter() as counter:
            loss = model(input_ids=source, attention_mask=source_mask, labels=labels).loss
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return loss.detach(), gradients, counter.counts.get("aten._softmax", 0)

    fast_loss, fast_gradients, fast_softmaxes = loss_and_gradients()
    set_attention_fast_paths(model, False)
    loss, gradients, softmaxes = loss_and_gradients()
    assert fast_softmaxes == 0 < softmaxes
    assert_same_maths(fast_loss, loss, **model_reductions(model.config))
    assert fast_gradients.keys() == gradients.keys()
    bound = model_reductions(model.config)
    bound["depth"] *= 2  # the forward's reductions and as many again in the backward
    for parameter_name, gradient in gradients.items():
        assert_same_maths(fast_gradients[parameter_name], gradient, **bound)


def test_training_through_sdpa_with_dropout_as_on_a_gpu(monkeypatch):
    """The route CUDA takes in training (RAN's attention dropout 0.2 inside SDPA), forced on the CPU: no layer forms
    its weights, the dropout acts (with the residual dropout off, the loss differs from evaluation's), and every RAN
    parameter gets a gradient."""
    monkeypatch.setattr(attention_recurrent, "runs_fused", lambda value, width, dropout: True)
    model = make_model("ran-all", dropout=0.0)
    source, source_mask = right_padded(SOURCES)
    labels = torch.tensor([[14, 15, 16, 0], [17, 18, 0, -100]])
    with torch.no_grad():
        evaluation_loss = model(input_ids=source, attention_mask=source_mask, labels=labels).loss
    model.train()
    torch.manual_seed(0)
    with OperatorCounter() as counter:
        loss = model(input_ids=source, attention_mask=source_mask, labels=labels).loss
    loss.backward()
    assert counter.counts.get("aten._softmax", 0) == 0
    assert torch.isfinite(loss) and not torch.allclose(loss, evaluation_loss)
    recurrent = {name: p for name, p in model.named_parameters() if "initial_logits" in name or "transition" in name}
    assert recurrent and all(p.grad is not None and p.grad.abs().sum() > 0 for p in recurrent.values())


def test_gradient_checkpointing_gives_the_same_gradients():
    source, labels = torch.tensor([SOURCES[0]]), torch.tensor([[14, 15, 16, 0]])

    def gradients(model):
        model.zero_grad()
        model(input_ids=source, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    model = make_model(layout=RAN_NO_DROPOUT).double().train()  # in float64: only rounding separates the two
    bound = model_reductions(model.config)
    bound["depth"] *= 2  # the forward's reductions and as many again in the backward
    plain = gradients(model)
    for use_reentrant in (False, True):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
        checkpointed = gradients(model)
        assert checkpointed.keys() == plain.keys()
        for name in plain:
            assert_same_maths(checkpointed[name], plain[name], **bound)


def test_gradients_and_parameter_counts(tiny_marian_kwargs):
    d, h, layers = TINY_MARIAN["d_model"], 4, TINY_MARIAN["encoder_layers"] + TINY_MARIAN["decoder_layers"]
    base = make_model(layout={}).num_parameters()
    query_key = layers * 2 * (d * d + d)  # q_proj and k_proj of every self-attention sublayer

    ran = make_model(layout=LAYOUTS["ran-all"])
    # per stack: h attention matrices and one linear layer (+ its LayerNorm): "RAN only needs h attention
    # matrices and a linear layer"
    per_stack = h * M * M + (M * M + M) + 2 * M
    assert ran.num_parameters() == base - query_key + 2 * per_stack
    # the Synthesizer needs h × L matrices
    assert make_model(layout=LAYOUTS["syn-r"]).num_parameters() == base - query_key + layers * h * M * M
    names = [name for name, _ in ran.named_parameters()]
    assert not any(("self_attn.q_proj" in name or "self_attn.k_proj" in name) for name in names)
    # one transition per stack, counted once, shared by all its layers
    assert sum("transition.linear.weight" in name for name in names) == 2

    fixed = make_model(
        layout={site: {**RAN, "freeze_initial": True} for site in ("encoder_self", "decoder_self")}
    ).train()
    assert fixed.num_parameters() == base - query_key + 2 * (per_stack - h * M * M)
    fixed(input_ids=torch.tensor([SOURCES[0]]), labels=torch.tensor([[14, 15, 0]])).loss.backward()
    for site in ("encoder_self", "decoder_self"):
        state = stack_state(fixed, site)
        assert "initial_logits" in dict(state.named_buffers()) and state.initial_logits.grad is None
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in state.transition.parameters())
    grads = {name: p.grad for name, p in fixed.named_parameters()}
    assert all(grads[name] is not None for name in grads if "self_attn" in name)


@pytest.mark.parametrize("name", ["ran-all", "syn-r"])
def test_too_long_inputs_raise_a_clear_error(name):
    model = make_model(layout=LAYOUTS[name])
    with torch.no_grad():
        model(input_ids=torch.full((1, M), 5), decoder_input_ids=torch.full((1, M), 5))  # exactly M is fine
        with pytest.raises(ValueError, match=f"max_positions={M}"):
            model(input_ids=torch.full((1, M + 1), 5), decoder_input_ids=torch.tensor([[PAD]]))
        with pytest.raises(ValueError, match=f"max_positions={M}"):
            model.generate(input_ids=torch.tensor([[5, 6, 0]]), min_new_tokens=M + 2, max_new_tokens=M + 2)


# --- causality, padding, cache, save/load --------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_decoder_never_sees_later_tokens(name):
    model = make_model(layout=LAYOUTS[name]).double()  # in float64: only rounding may differ
    source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
    changed = target.clone()
    changed[0, 3:] = torch.tensor([25, 26, 27])
    with torch.no_grad():
        logits = model(input_ids=source, decoder_input_ids=target).logits
        changed_logits = model(input_ids=source, decoder_input_ids=changed).logits
    assert_same_maths(logits[:, :3], changed_logits[:, :3], **model_reductions(model.config))
    assert not torch.allclose(logits[:, 3:], changed_logits[:, 3:])


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_padded_batch_equals_each_example_alone(name):
    model = make_model(layout=LAYOUTS[name]).double()  # in float64: only rounding may differ
    source, source_mask = right_padded(SOURCES)
    target, target_mask = right_padded(TARGETS)
    with torch.no_grad():
        batch_logits = model(
            input_ids=source, attention_mask=source_mask, decoder_input_ids=target, decoder_attention_mask=target_mask
        ).logits
        for row, (src, tgt) in enumerate(zip(SOURCES, TARGETS)):
            alone = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits
            assert_same_maths(batch_logits[row, : len(tgt)], alone[0], **model_reductions(model.config))


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_cached_steps_equal_the_full_forward(name):
    model = make_model(layout=LAYOUTS[name]).double()  # in float64: only rounding may differ
    source, source_mask = right_padded(SOURCES)
    target = torch.tensor([TARGETS[0], TARGETS[1] + [22, 23]])
    with torch.no_grad():
        full = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target).logits
        steps, _ = cached_steps(model, source, source_mask, target)
    assert_same_maths(steps, full, **model_reductions(model.config))


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_cache_equals_without(name, num_beams):
    # In float64: candidates a few 1e-5 apart (beam search of a tiny random model) cannot swap on float32 rounding.
    model = make_model(layout=LAYOUTS[name]).double()
    source, source_mask = right_padded(SOURCES)
    kwargs = dict(input_ids=source, attention_mask=source_mask, max_new_tokens=8, num_beams=num_beams, do_sample=False)
    with torch.no_grad():
        assert model.generate(use_cache=True, **kwargs).tolist() == model.generate(use_cache=False, **kwargs).tolist()


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_save_and_load_round_trip(name, tmp_path):
    model = make_model(layout=LAYOUTS[name])
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.attention_layout == model.config.attention_layout
    original_tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for tensor_name, tensor in {**dict(reloaded.named_parameters()), **dict(reloaded.named_buffers())}.items():
        if "initial_logits" in tensor_name or "transition" in tensor_name or "self_attn.logits" in tensor_name:
            assert torch.equal(tensor, original_tensors[tensor_name]), tensor_name
    source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=source, decoder_input_ids=target).logits,
            model(input_ids=source, decoder_input_ids=target).logits,
            atol=0,
            rtol=0,
        )


# --- layout validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, field, message",
    [
        ({"transition": "gru"}, "encoder_self[0].transition", "'tanh_ln', 'ffn'"),
        ({"transition_ffn_dim": 512}, "transition_ffn_dim", "only the 'ffn' transition"),
        ({"transition": "ffn", "transition_ffn_dim": 0}, "transition_ffn_dim", "positive integer"),
        ({"transition": "ffn", "layer_norm_residual": False}, "layer_norm_residual", "'tanh_ln'"),
        ({"max_positions": 0}, "max_positions", "positive integer"),
        ({"attention_dropout": 1.5}, "attention_dropout", r"\[0, 1\)"),
        ({"freeze_initial": "yes"}, "freeze_initial", "true or false"),
        ({"window": 3}, "attention_layout.encoder_self[0]", "valid options"),
    ],
)
def test_bad_options_name_the_field(tiny_marian_kwargs, spec, field, message):
    with pytest.raises(LayoutError, match=message) as error:
        SimpleAttnMarianConfig(attention_layout={"encoder_self": {**RAN, **spec}}, **tiny_marian_kwargs)
    assert field in str(error.value)


@pytest.mark.parametrize("kind", ["recurrent", "random_synthesizer"])
def test_cross_attention_is_refused(tiny_marian_kwargs, kind):
    valid_sites = r"valid sites: \['encoder_self', 'decoder_self'\]"
    with pytest.raises(LayoutError, match=r"attention_layout\.cross\[0\].*" + valid_sites):
        SimpleAttnMarianConfig(attention_layout={"cross": {"kind": kind}}, **tiny_marian_kwargs)


@pytest.mark.parametrize(
    "second_layer, field",
    [
        ({**RAN, "max_positions": 2 * M}, "attention_layout.encoder_self[1].max_positions"),
        ({**RAN, "freeze_initial": True}, "attention_layout.encoder_self[1].freeze_initial"),
        (
            {"groups": [{**RAN, "num_heads": 2}, {"kind": "dot"}]},
            "attention_layout.encoder_self[1].groups[0].num_heads",
        ),
        ({"groups": [{**RAN, "num_heads": 2}, {**RAN, "num_heads": 2}]}, "attention_layout.encoder_self[1].groups"),
    ],
)
def test_layers_of_a_stack_must_agree_on_the_shared_state_at_config_time(tiny_marian_kwargs, second_layer, field):
    with pytest.raises(LayoutError) as error:
        SimpleAttnMarianConfig(attention_layout={"encoder_self": [RAN, second_layer]}, **tiny_marian_kwargs)
    assert str(error.value).startswith(field)


def test_specs_are_normalized_idempotently_with_the_papers_defaults(tiny_marian_kwargs):
    config = SimpleAttnMarianConfig(
        attention_layout={"encoder_self": "recurrent", "decoder_self": {"kind": "recurrent", "transition": "ffn"}},
        **tiny_marian_kwargs,
    )
    encoder_spec = config.attention_layout["encoder_self"][0]["groups"][0]
    assert encoder_spec == {
        "kind": "recurrent",
        "num_heads": 4,
        "max_positions": 256,
        "transition": "tanh_ln",
        "transition_ffn_dim": None,
        "layer_norm_residual": True,
        "freeze_initial": False,
        "attention_dropout": 0.2,
    }
    assert config.attention_layout["decoder_self"][0]["groups"][0]["transition_ffn_dim"] == 1024
    again = SimpleAttnMarianConfig(attention_layout=config.attention_layout, **tiny_marian_kwargs)
    assert again.attention_layout == config.attention_layout
    synthesizer = SimpleAttnMarianConfig(attention_layout={"encoder_self": "random_synthesizer"}, **tiny_marian_kwargs)
    assert synthesizer.attention_layout["encoder_self"][0]["groups"][0] == {
        "kind": "random_synthesizer",
        "num_heads": 4,
        "max_positions": 256,
        "attention_dropout": None,
    }
