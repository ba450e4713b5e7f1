"""Gaussian mixture cross attention (Zhang and Feng 2021): the mixture maths, σ guards, fusion, model behaviour."""

import math
from types import SimpleNamespace

import pytest
import torch

from hf_simple_attn import LayoutError, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.modeling.attention_gaussian_mixture import (
    FUSIONS,
    NORMALIZATIONS,
    SIGMA_FLOOR,
    GateFusion,
    GaussianMixtureDensity,
    GaussianMixtureHeads,
    mixture_log_density,
)
from hf_simple_attn.modeling.attention_heads import AttentionContext

from conftest import assert_hand_computed, assert_same_maths, model_reductions


pytestmark = pytest.mark.numerics


torch.set_num_threads(1)

HEAD_DIM = 8
SQRT_2PI = math.sqrt(2 * math.pi)


def make_heads(num_heads=2, **options) -> GaussianMixtureHeads:
    spec = GaussianMixtureHeads.normalize_spec(
        {"kind": "gaussian_mixture", "num_heads": num_heads, **options}, "cross", "f"
    )
    heads = GaussianMixtureHeads(spec, SimpleNamespace(attention_dropout=0.0), "cross", 0, HEAD_DIM)
    for parameter in heads.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    return heads.eval()


def fix_output(network, raw_output):
    """Make a `V·tanh(W·q + b1) + b2` net output `raw_output` for every query (W = V = b1 = 0, b2 = raw_output)."""
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.zero_()
        network.output.bias.copy_(torch.as_tensor(raw_output, dtype=network.output.bias.dtype))


def context_for(key_padding_mask, query_length):
    return AttentionContext(
        key_padding_mask=key_padding_mask, query_start=0, query_length=query_length, is_causal=False
    )


def logit(p):
    return math.log(p / (1 - p))


# --- the mixture maths -------------------------------------------------------------------------


def test_one_mixture_row_by_hand():
    # ω = (0.5, 0.5), μ = (2, 4), σ = (1, 0.5), Z = √(2π)σ, positions j = 1..5.
    #   component 1: 0.5/√(2π) = 0.19947114 · exp(-(j-2)²/2)   -> 0.12098536, 0.19947114, 0.12098536, 0.02699548, 0.00221592
    #   component 2: 0.5/(0.5√(2π)) = 0.39894228 · exp(-2(j-4)²) -> 6.1e-9, 0.00013383, 0.05399097, 0.39894228, 0.05399097
    #   β = sum                                                   -> 0.12098537, 0.19960497, 0.17497633, 0.42593776, 0.05620689
    sigma = torch.tensor([1.0, 0.5], dtype=torch.float64)
    log_beta = mixture_log_density(
        log_weight=torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64)).view(1, 1, 1, 2),
        log_normalizer=torch.log(SQRT_2PI * sigma).view(1, 1, 1, 2),
        mean=torch.tensor([2.0, 4.0], dtype=torch.float64).view(1, 1, 1, 2),
        sigma=sigma.view(1, 1, 1, 2),
        positions=torch.arange(1.0, 6.0, dtype=torch.float64).view(1, 5),
    )
    expected = [0.12098537, 0.19960497, 0.17497633, 0.42593776, 0.05620689]
    assert_hand_computed(log_beta.exp().view(5), expected, decimals=8, reduction=2)  # a sum of 2 components


def test_conversion_layer_and_clamp_through_the_module():
    # J = 6, K = 2. ω̂ = (log 3, 0) -> ω = softmax = (0.75, 0.25).
    # μ̂ = (0, log 9) -> μ = 6·sigmoid = (3, 5.4).
    # σ̂ = (0, 20):  component 1: min(6/6·0.5, 3/3, 3/3) = 0.5;
    #               component 2: min(6/6·1, 5.4/3 = 1.8, (6-5.4)/3 = 0.2) = 0.2 (the right-border clamp).
    # β_j = 0.75/(0.5√(2π)) = 0.59841342 · exp(-(j-3)²/0.5) + 0.25/(0.2√(2π)) = 0.49867785 · exp(-(j-5.4)²/0.08):
    #   j=1: 0.59841342·e^-8 = 0.00020075         j=4: 0.08098645 (+ 0.4987·e^-24.5 ≈ 1e-11)
    #   j=2: 0.59841342·e^-2 = 0.08098645         j=5: 0.00020075 + 0.49867785·e^-2   = 0.06768945
    #   j=3: 0.59841342                           j=6: 9e-9       + 0.49867785·e^-4.5 = 0.00553982
    heads = make_heads(num_heads=1, num_components=2, fusion="gmm_only").double()  # in float64: rounding aside
    fix_output(heads.omega_ffn, [math.log(3.0), 0.0])
    fix_output(heads.mu_ffn, [0.0, math.log(9.0)])
    fix_output(heads.sigma_ffn, [0.0, 20.0])
    query = torch.randn(1, 1, 1, HEAD_DIM, dtype=torch.float64)
    log_weight, log_normalizer, mean, sigma = heads.mixture_parameters(
        query, torch.tensor([6.0], dtype=torch.float64), context_for(None, 1)
    )
    bound = dict(reduction=HEAD_DIM, depth=3)  # the nets' two products (HEAD_DIM terms), a softmax over components
    assert_same_maths(log_weight.exp().view(2), torch.tensor([0.75, 0.25], dtype=torch.float64), **bound)
    assert_same_maths(mean.view(2), torch.tensor([3.0, 5.4], dtype=torch.float64), **bound)
    assert_same_maths(sigma.view(2), torch.tensor([0.5, 0.2], dtype=torch.float64), **bound)
    assert_same_maths(log_normalizer.exp().view(2), SQRT_2PI * torch.tensor([0.5, 0.2], dtype=torch.float64), **bound)
    value = torch.randn(1, 1, 6, HEAD_DIM, dtype=torch.float64)
    key = torch.randn(1, 1, 6, HEAD_DIM, dtype=torch.float64)
    output, weights = heads(query, key, value, context_for(None, 1), output_attentions=True)
    expected = [0.00020075, 0.08098645, 0.59841342, 0.08098645, 0.06768945, 0.00553982]
    assert_hand_computed(weights.view(6), expected, decimals=8, reduction=HEAD_DIM, depth=4)
    assert_same_maths(output, weights @ value, reduction=6)


@pytest.mark.parametrize(
    "mu_hat, expected_mean, expected_sigma",
    [
        # J = 5, σ̂ = +20 so J/6·sigmoid(σ̂) = 5/6 never binds.
        (logit(0.06), 0.3, 0.1),  # μ = 0.3: μ/3 = 0.1 binds (left border)
        (logit(0.94), 4.7, 0.1),  # μ = 4.7: (5 - 4.7)/3 = 0.1 binds (right border)
        (logit(0.004), 0.02, SIGMA_FLOOR),  # μ/3 = 0.0067 < floor
        (-1e4, 0.0, SIGMA_FLOOR),  # μ forced to 0: σ would be 0
        (1e4, 5.0, SIGMA_FLOOR),  # μ forced to J: σ would be 0
    ],
)
def test_sigma_clamp_at_the_borders_and_floor(mu_hat, expected_mean, expected_sigma):
    heads = make_heads(num_heads=1, num_components=1).double()  # in float64: only rounding separates the two
    fix_output(heads.mu_ffn, [mu_hat])
    fix_output(heads.sigma_ffn, [20.0])
    _, _, mean, sigma = heads.mixture_parameters(
        torch.randn(1, 1, 1, HEAD_DIM, dtype=torch.float64),
        torch.tensor([5.0], dtype=torch.float64),
        context_for(None, 1),
    )
    bound = dict(reduction=HEAD_DIM, depth=2)  # the nets' two products (HEAD_DIM terms)
    assert_same_maths(mean.view(()), torch.tensor(expected_mean, dtype=torch.float64), **bound)
    assert_same_maths(sigma.view(()), torch.tensor(expected_sigma, dtype=torch.float64), **bound)


def test_mean_at_the_borders_gives_finite_weights():
    # Positions are 1-based (paper, Eq. 6); J = 4. `approximate` with σ̂ = +20: the border clamp alone
    # takes σ to the floor. `strict` has no clamp (σ = J·sigmoid(σ̂)), so σ̂ = -1e4 takes it there.
    # μ = J: σ = floor, a spike 1/(√(2π)·0.01) = 39.894228 on token J.
    # μ = 0: the nearest token (j = 1) is 1/0.01 = 100 floors away: β = exp(-5000)·39.9 = 0 everywhere,
    # while `strict` renormalises in log space and puts all weight on j = 1.
    for mu_hat, approximate_row, strict_row in [
        (1e4, [0.0, 0.0, 0.0, 39.894228], [0.0, 0.0, 0.0, 1.0]),
        (-1e4, [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
    ]:
        for normalization, sigma_hat, row in [("approximate", 20.0, approximate_row), ("strict", -1e4, strict_row)]:
            heads = make_heads(num_heads=1, num_components=2, normalization=normalization, fusion="gmm_only")
            heads.double()  # in float64: the rounding of computing the rows is far below their 6 decimals
            fix_output(heads.mu_ffn, [mu_hat, mu_hat])
            fix_output(heads.sigma_ffn, [sigma_hat, sigma_hat])
            query = torch.randn(1, 1, 1, HEAD_DIM, dtype=torch.float64)
            value = torch.randn(1, 1, 4, HEAD_DIM, dtype=torch.float64)
            _, weights = heads(query, query, value, context_for(None, 1), output_attentions=True)
            assert_hand_computed(weights.view(4), row, decimals=6, reduction=HEAD_DIM, depth=4)


def test_synthesis_network_by_hand():
    # `none` (Table 1, Graves 2013): Z = 1, ω = exp(ω̂), μ_i = μ_{i-1} + exp(μ̂_i), σ = √(exp(-σ̂)/2).
    # With ω̂ = μ̂ = σ̂ = 0 and K = 2: ω = 1, each step moves μ by 1 (μ = 1, 2, 3 for targets 0, 1, 2),
    # 2σ² = 1, so β[i, j] = 2·exp(-(j - (i+1))²), j = 1..4, with 2 = 2e^0, 0.73575888 = 2e^-1, 0.03663128 = 2e^-4,
    # 0.00024682 = 2e^-9: each row peaks at j = i + 1.
    heads = make_heads(num_heads=1, num_components=2, normalization="none", fusion="gmm_only").double()
    for network in (heads.omega_ffn, heads.mu_ffn, heads.sigma_ffn):
        fix_output(network, [0.0, 0.0])
    query = torch.randn(1, 1, 3, HEAD_DIM, dtype=torch.float64)  # in float64: rounding far below 8 decimals
    value = torch.randn(1, 1, 4, HEAD_DIM, dtype=torch.float64)
    _, weights = heads(query, query, value, context_for(None, 3), output_attentions=True)
    # the nets' two products (HEAD_DIM terms), the running sum of the means, the sum over the components
    bound = dict(reduction=HEAD_DIM, depth=4)
    assert_hand_computed(weights[0, 0, 0], [2.0, 0.73575888, 0.03663128, 0.00024682], decimals=8, **bound)
    assert_hand_computed(weights[0, 0, 1], [0.73575888, 2.0, 0.73575888, 0.03663128], decimals=8, **bound)
    assert_hand_computed(weights[0, 0, 2], [0.03663128, 0.73575888, 2.0, 0.73575888], decimals=8, **bound)
    # Step by step with a decoding state, the running means continue where the last step stopped.
    state = {}
    for position in range(3):
        step = AttentionContext(None, position, 1, False, decoding_state=state)
        _, step_weights = heads(query[:, :, position : position + 1], query, value, step, output_attentions=True)
        assert_same_maths(step_weights[0, 0, 0], weights[0, 0, position], **bound)
    with pytest.raises(RuntimeError, match="needs the cache that holds the running sum"):
        later = AttentionContext(key_padding_mask=None, query_start=3, query_length=1, is_causal=False)
        heads(query[:, :, :1], query[:, :, :1], value, later)


def test_fusion_variants():
    # In float64: only rounding separates the module from the fusion written out.
    query, key, value = (torch.randn(2, 2, length, HEAD_DIM, dtype=torch.float64) for length in (3, 5, 5))
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])
    context = context_for(padding, 3)
    reference = make_heads(fusion="gmm_only").double()
    _, beta = reference(query, key, value, context, output_attentions=True)
    scores = (query @ key.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
    alpha = torch.softmax(scores.masked_fill(~padding[:, None, None, :], float("-inf")), dim=-1)
    for fusion in ("gate", "average"):
        heads = make_heads(fusion=fusion).double()
        heads.load_state_dict(reference.state_dict(), strict=False)
        if fusion == "gate":
            fix_output(heads.gate_ffn, [logit(0.3)])
            expected = 0.7 * alpha + 0.3 * beta  # Eq. 13 with g = 0.3
        else:
            expected = (alpha + beta) / 2
        output, weights = heads(query, key, value, context, output_attentions=True)
        # the nets (two products of HEAD_DIM terms), the mixture and its sums over keys, α's scores and softmax, V
        assert_same_maths(weights, expected, reduction=HEAD_DIM, depth=6)
        assert_same_maths(output, expected @ value, reduction=HEAD_DIM, depth=7)
    assert reference.gate_ffn is None
    assert (beta[1, :, :, 3:] == 0).all()


EXTREMES = [-1e4, -30.0, 0.0, 30.0, 1e4]


def extreme_heads(normalization, mu_hat, sigma_hat, omega_hat):
    """Two-component heads whose nets output the given raw μ̂, σ̂ and ω̂ (first component) whatever the query."""
    heads = make_heads(num_components=2, normalization=normalization)
    with torch.no_grad():
        heads.mu_ffn.output.bias.fill_(mu_hat)
        heads.sigma_ffn.output.bias.fill_(sigma_hat)
        heads.omega_ffn.output.bias.copy_(torch.tensor([omega_hat, 0.0]))
        heads.gate_ffn.output.bias.fill_(omega_hat)
    return heads


def trainable_inputs(batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random query (batch, 2 heads, 3 queries, d), key and value (batch, 2 heads, 6 keys, d) that need gradients."""
    query = torch.randn(batch_size, 2, 3, HEAD_DIM, requires_grad=True)
    key = torch.randn(batch_size, 2, 6, HEAD_DIM, requires_grad=True)
    value = torch.randn(batch_size, 2, 6, HEAD_DIM, requires_grad=True)
    return query, key, value


@pytest.mark.parametrize("normalization", ["approximate", "strict", "none"])
def test_no_nan_or_inf_for_any_length_and_extreme_parameters(normalization):
    for source_length in range(1, 7):
        for mu_hat in EXTREMES:
            for sigma_hat in EXTREMES:
                for omega_hat in (-1e4, 1e4):
                    heads = extreme_heads(normalization, mu_hat, sigma_hat, omega_hat)
                    query, key, value = trainable_inputs(batch_size=2)
                    padding = torch.arange(6)[None, :] < torch.tensor([[6], [source_length]])
                    output, weights = heads(query, key, value, context_for(padding, 3), output_attentions=True)
                    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
                    assert (weights[1, :, :, source_length:] == 0).all()
                    (output.square().sum() + weights.sum()).backward()
                    gradients = [query.grad, key.grad, value.grad] + [p.grad for p in heads.parameters()]
                    assert all(torch.isfinite(g).all() for g in gradients), (
                        source_length,
                        mu_hat,
                        sigma_hat,
                        omega_hat,
                    )


# --- options and layouts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"num_components": 0}, r"cross\[0\]\.num_components: expected a positive integer"),
        ({"num_components": True}, r"cross\[0\]\.num_components: expected a positive integer"),
        ({"hidden_size": -1}, r"cross\[0\]\.hidden_size: expected a positive integer <= 65536, got -1"),
        (
            {"normalization": "exact"},
            r"cross\[0\]\.normalization: expected one of \['approximate', 'strict', 'none'\], got 'exact'",
        ),
        ({"fusion": "max"}, r"cross\[0\]\.fusion: expected one of \['gate', 'average', 'gmm_only'\], got 'max'"),
        ({"components": 4}, r"unknown option\(s\) \['components'\] for kind 'gaussian_mixture'; valid options: \["),
    ],
)
def test_bad_options_fail_at_config_time(tiny_marian_kwargs, spec, message):
    with pytest.raises(LayoutError, match=message):
        SimpleAttnMarianConfig(attention_layout={"cross": {"kind": "gaussian_mixture", **spec}}, **tiny_marian_kwargs)


def test_cross_attention_only(tiny_marian_kwargs):
    with pytest.raises(
        LayoutError,
        match=r"encoder_self\[0\]: kind 'gaussian_mixture' cannot be used at site 'encoder_self'; valid sites: \['cross'\]",
    ):
        SimpleAttnMarianConfig(attention_layout={"encoder_self": "gaussian_mixture"}, **tiny_marian_kwargs)


def test_layout_places_it_on_selected_layers_and_survives_reload(tiny_marian_kwargs):
    layout = {
        "cross": {"default": "dot", "layers": {"top_third": {"kind": "gaussian_mixture", "normalization": "strict"}}}
    }
    config = SimpleAttnMarianConfig(attention_layout=layout, **tiny_marian_kwargs)
    assert [spec["groups"][0]["kind"] for spec in config.attention_layout["cross"]] == [
        "dot",
        "dot",
        "gaussian_mixture",
    ]
    assert config.attention_layout["cross"][2]["groups"] == [
        {
            "kind": "gaussian_mixture",
            "num_heads": 4,
            "num_components": 4,
            "hidden_size": None,
            "normalization": "strict",
            "fusion": "gate",
        }
    ]
    reloaded = SimpleAttnMarianConfig.from_dict(config.to_dict())
    assert reloaded.attention_layout == config.attention_layout
    heads = SimpleAttnMarianMTModel(config).model.decoder.layers[2].encoder_attn.heads.groups[0]
    assert heads.mu_ffn.hidden.weight.shape == (8, 8)  # hidden size = head_dim = 32 / 4
    assert heads.mu_ffn.output.weight.shape == (4, 8)  # K = 4 components
    assert heads.gate_ffn.output.weight.shape == (1, 8)


# --- the model ----------------------------------------------------------------------------------


def build_model(tiny_marian_kwargs, seed=0, **options):
    layout = {"cross": {"kind": "gaussian_mixture", **options}}
    config = SimpleAttnMarianConfig(attention_layout=layout, **tiny_marian_kwargs)
    torch.manual_seed(seed)
    model = SimpleAttnMarianMTModel(config)
    with torch.no_grad():  # make the mixture depend visibly on the query
        for name, parameter in model.named_parameters():
            if "_ffn." in name:
                parameter.normal_(std=1.0)
            elif "encoder_attn.q_proj" in name or "encoder_attn.k_proj" in name:
                parameter.normal_(std=0.3)
    return model.eval()


SOURCES = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0, 39, 39, 39], [14, 0, 39, 39, 39, 39, 39]])
TARGETS = torch.tensor([[39, 3, 4, 5, 6, 7], [39, 8, 9, 10, 11, 12], [39, 13, 14, 15, 16, 17]])


@pytest.mark.parametrize("normalization", ["approximate", "strict", "none"])
def test_padded_batch_equals_each_example_alone_and_is_causal(tiny_marian_kwargs, normalization):
    model = build_model(tiny_marian_kwargs, normalization=normalization).double()  # in float64: rounding aside
    attention_mask = SOURCES != 39
    with torch.no_grad():
        batch = model(
            input_ids=SOURCES, attention_mask=attention_mask, decoder_input_ids=TARGETS, output_attentions=True
        )
        for index in range(3):
            length = int(attention_mask[index].sum())
            alone = model(input_ids=SOURCES[index : index + 1, :length], decoder_input_ids=TARGETS[index : index + 1])
            assert_same_maths(batch.logits[index : index + 1], alone.logits, **model_reductions(model.config))
        changed = TARGETS.clone()
        changed[:, 4:] = 20
        later_changed = model(input_ids=SOURCES, attention_mask=attention_mask, decoder_input_ids=changed)
    assert_same_maths(later_changed.logits[:, :4], batch.logits[:, :4], **model_reductions(model.config))
    assert not torch.allclose(later_changed.logits[:, 4:], batch.logits[:, 4:])
    for weights in batch.cross_attentions:  # γ as used: shape (batch, heads, q_len, k_len), zero at padding
        assert weights.shape == (3, 4, 6, 7)
        assert (weights.masked_select(~attention_mask[:, None, None, :]) == 0).all()


@pytest.mark.parametrize(
    "options",
    [{}, {"normalization": "strict", "fusion": "average"}, {"fusion": "gmm_only"}, {"normalization": "none"}],
)
def test_generate_with_cache_equals_without(tiny_marian_kwargs, options):
    model = build_model(tiny_marian_kwargs, seed=1, **options).double()  # in float64: rounding aside
    attention_mask = SOURCES != 39
    for num_beams in (1, 3):
        settings = dict(
            max_new_tokens=8, num_beams=num_beams, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
        cached = model.generate(input_ids=SOURCES, attention_mask=attention_mask, use_cache=True, **settings)
        uncached = model.generate(input_ids=SOURCES, attention_mask=attention_mask, use_cache=False, **settings)
        assert torch.equal(cached.sequences, uncached.sequences)
        # every step's scores too: a tiny random model repeats tokens, so equal tokens alone prove little. The
        # tokens generation rules out (-inf) alike; the others are float32 in `generate` (the logits rounded, their
        # log-softmax over the vocabulary, the beams' running sums): equal up to float32's rounding of those
        scores, uncached_scores = torch.stack(cached.scores), torch.stack(uncached.scores)
        finite = uncached_scores.isfinite()
        assert torch.equal(scores.isfinite(), finite)
        assert_same_maths(scores[finite], uncached_scores[finite], reduction=model.config.vocab_size, depth=3)


@pytest.mark.parametrize("fusion", ["gate", "gmm_only"])
def test_gradients_reach_the_mixture_nets_gate_and_projections(tiny_marian_kwargs, fusion):
    model = build_model(tiny_marian_kwargs, fusion=fusion).train()
    labels = TARGETS[:, 1:].contiguous()
    model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=labels).loss.backward()
    without_gradient = {
        name
        for name, p in model.named_parameters()
        if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)
    }
    if fusion == "gate":
        assert without_gradient == set()
        assert "model.decoder.layers.0.encoder_attn.heads.groups.0.gate_ffn.output.bias" in dict(
            model.named_parameters()
        )
    else:  # γ = β: no dot product, so no key projection (nor gate) is built, and every parameter gets a gradient
        assert without_gradient == set()
        assert not any("encoder_attn.k_proj" in name or "gate_ffn" in name for name, _ in model.named_parameters())


def test_save_and_load_round_trip(tiny_marian_kwargs, tmp_path):
    model = build_model(tiny_marian_kwargs, num_components=3, hidden_size=5, fusion="average")
    model.save_pretrained(tmp_path)
    loaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path).eval()
    assert loaded.config.attention_layout == model.config.attention_layout
    inputs = dict(input_ids=SOURCES, attention_mask=SOURCES != 39, decoder_input_ids=TARGETS)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, atol=0, rtol=0)


# --- the fast path ------------------------------------------------------------------------------


def test_fast_path_autograd_functions_by_gradcheck():
    # Positions as the fast path makes them: the second example's last two keys padded, far past its source.
    positions = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 400.0, 400.0]], dtype=torch.float64)
    positions = positions[:, None, None, :, None]
    generator = torch.Generator().manual_seed(0)
    for divide_by_width, normalize in [(True, False), (True, True), (False, False)]:
        log_weight = torch.randn(2, 2, 3, 2, dtype=torch.float64, generator=generator).requires_grad_()
        mean = (5 * torch.rand(2, 2, 3, 2, dtype=torch.float64, generator=generator)).requires_grad_()
        width = (0.5 + torch.rand(2, 2, 3, 2, dtype=torch.float64, generator=generator)).requires_grad_()

        def density(log_weight, mean, width):
            return GaussianMixtureDensity.apply(log_weight, mean, width, positions, divide_by_width, normalize)

        assert torch.autograd.gradcheck(density, (log_weight, mean, width))
        # β as written: Σ_k ω_k/Z_k·exp(-4.5·((x - m_k)/w_k)²), Z = w or 1, divided by its sum with `normalize`
        log_scale = log_weight - width.log() if divide_by_width else log_weight
        terms = (log_scale[..., None, :] - 4.5 * ((positions - mean[..., None, :]) / width[..., None, :]) ** 2).exp()
        expected = terms.sum(-1)
        if normalize:
            expected = expected / expected.sum(-1, keepdim=True)
        assert_same_maths(density(log_weight, mean, width), expected, reduction=5, depth=2)  # components, positions
        assert (expected[1, ..., 3:] == 0).all()
    start, end = (torch.randn(2, 3, 4, dtype=torch.float64, generator=generator).requires_grad_() for _ in range(2))
    weight = torch.rand(2, 3, 1, dtype=torch.float64, generator=generator).requires_grad_()
    assert torch.autograd.gradcheck(GateFusion.apply, (start, end, weight))
    assert_same_maths(GateFusion.apply(start, end, weight), (1 - weight) * start + weight * end, reduction=2)


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_fast_path_equals_reference_with_gradients(normalization, fusion):
    # In float64, so that only rounding separates the two; sources of 7, 4 and 1 real tokens.
    heads = make_heads(num_heads=3, normalization=normalization, fusion=fusion).double()
    generator = torch.Generator().manual_seed(0)
    query, key, value = (
        torch.randn(3, 3, length, HEAD_DIM, dtype=torch.float64, generator=generator).requires_grad_()
        for length in (5, 7, 7)
    )
    probe = torch.randn(3, 3, 5, HEAD_DIM, dtype=torch.float64, generator=generator)
    inputs = [query, key, value, *heads.parameters()]
    results = {}
    for fast_path in (True, False):
        heads.fast_path = fast_path
        context = context_for(torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]]), 5)
        output, weights = heads(query, key, value, context)
        assert weights is None
        results[fast_path] = (output, torch.autograd.grad((output * probe).sum(), inputs, allow_unused=True))
        # A source of padding only (J = 0) gives the same output; not the same gradient through α, whose rows
        # without any real key SDPA's backward takes as weight 1 per key (also for `dot`).
        context = context_for(torch.arange(7)[None, :] < torch.tensor([[7], [0], [3]]), 5)
        results[fast_path, "J = 0"] = heads(query, key, value, context)[0]
    (fast_output, fast_gradients), (output, gradients) = results[True], results[False]
    # forward: the nets (two products of HEAD_DIM terms), the mixture's sums over components and keys, α's scores and
    # softmax, the weighted sum of the values (7 keys at most); the backward as many again
    bound = dict(reduction=HEAD_DIM, depth=14)
    assert_same_maths(fast_output, output, **bound)
    for fast_gradient, gradient in zip(fast_gradients, gradients, strict=True):
        if gradient is None:  # the keys with `gmm_only`
            assert fast_gradient is None
        else:
            assert_same_maths(fast_gradient, gradient, **bound)
    assert_same_maths(results[True, "J = 0"], results[False, "J = 0"], **bound)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_fast_path_gives_padded_keys_no_weight(normalization):
    # `approximate` puts padded keys far past the source instead of masking them: at the widest σ (J/6, μ = J/2)
    # and with random nets, their values may be anything without changing the output at all.
    query, key, value = torch.randn(2, 2, 3, HEAD_DIM), torch.randn(2, 2, 6, HEAD_DIM), torch.randn(2, 2, 6, HEAD_DIM)
    context = context_for(torch.arange(6)[None, :] < torch.tensor([[6], [3]]), 3)
    changed = value.clone()
    changed[1, :, 3:] = 1e6
    widest = make_heads(normalization=normalization)
    fix_output(widest.mu_ffn, [0.0] * 4)
    fix_output(widest.sigma_ffn, [20.0] * 4)
    for heads in (make_heads(normalization=normalization), widest):
        with torch.no_grad():
            output, _ = heads(query, key, value, context)
            changed_output, _ = heads(query, key, changed, context)
        torch.testing.assert_close(changed_output, output, atol=0, rtol=0)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_fast_path_no_nan_or_inf_for_extreme_parameters(normalization):
    for mu_hat in EXTREMES:
        for sigma_hat in EXTREMES:
            for omega_hat in (-1e4, 1e4):
                heads = extreme_heads(normalization, mu_hat, sigma_hat, omega_hat)
                query, key, value = trainable_inputs(batch_size=3)
                padding = torch.arange(6)[None, :] < torch.tensor([[6], [1], [0]])
                output, _ = heads(query, key, value, context_for(padding, 3))
                assert torch.isfinite(output).all()
                output.square().sum().backward()
                gradients = [query.grad, key.grad, value.grad] + [p.grad for p in heads.parameters()]
                assert all(torch.isfinite(g).all() for g in gradients), (mu_hat, sigma_hat, omega_hat)


def test_inference_reuses_the_joined_nets_until_a_parameter_changes():
    heads = make_heads().double()  # in float64: only rounding separates the fast path from the weights
    query, key, value = (torch.randn(2, 2, length, HEAD_DIM, dtype=torch.float64) for length in (3, 5, 5))
    context = context_for(None, 3)
    with torch.no_grad():
        first, _ = heads(query, key, value, context)
        joined = heads.network_weights_memo[2]
        again, _ = heads(query, key, value, context)
        assert heads.network_weights_memo[2] is joined
        heads.sigma_ffn.output.bias.add_(1.0)  # an in-place update (as an optimizer's step) is seen
        changed, _ = heads(query, key, value, context)
        assert heads.network_weights_memo[2] is not joined
        _, weights = heads(query, key, value, context, output_attentions=True)
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    assert_same_maths(changed, weights @ value, reduction=HEAD_DIM, depth=7)  # as in test_fusion_variants
    assert not torch.allclose(changed, first)
    # With gradients, the nets are joined in the graph (their parameters get gradients), never from the memo.
    output, _ = heads(query, key, value, context)
    output.sum().backward()
    assert all(p.grad is not None for p in heads.parameters())


@pytest.mark.parametrize(
    "options", [{}, {"normalization": "strict", "fusion": "average"}, {"normalization": "none", "fusion": "gmm_only"}]
)
def test_training_step_equals_reference(tiny_marian_kwargs, options):
    model = build_model(tiny_marian_kwargs, **options).double().train()  # in float64: rounding aside
    labels = TARGETS[:, 1:].contiguous()
    results = []
    for fast_paths in (True, False):
        set_attention_fast_paths(model, fast_paths)
        model.zero_grad()
        loss = model(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=labels).loss
        loss.backward()
        results.append((loss, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (fast_loss, fast_gradients), (loss, gradients) = results
    assert_same_maths(fast_loss, loss, **model_reductions(model.config))
    assert fast_gradients.keys() == gradients.keys()
    bound = model_reductions(model.config)
    bound["depth"] *= 2  # the forward's reductions and as many again in the backward
    for name, gradient in gradients.items():
        assert_same_maths(fast_gradients[name], gradient, **bound)


def test_attention_dropout_in_training_takes_the_reference_path(tiny_marian_kwargs):
    # Dropout acts on the weights γ (Eq. 13), which the fast path never forms.
    model = build_model({**tiny_marian_kwargs, "attention_dropout": 0.3}).train()
    logits = []
    for fast_paths in (True, False):
        set_attention_fast_paths(model, fast_paths)
        torch.manual_seed(5)
        logits.append(model(input_ids=SOURCES, attention_mask=SOURCES != 39, decoder_input_ids=TARGETS).logits)
    torch.testing.assert_close(logits[0], logits[1], atol=0, rtol=0)


def test_bf16_autocast_training_step_is_close_to_float32(tiny_marian_kwargs):
    model = build_model(tiny_marian_kwargs).train()
    inputs = dict(input_ids=SOURCES, attention_mask=SOURCES != 39, labels=TARGETS[:, 1:].contiguous())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**inputs).loss
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # tolerance: bf16 autocast is another computation, not another order of this one, and the rounding bound of a
    # whole model in bf16 (eps 2^-7) would accept anything; 0.02 relative is five bf16 roundings (2^-8 each) of a
    # loss near log(vocab) = 3.7, and the float32 loss must lie that close.
    torch.testing.assert_close(loss, model(**inputs).loss, atol=0.05, rtol=0.02)
