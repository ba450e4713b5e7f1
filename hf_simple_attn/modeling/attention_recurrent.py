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
initialisation (the paper's "fixed" ablation), a draw from a seed of its own per site, as a buffer must be.

The Random Synthesizer (Tay et al. 2020, "Synthesizer: Rethinking Self-Attention in Transformer
Models"), the RAN paper's Syn-R baseline, gives every layer its own learned logits (heads, M, M)
and no transition.

Both families take the softmax over the allowed keys only (the causal mask in the decoder,
padded keys removed), so a padded batch equals each example alone; a cached decoding step at
position t uses row t (read at the position a static cache holds on the device, `query_rows`; such a cache's slots
past `max_positions` are never written and are left out). Values and the output are projected as usual; there is no query or key
projection. Inputs longer than `max_positions` raise a `ValueError`.

Fast path (`output_attentions` and exports take each layer's own softmax, the reference path): in inference
without an attention mask, each layer's weights are memoised per (query block, key length). Otherwise a stack's
RAN layers share one chain per forward, run on the rows that the queries read only (the transition maps every row
on its own) and in the parameters' dtype (also under autocast). Where SDPA runs it as one fused kernel (CUDA,
attention dropout included; the CPU without dropout, keys no more than a head's width), each layer is one SDPA call
whose queries are its logits' rows and whose keys are unit vectors (`logit_attention`): no weights are formed and
the values are read in the projections' layout; under autocast the logits reach the kernel in bf16, as a dot layer's
scores do. Elsewhere (the CPU with dropout) one softmax over all the stack's logits at once, the causal mask without
padding made once and kept, and each layer draws its own attention dropout.
"""

import torch
from torch import nn
from torch.func import functional_call
from transformers import initialization as init
from transformers.utils.generic import maybe_autocast

from .attention_heads import (
    MAX_SIZE,
    AttentionContext,
    AttentionHeads,
    AttentionStackState,
    GroupSpec,
    LayerSpec,
    LayoutError,
    is_number,
    positive_int,
    true_or_false,
)
from .attention_ops import (
    apply_table,
    attention_dropout,
    is_exporting,
    kept_attention_bias,
)
from .memo import TensorMemo, is_compiling, memo_for


RAN_PAPER = "Zeng et al. 2021, Recurrent Attention for Neural Machine Translation"
RAN_BIBTEX = """@inproceedings{zeng-etal-2021-recurrent,
  title = {Recurrent Attention for Neural Machine Translation},
  author = {Zeng, Jiali and Wu, Shuangzhi and Yin, Yongjing and Jiang, Yufan and Li, Mu},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year = {2021}
}"""
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


def query_rows(logits: torch.Tensor, context: AttentionContext) -> torch.Tensor:
    """The rows (..., q_len, M) of logits (..., rows, M) that the queries read: row i for the query at position i,
    selected on the device when the position is held there (a static cache)."""
    if context.query_start is None:
        return logits.index_select(-2, context.query_positions)
    return logits[..., context.query_start : context.query_start + context.query_length, :]


def position_weights(logits: torch.Tensor, context: AttentionContext, key_length: int, dtype) -> torch.Tensor:
    """softmax of the logits over the allowed keys, in `dtype`: (..., batch or 1, heads, q_len, k_len).

    logits: (..., heads, rows, M), row i = query position i; one layer's (heads, M, M) or all RAN layers' of a
    stack at once. In self attention every query position is below k_len, so the query rows and the first k_len
    columns cover everything (a cached step at position t reads row t). The softmax runs in the logits' dtype
    (float32 under autocast); only the weights are cast to the values' dtype.
    """
    scores = query_rows(logits, context)[..., :key_length].unsqueeze(-4)  # (..., 1, heads, q, k)
    if not context.sees_every_key():
        scores = scores + kept_attention_bias(context, key_length, scores.dtype)  # (..., batch or 1, heads, q, k)
    return torch.softmax(scores, dim=-1).to(dtype)


def query_width(key_length: int, head_dim: int, max_positions: int) -> int:
    """The width of `logit_attention`'s queries and keys, at most the logits' M columns: the values' head_dim where
    the keys fit in it (flash kernels want queries, keys and values of one width), else the key length rounded up to
    a multiple of 8 (the memory-efficient kernel takes values of another width, queries and keys aligned to 8)."""
    return min(max_positions, max(head_dim, -(-key_length // 8) * 8))


def runs_fused(value: torch.Tensor, width: int, dropout: float) -> bool:
    """Whether SDPA runs `logit_attention` as one fused kernel: on CUDA (flash or memory-efficient, attention dropout
    included), on the CPU without dropout and with queries as wide as the values (its flash kernel's conditions).
    Elsewhere SDPA falls back to its unfused maths, no cheaper than `attend`'s explicit weights."""
    return value.device.type == "cuda" or (dropout == 0 and width == value.shape[-1])


def identity_keys(key_length: int, width: int, value: torch.Tensor) -> torch.Tensor:
    """Rows 0 .. k_len - 1 of the width × width identity, (k_len, width) in the values' dtype and device, kept across
    forwards (made in the graph while compiling)."""
    key = (key_length, width, value.dtype, str(value.device))
    return memo_for("identity_keys").kept(
        key, lambda: torch.eye(key_length, width, dtype=value.dtype, device=value.device)
    )


def logit_attention(
    logits: torch.Tensor, value: torch.Tensor, context: AttentionContext, dropout: float
) -> torch.Tensor:
    """softmax(logits + mask)·value, attention dropout with probability `dropout`, as one SDPA call: query i is row i
    of the logits and key j is the j-th unit vector, so that query i · key j = logits[i, j] (scale 1). The weights are
    never formed, the values are read in the projections' layout, and the output comes laid out as (batch, q_len,
    heads, d), ready for the merge of the heads.

    logits: (heads, rows, M), row i = query position i; value: (batch, heads, k_len, d) -> (batch, heads, q_len, d).
    The logits reach the kernel in the values' dtype (under autocast, bf16 like a dot layer's scores).
    """
    batch_size, num_heads, key_length, head_dim = value.shape
    width = query_width(key_length, head_dim, logits.shape[-1])
    # Positions first, as the projections lay the values out (one copy, under autocast the cast to the values' dtype):
    # SDPA's CPU kernel lays its output out like its queries, so that the merge of the heads is then a view. The
    # columns are cut before the rows are read, so that a static cache's step gathers its row already contiguous.
    query = query_rows(logits[..., :width], context).transpose(0, 1).to(value.dtype).contiguous()
    query = query.transpose(0, 1).unsqueeze(0).expand(batch_size, -1, -1, -1)  # (batch, heads, q_len, width)
    key = identity_keys(key_length, width, value).expand(batch_size, num_heads, -1, -1)  # (batch, heads, k_len, width)
    # As `dot`: SDPA's own causal kernel when the queries are every position of an unpadded sequence.
    mask, is_causal = None, False
    if context.uses_causal_kernel(key_length):
        is_causal = True
    elif not context.sees_every_key():
        mask = kept_attention_bias(context, key_length, value.dtype)
    return nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=1.0
    )


def attend(
    weights: torch.Tensor, value: torch.Tensor, context: AttentionContext, dropout: float, output_attentions: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """weights (batch or 1, heads, q_len, k_len) times the values (batch, heads, k_len, head_dim), after attention
    dropout with probability `dropout` (0 outside training); the weights per example too when asked."""
    batch_size = value.shape[0]
    if dropout > 0:
        # One dropout mask per example, not one shared by the batch.
        weights = attention_dropout(weights.expand(batch_size, -1, -1, -1), dropout, training=True)
    if dropout == 0 and context.key_padding_mask is None:
        # The weights are (1, heads, q_len, k_len), the same for every example (known from the context, not from a
        # batch size that an export traces symbolically): one product per head, never copied per example.
        output = apply_table(weights.squeeze(0), value)
    else:
        output = torch.matmul(weights, value)
    if not output_attentions:
        return output, None
    return output, weights.expand(batch_size, -1, -1, -1)


def fixed_initial_logits(shape: torch.Size, seed: int) -> torch.Tensor:
    """Xavier-uniform logits of `shape` drawn on the CPU by a generator seeded with `seed`: the same in every run and
    on every device (a fixed A0)."""
    logits = torch.empty(shape, device="cpu")
    return init.xavier_uniform_(logits, generator=torch.Generator(device="cpu").manual_seed(seed))


class TanhLayerNormTransition(nn.Module):
    """The paper's transition (Eq. 3-4): A' = LayerNorm(tanh(W·A + b)) + A, or tanh(W·A + b) alone."""

    def __init__(self, max_positions: int, layer_norm_residual: bool):
        super().__init__()
        self.linear = nn.Linear(max_positions, max_positions)
        self.layer_norm = nn.LayerNorm(max_positions) if layer_norm_residual else None

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (heads, rows, M) → (heads, rows, M); the map acts on the last (key) axis, every row on its own."""
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
        """logits: (heads, rows, M) → (heads, rows, M); the map acts on the last (key) axis, every row on its own."""
        return logits + self.fc2(torch.relu(self.fc1(logits)))


class RecurrentAttentionState(AttentionStackState):
    """A0 and the transition of one stack; gives the k-th RAN layer its logits A_k.

    When no gradient is needed (inference, `generate`), all layers' logits are computed once and
    reused by every layer, length and decoding step, until a parameter changes (tracked by the
    tensors' version counters, device and dtype) or `train()`/`eval()` is called. Edits through
    `.data` bypass the version counters: call `model.eval()` after them.

    When gradients are needed (or while compiling or exporting), the chain A0 → A_L of the stack's L RAN layers runs
    once per forward of the stack, in the graph, shared by its layers until `end_forward` (L transitions,
    not L(L+1)/2); the heads' fast path runs it on the rows that the forward's queries read only (the transition
    maps every row on its own). Under gradient checkpointing, and outside a stack's forward, each layer runs the chain
    A0 → A_k itself (k transitions for the k-th layer): a checkpointed layer must recompute in backward
    what it computed in forward, which a chain computed once for all layers would break.

    seed: the seed of a fixed A0's draw (`freeze_initial`), one per site.
    """

    def __init__(self, spec: RecurrentSpec, num_layers: int, seed: int = 0):
        super().__init__()
        self.num_layers = num_layers
        num_heads, max_positions = spec["num_heads"], spec["max_positions"]
        # The seed of a fixed A0; None when A0 is learned.
        self.fixed_initial_seed = seed if spec["freeze_initial"] else None
        if self.fixed_initial_seed is None:
            self.initial_logits = nn.Parameter(torch.zeros(num_heads, max_positions, max_positions))
        else:
            # The paper's "fixed" ablation: A0 stays at its random initialisation. A buffer is saved and loaded like
            # a parameter but never trained (loading may not keep requires_grad=False). `_init_weights` must rebuild
            # a buffer as `__init__` made it (transformers builds models on the meta device), so it is drawn from a
            # seed of its own, the same here and there.
            self.register_buffer("initial_logits", torch.empty(num_heads, max_positions, max_positions))
            self.init_attention_weights()
        if spec["transition"] == "tanh_ln":
            self.transition = TanhLayerNormTransition(max_positions, spec["layer_norm_residual"])
        else:
            self.transition = FeedForwardTransition(max_positions, spec["transition_ffn_dim"])
        self._cache_key = None
        self._cached_logits = None  # (L, heads, M, M) and its layers' views, kept while no gradient is needed
        self._cached_layer_logits = None
        self._share_chain = False
        self._forward_logits = None  # [A_1, ..., A_L] of the current forward, in the graph

    def init_attention_weights(self) -> None:
        # As the public code: Xavier-uniform over (heads, M, M).
        if self.fixed_initial_seed is None:
            init.xavier_uniform_(self.initial_logits)
        else:
            init.copy_(self.initial_logits, fixed_initial_logits(self.initial_logits.shape, self.fixed_initial_seed))

    def train(self, mode: bool = True):
        self.clear_cache()
        return super().train(mode)

    def begin_forward(self, checkpointing: bool) -> None:
        self._share_chain = not checkpointing
        self._forward_logits = None

    def end_forward(self) -> None:
        self._share_chain = False
        self._forward_logits = None

    @property
    def shares_chain(self) -> bool:
        """Whether the layers now share one chain: inside a stack's forward, without gradient checkpointing."""
        return self._share_chain

    def clear_cache(self) -> None:
        self._cache_key = None
        self._cached_logits = None
        self._cached_layer_logits = None

    def cache_key(self) -> tuple:
        # Logits computed under inference_mode are inference tensors, unusable elsewhere: key on the mode too.
        tensors = [*self.parameters(), *self.buffers()]
        versions = tuple((id(t), t._version, t.device, t.dtype) for t in tensors)
        return versions + (torch.is_inference_mode_enabled(),)

    def in_graph(self) -> bool:
        """Whether the logits are computed in the graph: gradients are needed, or the model is being compiled or
        exported (the logits depend on parameters only, so a runtime can fold them into constants)."""
        needs_gradient = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        return needs_gradient or is_compiling()

    def chain(self, steps: int, rows: int | None = None) -> list[torch.Tensor]:
        """[A_1, ..., A_steps], each (heads, rows, M): the first `rows` query rows, all M by default."""
        logits, per_layer = self.initial_logits, []
        if rows is not None:
            # The transition maps every row on its own: the rows that no query reads are left out.
            logits = logits[:, :rows].contiguous()
        # One view of each transition parameter per step: backward sums a parameter's gradients of all the steps in
        # two operators (a stack and a sum) instead of one addition per step.
        per_step = {
            name: parameter.expand(steps, *parameter.shape).unbind(0)
            for name, parameter in self.transition.named_parameters()
        }
        # In the parameters' dtype, also under autocast: the chain is small and reads parameters only, so casting
        # them at every step would cost more operators than it saves; the softmax reads A_k at full precision.
        with maybe_autocast(logits.device.type, enabled=False):
            for step in range(steps):
                step_parameters = {name: views[step] for name, views in per_step.items()}
                logits = functional_call(self.transition, step_parameters, (logits,))
                per_layer.append(logits)
        return per_layer

    def update_cache(self) -> None:
        """Compute all layers' logits outside the graph again if a parameter changed since they were computed."""
        key = self.cache_key()
        if self._cache_key != key:
            self._cached_logits = torch.stack(self.chain(self.num_layers))
            # One view per layer, made once: the heads' memos know the logits by identity.
            self._cached_layer_logits = self._cached_logits.unbind(0)
            self._cache_key = key

    def layer_logits(self, layer: int) -> torch.Tensor:
        """Logits (heads, M, M) of the stack's RAN layer `layer` (0-based), i.e. A_{layer + 1}."""
        if self.in_graph():
            if not self._share_chain:
                return self.chain(layer + 1)[-1]
            if self._forward_logits is None:
                self._forward_logits = self.chain(self.num_layers)
            return self._forward_logits[layer]
        self.update_cache()
        return self._cached_layer_logits[layer]

    def all_layer_logits(self, rows: int | None) -> torch.Tensor:
        """Every RAN layer's logits at once, while the layers share a chain: (L, heads, rows, M) in the graph (all M
        rows for None), (L, heads, M, M) from the cache otherwise."""
        if self.in_graph():
            return torch.stack(self.chain(self.num_layers, rows))
        self.update_cache()
        return self._cached_logits


class PositionWeightsMemo:
    """`position_weights` (1, heads, q_len, k_len) per (query block, key length, dtype), valid for one
    logits tensor at one version; bounded in bytes by the `position_weights` memo budget."""

    def __init__(self):
        self.logits = None  # kept alive, so that its identity cannot pass to a new tensor
        self.version = None
        self.weights = TensorMemo("position_weights")

    def get(self, logits: torch.Tensor, context: AttentionContext, key_length: int, dtype) -> torch.Tensor:
        # Inference tensors (RAN logits cached in inference mode) have no version counter; RAN makes
        # new logits whenever its parameters change.
        in_place_updates = None if logits.is_inference() else logits._version
        version = (in_place_updates, logits.device, logits.dtype, torch.is_inference_mode_enabled())
        if self.logits is not logits or self.version != version:
            self.logits, self.version, self.weights = logits, version, TensorMemo("position_weights")
        key = (context.query_start, context.query_length, key_length, context.is_causal, dtype)
        return self.weights.get_or_build(key, lambda: position_weights(logits, context, key_length, dtype))


class PositionLogitsHeads(AttentionHeads):
    """Shared by both families: learned position logits, softmax over allowed keys, values only.

    Reference path (`output_attentions`, exporting, or the fast path off): each layer takes the softmax of its own
    logits. Fast path: in inference without an attention mask (not while compiling), the weights depend on positions
    only, so each (query block, key length) gets its softmax once, memoised until the logits change (a new tensor or
    an in-place update), and every batch and decoding step reuses it; edits through `.data` bypass the version
    counters: call `model.eval()` after them. Otherwise a family may give its layers weights they share (RAN: one
    softmax for all the layers of a stack, `fast_weights`).
    """

    sites = SELF_ATTENTION_SITES
    uses_query_key = False

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
        self.weights_memo = PositionWeightsMemo()

    def memoised_weights(self, context: AttentionContext, key_length: int, dtype) -> torch.Tensor | None:
        """This layer's weights (1, heads, q_len, k_len) from the memo, in inference without an attention mask (not
        while compiling, nor at a position held on the device); None elsewhere."""
        if self.training or context.key_padding_mask is not None or context.query_start is None or is_compiling():
            return None
        logits = self.position_logits(context)
        if torch.is_grad_enabled() and logits.requires_grad:
            return None
        return self.weights_memo.get(logits, context, key_length, dtype)

    def fused_logits(self, context: AttentionContext) -> torch.Tensor:
        """The logits (heads, rows, M) `logit_attention` reads, rows covering the queries: `position_logits` unless
        the family shares them between layers."""
        return self.position_logits(context)

    def shared_weights(
        self, context: AttentionContext, key_length: int, dtype, dropout_batch: int | None
    ) -> torch.Tensor | None:
        """This layer's weights (batch or 1, heads, q_len, k_len) where the family computes them once for several
        layers, else None. dropout_batch: the batch size when attention dropout draws a mask per example (None without
        dropout): the weights may come expanded to it."""
        return None

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor | None,
        value: torch.Tensor,
        context: AttentionContext,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # value: (batch, heads, k_len, d); query and key are None (no query/key projection)
        if context.query_start is None:
            value = value[:, :, : self.spec["max_positions"]]  # a static cache's slots that no position reaches
        batch_size, _, key_length, _ = value.shape
        check_sequence_length(key_length, self.spec["max_positions"], self.kind, self.site)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if self.fast_path and not output_attentions and not is_exporting():
            weights = self.memoised_weights(context, key_length, value.dtype)
            width = query_width(key_length, value.shape[-1], self.spec["max_positions"])
            if weights is None and runs_fused(value, width, dropout):
                return logit_attention(self.fused_logits(context), value, context, dropout), None
            if weights is None:
                weights = self.shared_weights(context, key_length, value.dtype, batch_size if dropout > 0 else None)
        if weights is None:
            weights = position_weights(self.position_logits(context), context, key_length, value.dtype)
        return attend(weights, value, context, dropout, output_attentions)


class RecurrentHeads(PositionLogitsHeads):
    """RAN heads: the logits come from the stack's `RecurrentAttentionState` (one A0, one transition)."""

    kind = "recurrent"
    summary = "learned position-only logits, refined layer by layer (RAN)"
    paper = RAN_PAPER
    citation = RAN_BIBTEX
    limitations = "recurrent (RAN) heads learn weights per position, with no interaction between tokens"

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
        return RecurrentAttentionState(groups[0][2], num_layers=len(groups), seed=SELF_ATTENTION_SITES.index(site))

    def stack_state(self, context: AttentionContext) -> RecurrentAttentionState:
        """The stack's A0 and transition, from the context."""
        state_key = self.stack_state_key(self.site)
        if context.stack_state is None or state_key not in context.stack_state:
            raise RuntimeError(
                f"{self.kind} attention needs the stack state {state_key!r} (A0 and the transition) built by "
                "`build_stack_state`; the model must pass it in `AttentionContext.stack_state`"
            )
        return context.stack_state[state_key]

    def position_logits(self, context: AttentionContext) -> torch.Tensor:
        # This layer is the stack's RAN layer number family_layer_idx + 1: it attends with A_{family_layer_idx + 1}.
        return self.stack_state(context).layer_logits(self.family_layer_idx)

    def memoised_weights(self, context: AttentionContext, key_length: int, dtype) -> torch.Tensor | None:
        if self.stack_state(context).in_graph():
            return None  # the logits need a gradient (or are being traced): nothing to memoise
        return super().memoised_weights(context, key_length, dtype)

    def fused_logits(self, context: AttentionContext) -> torch.Tensor:
        """While the layers share a chain: this layer's A_k from the chain run once per forward, on the rows the
        queries read; else its own logits."""
        state = self.stack_state(context)
        if not (state.in_graph() and state.shares_chain):
            return self.position_logits(context)
        rows = None if context.query_start is None else context.query_start + context.query_length
        return context.shared(("recurrent logits", rows), lambda: tuple(state.chain(state.num_layers, rows)))[
            self.family_layer_idx
        ]

    def shared_weights(
        self, context: AttentionContext, key_length: int, dtype, dropout_batch: int | None
    ) -> torch.Tensor | None:
        """While the layers share a chain: one softmax over all the stack's RAN layers' logits per forward (and one
        expansion for dropout), of which this layer takes its own."""
        state = self.stack_state(context)
        if not state.shares_chain:
            return None

        def build() -> tuple[torch.Tensor, ...]:
            rows = None if context.query_start is None else context.query_start + context.query_length
            logits = state.all_layer_logits(rows)  # (L, heads, rows, M)
            weights = position_weights(logits, context, key_length, dtype)  # (L, batch or 1, heads, q, k)
            if dropout_batch is not None:
                # Expanded once for all layers: backward sums over the batch once, not once per layer.
                weights = weights.expand(-1, dropout_batch, -1, -1, -1)
            # One view per layer: backward stacks their gradients in one operator.
            return weights.unbind(0)

        key = ("recurrent weights", key_length, dtype, dropout_batch)
        return context.shared(key, build)[self.family_layer_idx]


class RandomSynthesizerHeads(PositionLogitsHeads):
    """Random Synthesizer heads: this layer's own learned logits (heads, M, M), no transition."""

    kind = "random_synthesizer"
    summary = "one learned position-only matrix per layer (Synthesizer)"
    # The RAN paper's baseline: the cards cite the RAN paper.
    paper = "Tay et al. 2020, Synthesizer; the RAN paper's Syn-R baseline (" + RAN_PAPER + ")"
    citation = RAN_BIBTEX
    limitations = "random-synthesizer heads learn weights per position, with no interaction between tokens"

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
