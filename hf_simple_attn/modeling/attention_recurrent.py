"""Learned, input-agnostic self-attention: Recurrent Attention (RAN) and the Random Synthesizer.

RAN (Zeng et al. 2021, "Recurrent Attention for Neural Machine Translation") replaces the
query-key scores of self-attention by learned logits that depend only on positions. A stack
(encoder or decoder) owns initial logits A0 of shape (heads, M, M), M = `max_positions`, and one
transition module shared by all heads and all layers of that stack. The k-th RAN layer of the
stack (k = 1, 2, ...) attends with softmax(A_k[:, :n, :n]) over its values, where

    tanh_ln (the paper, Eq. 3-4):   Â_k = LayerNorm(tanh(W·A_{k-1} + b)),   A_k = Â_k + A_{k-1}
    ffn (the public code):          A_k = A_{k-1} + W2·relu(W1·A_{k-1} + b1) + b2    (M → 1024 → M)

W acts on the key dimension: every query row of every head goes through the same M × M linear
map (as `nn.Linear(M, M)` on the last axis, the public code's convention). The first RAN layer
already uses A_1 = Rec(A0) (the paper's Figure 2 and the public code); a stack whose layers do
not all use RAN counts only its RAN layers. `layer_norm_residual: false` is the paper's
"w/o LN&RES" ablation, A_k = tanh(W·A_{k-1} + b); `freeze_initial` keeps A0 at its random
initialisation (the paper's "fixed" ablation).

The Random Synthesizer (Tay et al. 2020, "Synthesizer: Rethinking Self-Attention in Transformer
Models"), the RAN paper's Syn-R baseline, gives every layer its own learned logits (heads, M, M)
and no transition.

Both families take the softmax over the allowed keys only (the causal mask in the decoder,
padded keys removed), so a padded batch equals each example alone; a cached decoding step at
position t uses row t. Values and the output are projected as usual; there is no query or key
projection. Inputs longer than `max_positions` raise a `ValueError`.
"""

import torch
from torch import nn
from transformers import initialization as init

from .attention_ops import TensorMemo, apply_table, attention_dropout, is_compiling
from .attention_registry import (
    MAX_SIZE,
    AttentionContext,
    AttentionHeads,
    AttentionStackState,
    GroupSpec,
    LayerSpec,
    LayoutError,
    is_number,
    positive_int,
    register_attention,
    true_or_false,
)


SELF_ATTENTION_SITES = ("encoder_self", "decoder_self")
TRANSITIONS = ("tanh_ln", "ffn")
DEFAULT_MAX_POSITIONS = 256
DEFAULT_TRANSITION_FFN_DIM = 1024
# The options every RAN layer of one stack must agree on: they describe the stack's single A0
# (its heads and size) and its single transition.
STACK_OPTIONS = (
    "num_heads",
    "max_positions",
    "transition",
    "transition_ffn_dim",
    "layer_norm_residual",
    "freeze_initial",
)


class PositionLogitsSpec(GroupSpec):
    """A `random_synthesizer` group as `config.json` stores it; the options both families have."""

    max_positions: int
    attention_dropout: float | None  # None: config.attention_dropout


class RecurrentSpec(PositionLogitsSpec):
    """A `recurrent` group as `config.json` stores it."""

    transition: str
    transition_ffn_dim: int | None  # the `ffn` transition's hidden size
    layer_norm_residual: bool
    freeze_initial: bool


def normalize_max_positions(spec: dict, field: str) -> int:
    return positive_int(spec.get("max_positions", DEFAULT_MAX_POSITIONS), f"{field}.max_positions", MAX_SIZE)


def normalize_attention_dropout(spec: dict, field: str, default: float | None) -> float | None:
    dropout = spec.get("attention_dropout", default)
    if dropout is None:
        return None
    if not is_number(dropout) or not 0 <= dropout < 1:
        raise LayoutError(
            f"{field}.attention_dropout: expected a probability in [0, 1) or null (use config.attention_dropout), "
            f"got {dropout!r}"
        )
    return float(dropout)


def check_sequence_length(length: int, max_positions: int, kind: str, site: str) -> None:
    """A clear error instead of an index error when a sequence outgrows the learned logits."""
    if length > max_positions:
        raise ValueError(
            f"{kind} attention at {site}: the sequence has {length} positions but its learned attention logits "
            f"cover only max_positions={max_positions}; use a larger 'max_positions' in the attention layout "
            f"or shorter inputs (and fewer generated tokens)"
        )


def position_weights(logits: torch.Tensor, context: AttentionContext, key_length: int, dtype) -> torch.Tensor:
    """softmax of the logits over the allowed keys: (batch or 1, heads, q_len, k_len).

    logits: (heads, M, M), row i = query position i. In self attention every query position is
    below k_len, so the query rows and the first k_len columns cover everything (a cached step at
    position t reads row t).
    """
    start = context.query_start
    scores = logits[None, :, start : start + context.query_length, :key_length].to(dtype)  # (1, heads, q, k)
    if not context.sees_every_key():
        scores = scores + context.attention_bias(key_length, dtype)  # (batch or 1, heads, q, k)
    return torch.softmax(scores, dim=-1)


def attend_with_position_logits(
    logits: torch.Tensor,
    value: torch.Tensor,
    context: AttentionContext,
    dropout: float,
    training: bool,
    output_attentions: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax of the logits (heads, M, M) over the allowed keys, times the values (batch, heads, k_len, head_dim)."""
    batch_size = value.shape[0]
    weights = position_weights(logits, context, value.shape[-2], value.dtype)
    if training and dropout > 0:
        # One dropout mask per example, not one shared by the batch.
        weights = attention_dropout(weights.expand(batch_size, -1, -1, -1), dropout, training)
    output = torch.matmul(weights, value)
    if not output_attentions:
        return output, None
    return output, weights.expand(batch_size, -1, -1, -1)


class TanhLayerNormTransition(nn.Module):
    """The paper's transition (Eq. 3-4): A' = LayerNorm(tanh(W·A + b)) + A, or tanh(W·A + b) alone."""

    def __init__(self, max_positions: int, layer_norm_residual: bool):
        super().__init__()
        self.linear = nn.Linear(max_positions, max_positions)
        self.layer_norm = nn.LayerNorm(max_positions) if layer_norm_residual else None

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (heads, M, M) → (heads, M, M); the map acts on the last (key) axis."""
        updated = torch.tanh(self.linear(logits))
        if self.layer_norm is None:
            return updated
        return self.layer_norm(updated) + logits


class FeedForwardTransition(nn.Module):
    """The public code's transition: a residual position-wise FFN, A' = A + W2·relu(W1·A + b1) + b2."""

    def __init__(self, max_positions: int, hidden_size: int):
        super().__init__()
        self.fc1 = nn.Linear(max_positions, hidden_size)
        self.fc2 = nn.Linear(hidden_size, max_positions)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (heads, M, M) → (heads, M, M); the map acts on the last (key) axis."""
        return logits + self.fc2(torch.relu(self.fc1(logits)))


class RecurrentAttentionState(AttentionStackState):
    """A0 and the transition of one stack; gives the k-th RAN layer its logits A_k.

    When no gradient is needed (inference, `generate`), all layers' logits are computed once and
    reused by every layer, length and decoding step, until a parameter changes (tracked by the
    tensors' version counters, device and dtype) or `train()`/`eval()` is called. Edits through
    `.data` bypass the version counters: call `model.eval()` after them.

    When gradients are needed (or while compiling or exporting), the chain A0 → A_L of the stack's L RAN layers runs
    once per forward of the stack, in the graph, shared by its layers until `end_forward` (L transitions,
    not L(L+1)/2). Under gradient checkpointing, and outside a stack's forward, each layer runs the chain
    A0 → A_k itself (k transitions for the k-th layer): a checkpointed layer must recompute in backward
    what it computed in forward, which a chain computed once for all layers would break.
    """

    def __init__(self, spec: RecurrentSpec, num_layers: int):
        super().__init__()
        self.num_layers = num_layers
        num_heads, max_positions = spec["num_heads"], spec["max_positions"]
        initial_logits = torch.zeros(num_heads, max_positions, max_positions)
        if spec["freeze_initial"]:
            # The paper's "fixed" ablation: A0 stays at its random initialisation. A buffer is saved
            # and loaded like a parameter but never trained (loading may not keep requires_grad=False).
            self.register_buffer("initial_logits", initial_logits)
        else:
            self.initial_logits = nn.Parameter(initial_logits)
        if spec["transition"] == "tanh_ln":
            self.transition = TanhLayerNormTransition(max_positions, spec["layer_norm_residual"])
        else:
            self.transition = FeedForwardTransition(max_positions, spec["transition_ffn_dim"])
        self._cache_key = None
        self._cached_logits = None
        self._share_chain = False
        self._forward_logits = None  # [A_1, ..., A_L] of the current forward, in the graph

    def init_attention_weights(self) -> None:
        # As the public code: Xavier-uniform over (heads, M, M).
        init.xavier_uniform_(self.initial_logits)

    def train(self, mode: bool = True):
        self.clear_cache()
        return super().train(mode)

    def begin_forward(self, checkpointing: bool) -> None:
        self._share_chain = not checkpointing
        self._forward_logits = None

    def end_forward(self) -> None:
        self._share_chain = False
        self._forward_logits = None

    def clear_cache(self) -> None:
        self._cache_key = None
        self._cached_logits = None

    def cache_key(self) -> tuple:
        # Logits computed under inference_mode are inference tensors, unusable elsewhere: key on the mode too.
        tensors = [*self.parameters(), *self.buffers()]
        versions = tuple((id(t), t._version, t.device, t.dtype) for t in tensors)
        return versions + (torch.is_inference_mode_enabled(),)

    def chain(self, steps: int) -> list[torch.Tensor]:
        """[A_1, ..., A_steps], each (heads, M, M)."""
        logits, per_layer = self.initial_logits, []
        for _ in range(steps):
            logits = self.transition(logits)
            per_layer.append(logits)
        return per_layer

    def layer_logits(self, layer: int) -> torch.Tensor:
        """Logits (heads, M, M) of the stack's RAN layer `layer` (0-based), i.e. A_{layer + 1}; computed in the
        graph while compiling or exporting (they depend on parameters only, so a runtime can fold them into
        constants)."""
        needs_graph = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        if needs_graph or is_compiling():
            if not self._share_chain:
                return self.chain(layer + 1)[-1]
            if self._forward_logits is None:
                self._forward_logits = self.chain(self.num_layers)
            return self._forward_logits[layer]
        key = self.cache_key()
        if self._cache_key != key:
            self._cached_logits = self.chain(self.num_layers)
            self._cache_key = key
        return self._cached_logits[layer]


class PositionWeightsMemo:
    """`position_weights` (1, heads, q_len, k_len) per (query block, key length, dtype), valid for one
    logits tensor at one version; bounded in bytes (least recently used dropped first)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.logits = None  # kept alive, so that its identity cannot pass to a new tensor
        self.version = None
        self.weights = TensorMemo()

    def get(self, logits: torch.Tensor, context: AttentionContext, key_length: int, dtype) -> torch.Tensor:
        # Inference tensors (RAN logits cached in inference mode) have no version counter; RAN makes
        # new logits whenever its parameters change.
        in_place_updates = None if logits.is_inference() else logits._version
        version = (in_place_updates, logits.device, logits.dtype, torch.is_inference_mode_enabled())
        if self.logits is not logits or self.version != version:
            self.logits, self.version, self.weights = logits, version, TensorMemo()
        key = (context.query_start, context.query_length, key_length, context.is_causal, dtype)
        return self.weights.get_or_build(
            key, lambda: position_weights(logits, context, key_length, dtype), self.max_bytes
        )


class PositionLogitsHeads(AttentionHeads):
    """Shared by both families: learned position logits, softmax over allowed keys, values only.

    Fast path (inference without an attention mask, not while compiling): the weights depend on positions only, so
    each (query block, key length) gets its softmax once, memoised until the logits change (a new
    tensor or an in-place update), and every batch and decoding step reuses it. Edits through
    `.data` bypass the version counters: call `model.eval()` after them.
    """

    sites = SELF_ATTENTION_SITES
    uses_query_key = False
    memo_bytes = 16 * 2**20  # the memoised weights of one layer stay below this size

    def __init__(self, spec: PositionLogitsSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        self.clear_memo()

    @property
    def attention_dropout(self) -> float:
        dropout = self.spec["attention_dropout"]
        return self.config.attention_dropout if dropout is None else dropout

    def position_logits(self, context: AttentionContext) -> torch.Tensor:
        """The logits (heads, M, M) this layer attends with."""
        raise NotImplementedError

    def train(self, mode: bool = True):
        self.clear_memo()
        return super().train(mode)

    def clear_memo(self) -> None:
        self.weights_memo = PositionWeightsMemo(self.memo_bytes)

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # value: (batch, heads, k_len, d); query and key are None (no query/key projection)
        check_sequence_length(value.shape[-2], self.spec["max_positions"], self.kind, self.site)
        logits = self.position_logits(context)
        if (
            self.fast_path
            and not (self.training or output_attentions)
            and not (torch.is_grad_enabled() and logits.requires_grad)
            and context.key_padding_mask is None
            and not is_compiling()
        ):
            weights = self.weights_memo.get(logits, context, value.shape[-2], value.dtype)
            return apply_table(weights[0], value), None
        return attend_with_position_logits(
            logits, value, context, self.attention_dropout, self.training, output_attentions
        )


@register_attention("recurrent")
class RecurrentHeads(PositionLogitsHeads):
    """RAN heads: the logits come from the stack's `RecurrentAttentionState` (one A0, one transition)."""

    option_names = (
        "max_positions",
        "transition",
        "transition_ffn_dim",
        "layer_norm_residual",
        "freeze_initial",
        "attention_dropout",
    )

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> RecurrentSpec:
        spec = super().normalize_spec(spec, site, field)
        transition = spec.get("transition", "tanh_ln")
        if transition not in TRANSITIONS:
            raise LayoutError(f"{field}.transition: expected one of {list(TRANSITIONS)}, got {transition!r}")
        ffn_dim = spec.get("transition_ffn_dim", DEFAULT_TRANSITION_FFN_DIM if transition == "ffn" else None)
        if transition == "ffn":
            positive_int(ffn_dim, f"{field}.transition_ffn_dim", MAX_SIZE)
        if transition == "tanh_ln" and ffn_dim is not None:
            raise LayoutError(
                f"{field}.transition_ffn_dim: only the 'ffn' transition has a hidden layer; "
                f"leave it out with transition 'tanh_ln', got {ffn_dim!r}"
            )
        layer_norm_residual = true_or_false(spec.get("layer_norm_residual", True), f"{field}.layer_norm_residual")
        if transition == "ffn" and not layer_norm_residual:
            raise LayoutError(
                f"{field}.layer_norm_residual: false (the paper's 'w/o LN&RES' ablation) applies to the 'tanh_ln' "
                f"transition only; valid transitions for it: ['tanh_ln']"
            )
        return {
            "kind": spec["kind"],
            "num_heads": spec["num_heads"],
            "max_positions": normalize_max_positions(spec, field),
            "transition": transition,
            "transition_ffn_dim": ffn_dim,
            "layer_norm_residual": layer_norm_residual,
            "freeze_initial": true_or_false(spec.get("freeze_initial", False), f"{field}.freeze_initial"),
            # The paper trains RAN with attention dropout 0.2.
            "attention_dropout": normalize_attention_dropout(spec, field, default=0.2),
        }

    @classmethod
    def stack_groups(cls, layer_specs: list[LayerSpec | None]) -> list[tuple[int, int, RecurrentSpec]]:
        """(layer index, group index, group spec) of every RAN group of a stack, in layer order."""
        return [
            (layer_index, group_index, group)
            for layer_index, layer_spec in enumerate(layer_specs)
            if layer_spec is not None
            for group_index, group in enumerate(layer_spec["groups"])
            if group["kind"] == cls.kind
        ]

    @classmethod
    def validate_site(cls, layer_specs: list[LayerSpec | None], site: str) -> None:
        """Every RAN layer of a stack shares one A0 and one transition, so they must agree on `STACK_OPTIONS`."""
        groups = cls.stack_groups(layer_specs)
        for layer_index in {layer for layer, _, _ in groups}:
            count = sum(1 for layer, _, _ in groups if layer == layer_index)
            if count > 1:
                raise LayoutError(
                    f"attention_layout.{site}[{layer_index}].groups: at most one {cls.kind!r} group per layer "
                    f"(the stack has one A0 with one set of heads), got {count}"
                )
        if not groups:
            return
        first_layer, _, first = groups[0]
        for layer_index, group_index, group in groups[1:]:
            # Field names as the layout writes them: a one-group layer is named without `.groups[i]`.
            field = f"attention_layout.{site}[{layer_index}]"
            if len(layer_specs[layer_index]["groups"]) > 1:
                field += f".groups[{group_index}]"
            for name in STACK_OPTIONS:
                if group[name] != first[name]:
                    raise LayoutError(
                        f"{field}.{name}: all {cls.kind!r} layers of a stack share one A0 and one transition, "
                        f"so {name} must be the same as in layer {first_layer} ({first[name]!r}), got {group[name]!r}"
                    )

    @classmethod
    def build_stack_state(
        cls, config, site: str, layer_specs: list[LayerSpec | None]
    ) -> RecurrentAttentionState | None:
        """One `RecurrentAttentionState` for the stack (the layout was checked by `validate_site`)."""
        groups = cls.stack_groups(layer_specs)
        if not groups:
            return None
        return RecurrentAttentionState(groups[0][2], num_layers=len(groups))

    def position_logits(self, context: AttentionContext) -> torch.Tensor:
        # This layer is the stack's RAN layer number family_layer_idx + 1: it attends with A_{family_layer_idx + 1}.
        state_key = self.stack_state_key(self.site)
        if context.stack_state is None or state_key not in context.stack_state:
            raise RuntimeError(
                f"{self.kind} attention needs the stack state {state_key!r} (A0 and the transition) built by "
                "`build_stack_state`; the model must pass it in `AttentionContext.stack_state`"
            )
        return context.stack_state[state_key].layer_logits(self.family_layer_idx)


@register_attention("random_synthesizer")
class RandomSynthesizerHeads(PositionLogitsHeads):
    """Random Synthesizer heads: this layer's own learned logits (heads, M, M), no transition."""

    option_names = ("max_positions", "attention_dropout")

    @classmethod
    def normalize_spec(cls, spec: dict, site: str, field: str) -> PositionLogitsSpec:
        spec = super().normalize_spec(spec, site, field)
        return {
            "kind": spec["kind"],
            "num_heads": spec["num_heads"],
            "max_positions": normalize_max_positions(spec, field),
            # No value is reported for Syn-R: null follows config.attention_dropout.
            "attention_dropout": normalize_attention_dropout(spec, field, default=None),
        }

    def __init__(self, spec: PositionLogitsSpec, config, site: str, layer_idx: int, head_dim: int, **kwargs):
        super().__init__(spec, config, site, layer_idx, head_dim, **kwargs)
        max_positions = spec["max_positions"]
        self.logits = nn.Parameter(torch.zeros(self.num_heads, max_positions, max_positions))

    def init_attention_weights(self) -> None:
        init.xavier_uniform_(self.logits)

    def position_logits(self, context: AttentionContext) -> torch.Tensor:
        return self.logits
