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
"""

import math

import torch
from torch import nn

from .attention_ops import attention_dropout, dot_product_scores, is_exporting
from .attention_registry import (
    MAX_COMPONENTS,
    MAX_SIZE,
    AttentionContext,
    AttentionHeads,
    GroupSpec,
    LayoutError,
    positive_int,
    register_attention,
)


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


class ParameterNetwork(nn.Module):
    """`V·tanh(W·q + b1) + b2` over one head's query (Eq. 7-9 and 14); shared by the heads of a layer."""

    def __init__(self, query_dim: int, hidden_size: int, output_size: int):
        super().__init__()
        self.hidden = nn.Linear(query_dim, hidden_size)  # W, b1
        self.output = nn.Linear(hidden_size, output_size)  # V, b2

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        return self.output(torch.tanh(self.hidden(query)))


@register_attention("gaussian_mixture")
class GaussianMixtureHeads(AttentionHeads):
    """Cross-attention heads whose weights fuse dot-product attention with a Gaussian mixture over source positions.

    Options: `num_components` (K, default 4), `hidden_size` (of the four nets; null = head_dim,
    the paper's), `normalization` (`approximate` | `strict` | `none`), `fusion` (`gate` |
    `average` | `gmm_only`). Uses the sublayer's query/key projections (one slot per head); with
    `gmm_only` the keys are unused.
    """

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

    def __init__(self, spec: GaussianMixtureSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        hidden_size = spec["hidden_size"] or head_dim
        num_components = spec["num_components"]
        self.omega_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # ω̂, Eq. 7
        self.mu_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # μ̂, Eq. 8
        self.sigma_ffn = ParameterNetwork(head_dim, hidden_size, num_components)  # σ̂, Eq. 9
        self.gate_ffn = ParameterNetwork(head_dim, hidden_size, 1) if spec["fusion"] == "gate" else None  # Eq. 14

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

        While decoding with a cache, μ of the last decoded position is kept in the decoding state.
        """
        means = mean_steps.cumsum(dim=2)  # (batch, heads, q_len, K)
        state = context.decoding_state
        if state is not None and self.state_name in state:
            means = means + state[self.state_name][:, :, None, :]
        elif not is_exporting() and context.query_start != 0:
            raise RuntimeError(
                "gaussian_mixture with normalization 'none' (the synthesis network) accumulates its means over the "
                "target positions; decoding from a later position needs the cache that holds the running sum: pass "
                "on the `EncoderDecoderCache` the model returned as `outputs.cache`"
            )
        if state is not None:
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
        key: torch.Tensor,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # query: (batch, heads, q_len, d); key, value: (batch, heads, k_len, d)
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
        weights = attention_dropout(weights.to(value.dtype), self.config.attention_dropout, self.training)
        output = torch.matmul(weights, value)
        return output, (weights if output_attentions else None)
