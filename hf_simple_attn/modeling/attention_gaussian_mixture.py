"""Gaussian mixture cross attention fused with dot-product attention.

Zhang and Feng 2021, "Modeling Concentrated Cross-Attention for Neural Machine Translation with
Gaussian Mixture Model". Each head keeps its dot-product ("distributed") attention
α = softmax(QKᵀ/√d) and adds a "concentrated" attention β: for target position i, K Gaussians
over the source positions whose weights ω, means μ and widths σ are predicted from the head's
own query q = Q(s_i) by three feed-forward nets `V·tanh(W·q + b1) + b2` (Eq. 7-9) shared by
all heads of the layer, with hidden size d_q = head_dim (Eq. 7-9 give W ∈ R^{d_q×d_q}; with
d_q = 64 the four nets add ~17.5k parameters per layer, the paper's +0.1M over six layers):

    β[i, j] = Σ_k ω_k / Z_k · exp(-(j - μ_k)² / 2σ_k²)                              (Eq. 6)

The two are fused by a gate g = sigmoid(V_g·tanh(W_g·q + b_g1) + b_g2) (Eq. 14):
γ = (1 - g)·α + g·β (Eq. 13), and the output is γ·V (Eq. 15).

Source positions are 1-based, as in the paper (x = (x_1, ..., x_J), Eq. 2 and 6): key j of an
example sits at j = its rank among the example's real tokens (1..J), so a mean μ ∈ (0, J) lies
between just before the first token and the last token, and the approximate normalisation keeps
[μ - 3σ, μ + 3σ] inside [0, J]. J is the number of real source tokens of each example.

Conversion of the raw outputs (ω̂, μ̂, σ̂), option `normalization` (Table 1):
- `approximate` (the paper's method): Z = √(2π)σ, ω = softmax(ω̂), μ = J·sigmoid(μ̂),
  σ = min(J/6·sigmoid(σ̂), μ/3, (J - μ)/3) (Eq. 10-12). β is not renormalised.
- `strict` ("Our Method+Norm."): Z, ω and μ as above, σ = J·sigmoid(σ̂), then
  β[i, j] / Σ_l β[i, l] over the real source tokens.
- `none` (Graves' 2013 synthesis network): Z = 1, ω = exp(ω̂), σ = √(exp(-σ̂)/2) and means that
  move monotonically along the source, μ_i = μ_{i-1} + exp(μ̂_i) from μ_{-1} = 0 over the target
  positions; no normalisation.
Option `fusion`: `gate` (Eq. 13-14), `average` (γ = (α + β)/2) or `gmm_only` (γ = β), Table 4.

The reference path computes γ and γ·V as written above; it runs when the weights are requested, while exporting,
with attention dropout in training (dropout acts on γ) or with `fast_path` off. The fast path computes the same
output without γ: (1 - g)·αV + g·βV, αV by one SDPA call (α is never formed) and βV by one product. Its four nets
run as one: the first layers stacked, the second layers one block-diagonal weight, joined from the parameters in
the forward so that checkpoints keep the four nets (in inference, kept until a parameter changes). β comes from one
autograd function whose backward takes all its sums over the source in one product; `approximate` and `strict`
measure positions in units of √(2π)/3 tokens, where the width 3σ is Z itself, and put padded keys so far past the
source that β is exactly 0 there (`approximate` needs no mask).
"""

import math

import torch
from torch import nn

from .attention_heads import (
    MAX_COMPONENTS,
    MAX_SIZE,
    AttentionContext,
    AttentionHeads,
    GroupSpec,
    LayoutError,
    positive_int,
)
from .attention_ops import attention_dropout, dot_product_scores, is_exporting, python_constant
from .memo import is_compiling


NORMALIZATIONS = ("approximate", "strict", "none")
FUSIONS = ("gate", "average", "gmm_only")
DEFAULT_NUM_COMPONENTS = 4  # the paper's K (Figure 4: best BLEU at K = 4)

# Smallest σ used, in source positions. The approximate clamp gives σ → 0 when μ reaches a border
# (μ/3 or (J - μ)/3 → 0) and every variant can saturate its σ; at σ = 0 the density is 0/0. At
# σ = 0.01 a token one position from μ already gets exp(-5000) = 0, so a smaller σ would change
# nothing but the height of a spike on the single token at μ; the floor caps that height at
# 1/(√(2π)·0.01) ≈ 39.9 and keeps (j - μ)²/2σ² and all gradients finite.
SIGMA_FLOOR = 1e-2
# The synthesis network (`none`) exponentiates raw outputs (ω = exp(ω̂), μ steps exp(μ̂), σ from
# exp(-σ̂)); clamping ω̂, μ̂, σ̂ to ±10 keeps them within e^±10 ≈ 2.2e4 (already far beyond a
# sentence: a mean step of 22k source tokens per target token), so a saturated net cannot
# overflow to inf.
SYNTHESIS_EXPONENT_LIMIT = 10.0
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# The fast path measures source positions in units of √(2π)/3 tokens. There the smallest of the three bounds of
# Eq. 12 (μ, J - μ, J/2·sigmoid(σ̂), each 3σ at its bound) is 3σ·√(2π)/3 = Z, one width that both normalises
# (log Z) and scales the distance: -(j - μ)²/2σ² = -4.5·((j - μ)/3σ)², the same in any unit.
POSITION_SCALE = math.sqrt(2 * math.pi) / 3
# The fast path puts a padded key at position 100·(J + 1): at least 99·J + 100 tokens past any mean μ ∈ [0, J] of
# `approximate` or `strict`, whose σ is at most J, so that each component's exponent -(j - μ)²/2σ² there is at least
# ½·99² ≈ 4,900 below its value at the nearest real token: exp gives exactly 0 (and 0 gradients), also relative to
# the largest term under the normalisation of `strict`, without a mask and without overflow.
PADDING_DISTANCE = 100


class GaussianMixtureSpec(GroupSpec):
    """A `gaussian_mixture` group as `config.json` stores it."""

    num_components: int
    hidden_size: int | None  # None: head_dim
    normalization: str
    fusion: str


def mixture_log_density(
    log_weight: torch.Tensor,
    log_normalizer: torch.Tensor,
    mean: torch.Tensor,
    sigma: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """log β = log Σ_k ω_k/Z_k · exp(-(j - μ_k)²/2σ_k²), computed as a logsumexp (no underflow to log 0).

    log_weight, log_normalizer, mean, sigma: (..., q_len, K); positions: (batch, k_len), broadcast
    against the leading dims as (batch, 1, 1, k_len). Returns (..., q_len, k_len).
    """
    positions = positions[:, None, None, :, None]  # (batch, 1, 1, k_len, 1)
    log_scale = (log_weight - log_normalizer)[..., None, :]  # (..., q_len, 1, K)
    squared_distance = (positions - mean[..., None, :]) ** 2  # (batch, heads, q_len, k_len, K)
    log_components = log_scale - squared_distance / (2 * sigma[..., None, :] ** 2)
    return torch.logsumexp(log_components, dim=-1)


class GaussianMixtureDensity(torch.autograd.Function):
    """The fast path's β: β[j] = Σ_k ω_k/Z_k·exp(-4.5·((x_j - m_k)/w_k)²) over positions x for every query, where
    the width w is 3σ in the positions' unit (the exponent is -(j - μ)²/2σ²) and Z = w (`divide_by_width`) or 1;
    with `normalize`, the terms divided by their sum over (j, k): β / Σ_j β.

    log_weight (log ω), mean m, width w: (..., K); positions x: (batch, 1, 1, k_len, 1), broadcast against the
    leading dims. Returns (..., k_len). The backward takes the three sums over j that the gradient needs (of the
    terms times 1, x and x²) in one batched product: seven operators, where autograd's backward of the same forward
    takes eighteen.
    """

    @staticmethod
    def forward(ctx, log_weight, mean, width, positions, divide_by_width: bool, normalize: bool):
        log_scale = log_weight - torch.log(width) if divide_by_width else log_weight  # log ω/Z
        distance = (positions - mean[..., None, :]) / width[..., None, :]  # (..., k_len, K)
        exponents = torch.addcmul(log_scale[..., None, :], distance, distance, value=-4.5)
        if normalize:
            terms = torch.softmax(exponents.flatten(-2), dim=-1).view_as(exponents)
        else:
            terms = exponents.exp()
        beta = terms.sum(-1)
        ctx.divide_by_width, ctx.normalize = divide_by_width, normalize
        ctx.save_for_backward(terms, distance, width, beta)
        return beta

    @staticmethod
    def backward(ctx, grad_beta):
        terms, distance, width, beta = ctx.saved_tensors
        if ctx.normalize:  # through the division by Σ_j β: grad_j - Σ_l grad_l·β_l
            grad_beta = grad_beta - torch.matmul(grad_beta[..., None, :], beta[..., :, None])[..., 0]
        # Σ_j grad_j·terms_jk·(1, x_jk, x_jk²) for x = (positions - m)/w: (..., 3, K)
        weighted = terms * distance
        moments = torch.cat([terms, weighted, weighted * distance], dim=-1)  # (..., k_len, 3K)
        sums = torch.matmul(grad_beta[..., None, :], moments)[..., 0, :].unflatten(-1, (3, terms.shape[-1]))
        # ∂exponent/∂log ω = 1, ∂exponent/∂m = 9x/w, ∂exponent/∂w = 9x²/w - 1/w (the last term from log Z = log w)
        scaled = sums[..., 1:, :] * 9
        if ctx.divide_by_width:
            scaled[..., 1, :].sub_(sums[..., 0, :])
        grad_mean, grad_width = (scaled / width[..., None, :]).unbind(-2)
        return sums[..., 0, :], grad_mean, grad_width, None, None, None


class GateFusion(torch.autograd.Function):
    """(1 - g)·a + g·b by `torch.lerp(a, b, g)`, with a backward of five operators (lerp's own takes eight).

    start a, end b: (..., d); weight g: (..., 1).
    """

    @staticmethod
    def forward(ctx, start, end, weight):
        ctx.save_for_backward(start, end, weight)
        return torch.lerp(start, end, weight)

    @staticmethod
    def backward(ctx, grad_output):
        start, end, weight = ctx.saved_tensors
        grad_end = grad_output * weight
        grad_weight = (grad_output * (end - start)).sum(-1, keepdim=True)
        return grad_output - grad_end, grad_end, grad_weight


class ParameterNetwork(nn.Module):
    """`V·tanh(W·q + b1) + b2` over one head's query (Eq. 7-9 and 14); shared by the heads of a layer."""

    def __init__(self, query_dim: int, hidden_size: int, output_size: int):
        super().__init__()
        self.hidden = nn.Linear(query_dim, hidden_size)  # W, b1
        self.output = nn.Linear(hidden_size, output_size)  # V, b2

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        return self.output(torch.tanh(self.hidden(query)))


class GaussianMixtureHeads(AttentionHeads):
    """Cross-attention heads whose weights fuse dot-product attention with a Gaussian mixture over source positions.

    Options: `num_components` (K, default 4), `hidden_size` (of the four nets; null = head_dim,
    the paper's), `normalization` (`approximate` | `strict` | `none`), `fusion` (`gate` |
    `average` | `gmm_only`). Uses the sublayer's query/key projections (one slot per head); with
    `gmm_only` the queries only (the nets read them; no dot product), so the sublayer builds no key projection.
    """

    kind = "gaussian_mixture"
    summary = "dot-product attention gated with a K-component Gaussian mixture over source positions"
    paper = (
        "Zhang and Feng 2021, Modeling Concentrated Cross-Attention for Neural Machine Translation with Gaussian "
        "Mixture Model"
    )
    citation = """@inproceedings{zhang-feng-2021-modeling-concentrated,
  title = {Modeling Concentrated Cross-Attention for Neural Machine Translation with {G}aussian Mixture Model},
  author = {Zhang, Shaolei and Feng, Yang},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2021},
  year = {2021}
}"""

    sites = ("cross",)
    uses_query_key = True
    option_names = ("num_components", "hidden_size", "normalization", "fusion")

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> GaussianMixtureSpec:
        spec = super().normalize_spec(spec, site, field)
        num_components = positive_int(
            spec.get("num_components", DEFAULT_NUM_COMPONENTS), f"{field}.num_components", MAX_COMPONENTS
        )
        hidden_size = spec.get("hidden_size")  # null: the head dimension, as in the paper
        if hidden_size is not None:
            positive_int(hidden_size, f"{field}.hidden_size", MAX_SIZE)
        normalization = spec.get("normalization", "approximate")
        if normalization not in NORMALIZATIONS:
            raise LayoutError(f"{field}.normalization: expected one of {list(NORMALIZATIONS)}, got {normalization!r}")
        fusion = spec.get("fusion", "gate")
        if fusion not in FUSIONS:
            raise LayoutError(f"{field}.fusion: expected one of {list(FUSIONS)}, got {fusion!r}")
        return {
            "kind": spec["kind"],
            "num_heads": spec["num_heads"],
            "num_components": num_components,
            "hidden_size": hidden_size,
            "normalization": normalization,
            "fusion": fusion,
        }

    @classmethod
    def scores_keys(cls, spec: GaussianMixtureSpec) -> bool:
        return spec["fusion"] != "gmm_only"

    @classmethod
    def independent_queries(cls, spec: GaussianMixtureSpec) -> bool:
        # The synthesis network's means are running sums over the queries, kept from step to step.
        return spec["normalization"] != "none"

    def __init__(self, spec: GaussianMixtureSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        hidden_size = spec["hidden_size"] or head_dim
        num_components = spec["num_components"]
        self.omega_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # ω̂, Eq. 7
        self.mu_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # μ̂, Eq. 8
        self.sigma_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # σ̂, Eq. 9
        self.gate_ffn = ParameterNetwork(head_dim, hidden_size, 1) if spec["fusion"] == "gate" else None  # Eq. 14
        # The fast path's second layers: which net each block of outputs comes from (μ̂ twice with `approximate`:
        # one copy gives μ, the other J - μ), and as (outputs, nets, 1) which net's hidden units each output reads.
        num_networks = 3 if self.gate_ffn is None else 4
        self.output_networks = [0, 1, 1, 2] if spec["normalization"] == "approximate" else [0, 1, 2]
        output_rows = [net for net in self.output_networks for _ in range(num_components)]
        if self.gate_ffn is not None:
            self.output_networks.append(3)
            output_rows.append(3)
        self.output_block = [[[float(net == row)] for net in range(num_networks)] for row in output_rows]
        self.network_weights_memo = None  # (parameters, their versions, weights) of `network_weights`

    @classmethod
    def rolls_back(cls, spec: GroupSpec) -> str | None:
        if spec["normalization"] == "none":
            return (
                "the synthesis network (normalization 'none') keeps only the running sum of its means, not per token"
            )
        return None

    def mixture_parameters(
        self, query: torch.Tensor, source_length: torch.Tensor, context: AttentionContext
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log ω, log Z, μ, σ), each (batch, heads, q_len, K), from the queries (batch, heads, q_len, head_dim).

        source_length: (batch,) float, J per example.
        """
        omega_hat = self.omega_ffn(query).to(source_length.dtype)
        mu_hat = self.mu_ffn(query).to(source_length.dtype)
        sigma_hat = self.sigma_ffn(query).to(source_length.dtype)
        if self.spec["normalization"] == "none":
            limit = SYNTHESIS_EXPONENT_LIMIT
            log_weight = omega_hat.clamp(-limit, limit)  # log ω = ω̂
            mean = self.synthesis_means(mu_hat.clamp(-limit, limit).exp(), context)
            sigma = torch.exp(-sigma_hat.clamp(-limit, limit) / 2) / math.sqrt(2)  # √(exp(-σ̂)/2)
            sigma = sigma.clamp_min(SIGMA_FLOOR)
            return log_weight, torch.zeros_like(sigma), mean, sigma  # Z = 1
        source_length = source_length[:, None, None, None]  # (batch, 1, 1, 1)
        log_weight = torch.log_softmax(omega_hat, dim=-1)  # Eq. 10
        mean = source_length * torch.sigmoid(mu_hat)  # Eq. 11
        if self.spec["normalization"] == "approximate":
            sigma = torch.minimum(
                source_length / 6 * torch.sigmoid(sigma_hat), torch.minimum(mean / 3, (source_length - mean) / 3)
            )  # Eq. 12
        else:
            sigma = source_length * torch.sigmoid(sigma_hat)  # Table 1, "Our Method+Norm."
        sigma = sigma.clamp_min(SIGMA_FLOOR)
        return log_weight, LOG_SQRT_2PI + torch.log(sigma), mean, sigma  # Z = √(2πσ²)

    def synthesis_means(self, mean_steps: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """μ_i = μ_{i-1} + exp(μ̂_i), μ_{-1} = 0: running sums over the target positions (dim 2).

        While decoding with a cache, μ of the last decoded position is kept in the decoding state: written in place
        with a static cache (positions held on the device), so that its buffer keeps its identity from step to step.
        """
        means = mean_steps.cumsum(dim=2)  # (batch, heads, q_len, K)
        state = context.decoding_state
        if state is not None and self.state_name in state:
            means = means + state[self.state_name][:, :, None, :]
        elif not is_exporting() and context.query_start not in (0, None):
            raise RuntimeError(
                "gaussian_mixture with normalization 'none' (the synthesis network) accumulates its means over the "
                "target positions; decoding from a later position needs the cache that holds the running sum: pass "
                "on the `EncoderDecoderCache` the model returned as `outputs.cache`"
            )
        if state is not None and context.query_start is None and self.state_name in state:
            state[self.state_name].copy_(means[:, :, -1, :])
        elif state is not None:
            state[self.state_name] = means[:, :, -1, :]
        return means

    def mixture_weights(self, query: torch.Tensor, real_keys: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """β (batch, heads, q_len, k_len) from the queries; zero at padded keys. real_keys: (batch, k_len) bool."""
        compute_dtype = torch.promote_types(query.dtype, torch.float32)
        positions = real_keys.cumsum(dim=-1).to(compute_dtype)  # 1-based rank among the real tokens
        source_length = real_keys.sum(dim=-1).to(compute_dtype)  # J
        log_weight, log_normalizer, mean, sigma = self.mixture_parameters(query, source_length, context)
        log_beta = mixture_log_density(log_weight, log_normalizer, mean, sigma, positions)
        real = real_keys[:, None, None, :]
        if self.spec["normalization"] == "strict":
            return torch.softmax(log_beta.masked_fill(~real, torch.finfo(compute_dtype).min), dim=-1) * real
        return log_beta.exp() * real

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, heads, q_len, d); key (None with `gmm_only`), value: (batch, heads, k_len, d)
        dropout = self.config.attention_dropout if self.training else 0.0
        if self.fast_path and not output_attentions and not is_exporting() and dropout == 0.0:
            return self.fast_forward(query, key, value, context), None
        batch_size, key_length = value.shape[0], value.shape[-2]
        real_keys = context.key_padding_mask
        if real_keys is None:
            real_keys = torch.ones(batch_size, key_length, dtype=torch.bool, device=value.device)
        beta = self.mixture_weights(query, real_keys, context)
        fusion = self.spec["fusion"]
        if fusion == "gmm_only":
            weights = beta
        else:
            scores = dot_product_scores(query.to(beta.dtype), key.to(beta.dtype), context)
            alpha = torch.softmax(scores, dim=-1)
            if fusion == "average":
                weights = (alpha + beta) / 2
            else:
                gate = torch.sigmoid(self.gate_ffn(query).to(beta.dtype))  # (batch, heads, q_len, 1)
                weights = (1 - gate) * alpha + gate * beta
        weights = attention_dropout(weights.to(value.dtype), dropout, self.training)
        output = torch.matmul(weights, value)
        return output, (weights if output_attentions else None)

    # --- the fast path ----------------------------------------------------------------------------------------------

    def fast_forward(
        self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor, context: AttentionContext
    ) -> torch.Tensor:
        """γV = (1 - g)·αV + g·βV without the weights, (batch, heads, q_len, d): αV by one SDPA call, βV by one
        product."""
        normalization = self.spec["normalization"]
        compute_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
        raw = self.network_outputs(query, compute_dtype)  # (batch, q_len, heads, outputs)
        # `none` has Z = 1 and measures in tokens; the others in POSITION_SCALE, where the width is Z
        unit = 1.0 if normalization == "none" else POSITION_SCALE
        positions, source_length = self.key_positions(context, value, compute_dtype, unit)
        log_weight, mean, width, gate = self.fast_mixture_parameters(raw, source_length, context)
        beta = GaussianMixtureDensity.apply(
            log_weight, mean, width, positions, normalization != "none", normalization == "strict"
        )
        if normalization != "approximate" and context.key_padding_mask is not None:
            # No bound on the means of `none`, and `strict` has no real key to share out when J = 0
            beta = beta * context.key_padding_mask[:, None, None, :]
        mixture_output = torch.matmul(beta.to(value.dtype), value)
        if self.spec["fusion"] == "gmm_only":
            return mixture_output
        attention_mask = None if context.sees_every_key() else context.attention_bias(key.shape[-2], query.dtype)
        dot_output = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        if gate is None:  # `average`
            return torch.lerp(dot_output, mixture_output, 0.5)
        return GateFusion.apply(dot_output, mixture_output, gate.to(value.dtype))  # Eq. 13 applied to V

    def fast_mixture_parameters(
        self, raw: torch.Tensor, source_length: torch.Tensor, context: AttentionContext
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(log ω, μ, width, g) from the nets' raw outputs (batch, q_len, heads, outputs), as `mixture_parameters`
        computes them, each (batch, heads, q_len, K), g (..., 1) or None. The width is 3σ in the positions' unit:
        Z = √(2π)σ in POSITION_SCALE, 3σ in tokens for `none`.

        `strict` gives ω̂ for log ω: they differ by log Σ exp(ω̂), a constant per query that β / Σ_j β removes.
        Computed in the nets' (batch, q_len, heads) order, so that the gradient of `raw` comes out in it.
        """
        num_components = self.spec["num_components"]
        normalization = self.spec["normalization"]
        gate = None
        if normalization == "none":
            if self.gate_ffn is not None:
                raw, gate = raw.split([3 * num_components, 1], dim=-1)
                gate = torch.sigmoid(gate)
            limit = SYNTHESIS_EXPONENT_LIMIT
            log_weight, mean_and_width = nn.functional.hardtanh(raw, -limit, limit).split(
                [num_components, 2 * num_components], dim=-1
            )  # log ω = ω̂
            # exp(μ̂), the step of the mean, and 3σ = 3/√2·exp(-σ̂/2) for σ = √(exp(-σ̂)/2)
            exponents = torch.addcmul(
                python_constant([[0.0], [math.log(3 / math.sqrt(2))]], raw.device, raw.dtype),
                mean_and_width.unflatten(-1, (2, num_components)),
                python_constant([[1.0], [-0.5]], raw.device, raw.dtype),
            )
            steps, width = exponents.exp().unbind(-2)
            mean = self.synthesis_means(steps.transpose(1, 2), context).transpose(1, 2)
            width = self.width_floor(width, 1.0)
        else:
            omega_hat, rest = raw.split([num_components, raw.shape[-1] - num_components], dim=-1)
            squashed = torch.sigmoid(rest)  # sigmoid of μ̂ (twice with `approximate`), σ̂[, ĝ]
            if self.gate_ffn is not None:
                squashed, gate = squashed.split([squashed.shape[-1] - 1, 1], dim=-1)
            if normalization == "approximate":
                # Eq. 12 as 3σ = min(μ, J - μ, J/2·sigmoid(σ̂)): the three bounds in one (..., 3, K) tensor
                bounds = torch.addcmul(
                    self.length_scale(context, source_length, (0.0, 1.0, 0.0)),
                    squashed.unflatten(-1, (3, num_components)),
                    self.length_scale(context, source_length, (1.0, -1.0, 0.5)),
                )
                log_weight, mean = torch.log_softmax(omega_hat, dim=-1), bounds[..., 0, :]
                width = self.width_floor(bounds.min(dim=-2).values, POSITION_SCALE)
            else:
                # μ and 3σ, σ = J·sigmoid(σ̂)
                scale = self.length_scale(context, source_length, (1.0, 3.0))
                mean, width = (squashed.unflatten(-1, (2, num_components)) * scale).unbind(-2)
                log_weight, width = omega_hat, self.width_floor(width, POSITION_SCALE)
        if gate is not None:
            gate = gate.transpose(1, 2)
        return log_weight.transpose(1, 2), mean.transpose(1, 2), width.transpose(1, 2), gate

    @staticmethod
    def width_floor(width: torch.Tensor, unit: float) -> torch.Tensor:
        """max(width, 3·SIGMA_FLOOR) for widths 3σ in `unit`s of a token (`threshold`: one operator backward)."""
        floor = 3 * SIGMA_FLOOR * unit
        return nn.functional.threshold(width, floor, floor)

    def network_outputs(self, query: torch.Tensor, compute_dtype: torch.dtype) -> torch.Tensor:
        """The raw outputs of all the nets at once, (batch, q_len, heads, outputs) in `compute_dtype`: ω̂ (K), μ̂ (K,
        twice with `approximate`), σ̂ (K)[, ĝ (1)]."""
        rows = query.transpose(1, 2)  # (batch, q_len, heads, d): the projection's own layout
        networks = self.networks()
        if not all(type(layer) is nn.Linear for net in networks for layer in (net.hidden, net.output)):
            # Layers with weights of their own kind (int8 quantized ones): each net runs as its module.
            return torch.cat([networks[index](rows) for index in self.output_networks], dim=-1).to(compute_dtype)
        hidden_weight, hidden_bias, output_weight, output_bias = self.network_weights(networks, query.dtype)
        hidden = torch.tanh(nn.functional.linear(rows, hidden_weight, hidden_bias))
        return nn.functional.linear(hidden, output_weight, output_bias).to(compute_dtype)

    def networks(self) -> list[ParameterNetwork]:
        """ω, μ, σ[, g]: the order of the joined nets' hidden units."""
        networks = [self.omega_ffn, self.mu_ffn, self.sigma_ffn]
        return networks if self.gate_ffn is None else [*networks, self.gate_ffn]

    def network_weights(
        self, networks: list[ParameterNetwork], dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The nets as one, in `dtype`: the first layers stacked, (nets·hidden, d) and bias, and the second layers as
        one block-diagonal weight (outputs, nets·hidden), each output reading its own net's hidden units, and bias.

        The parameters are concatenated here (in one operator), so that checkpoints keep the four nets. Made in the
        graph when gradients are needed or while compiling; otherwise kept until a parameter changes (in place, a new
        tensor, device or dtype; edits through `.data` bypass the version counter), so that decoding steps reuse it.
        """
        output_networks = [networks[index] for index in self.output_networks]
        parameters = [net.hidden.weight for net in networks] + [net.hidden.bias for net in networks]
        parameters += [net.output.weight for net in output_networks] + [net.output.bias for net in output_networks]
        if is_compiling() or (torch.is_grad_enabled() and any(p.requires_grad for p in parameters)):
            return self.build_network_weights(parameters, dtype)
        versions = tuple(
            (None if p.is_inference() else p._version, p.data_ptr(), p.device, p.dtype) for p in parameters
        ) + (dtype, torch.is_inference_mode_enabled())
        memo = self.network_weights_memo
        if memo is None or memo[1] != versions or any(kept is not p for kept, p in zip(memo[0], parameters)):
            # The parameters themselves are kept, so that their identities cannot pass to new tensors.
            self.network_weights_memo = memo = (parameters, versions, self.build_network_weights(parameters, dtype))
        return memo[2]

    def build_network_weights(
        self, parameters: list[torch.Tensor], dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`network_weights` from its list of parameters (first-layer weights and biases, then second-layer ones)."""
        hidden_size, query_dim = self.omega_ffn.hidden.weight.shape
        num_networks, outputs = len(self.output_block[0]), len(self.output_block)
        hidden_width = num_networks * hidden_size
        flat = torch.cat([parameter.reshape(-1) for parameter in parameters]).to(dtype)
        hidden_weight, hidden_bias, output_weight, output_bias = flat.split(
            [hidden_width * query_dim, hidden_width, outputs * hidden_size, outputs]
        )
        block = python_constant(self.output_block, flat.device, dtype)  # (outputs, nets, 1)
        output_weight = (output_weight.view(outputs, 1, hidden_size) * block).view(outputs, hidden_width)
        return hidden_weight.view(hidden_width, query_dim), hidden_bias, output_weight, output_bias

    def key_positions(
        self, context: AttentionContext, value: torch.Tensor, dtype: torch.dtype, unit: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Source positions (batch, 1, 1, k_len, 1) in `unit`s of a token, padded keys at 100·(J + 1) tokens, and J
        (batch, 1, 1, 1, 1) in tokens, made once a forward for all layers."""
        batch_size, key_length = value.shape[0], value.shape[-2]

        def build():
            real_keys = context.key_padding_mask
            if real_keys is None:
                ranks = torch.arange(1, key_length + 1, device=value.device, dtype=dtype).expand(batch_size, -1)
                source_length = ranks[:, -1:]
            else:
                ranks = real_keys.cumsum(dim=-1).to(dtype)  # 1-based rank among the real tokens
                source_length = ranks[:, -1:]
                ranks = torch.where(real_keys, ranks, (source_length + 1) * PADDING_DISTANCE)
            return ranks[:, None, None, :, None] * unit, source_length[:, None, None, :, None]

        return context.shared(("gaussian_mixture_positions", key_length, dtype, unit), build)

    def length_scale(self, context: AttentionContext, source_length: torch.Tensor, factors: tuple) -> torch.Tensor:
        """POSITION_SCALE·J·factors, (batch, 1, 1, len(factors), 1), made once a forward for all layers."""
        return context.shared(
            ("gaussian_mixture_scale", factors, source_length.dtype),
            lambda: (
                source_length
                * python_constant(
                    [[factor * POSITION_SCALE] for factor in factors], source_length.device, source_length.dtype
                )
            ),
        )
