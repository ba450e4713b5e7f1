"""Decoding caches that also hold value-only heads, absent sublayers, per-step family state and windows.

Hard-coded and recurrent heads need no keys, so their sublayers cache keys with zero heads;
a decoder layer without self-attention caches empty tensors just to count positions. A
`DynamicLayer` reads its length from the keys and would report 0 for both; this layer counts
the positions it was given. A family that carries a running quantity from one decoding step to
the next (the GMM synthesis network's means) keeps it in `states`, batch-first, so beam search
reorders it together with the keys and values. A sublayer whose heads only ever read the last
few positions (windowed hard-coded self attention) drops older ones with `keep_last`: the cache
then costs O(window) per step while its length still counts every position.

Cross-attention keys and values come from the encoder output, which `generate` repeats for every
beam of a sentence; beam search only permutes the beams of each sentence, so reordering them is
an identity on their content and is skipped (a copy of every cross cache each step otherwise).

Static caches (`generate(..., cache_implementation="static")`, or a user-built
`EncoderDecoderCache(StaticCache(config=..., max_cache_len=...), StaticCache(...))`) hold `SimpleAttnStaticLayer`s,
for every attention family: as transformers' `StaticLayer`, buffers of max_cache_len positions allocated at the first
update (the prefill, before any compiled step) and written in place at a position held on the device, so that every
decoding step has the same shapes (CUDA graphs, `torch.compile` without recompiles). The decoder then gives the
families their positions as a tensor (`AttentionContext.query_start` None): unwritten slots are hidden by the causal
mask, windowed hard-coded heads keep every position and mask by their window, value-only heads and absent sublayers
keep keys with zero heads, per-step state (`states`) is written in place, and beam search reorders every buffer in
place. The cross-attention half holds the encoder's positions, filled once by the prefill. Positions beyond
max_cache_len raise a `ValueError` naming it in eager steps (a compiled step does not check: `generate` sizes the
cache to its `max_length`).

A cache built the transformers way (`DynamicCache()`, `DynamicCache(config=model.config)`,
`EncoderDecoderCache(DynamicCache(...), DynamicCache(...))`, or the same with empty `StaticCache`s) is taken over by
`decoder_cache_for`: its empty `DynamicLayer`s (`StaticLayer`s) are replaced in place by `SimpleAttnCacheLayer`s
(`SimpleAttnStaticLayer`s), so the object the user holds is the one the model fills and returns; a plain
`DynamicCache` or `StaticCache` becomes the self-attention half of an `EncoderDecoderCache`. What cannot hold this
model's decoding state is refused with a `ValueError` that names the cache and what to pass instead.
"""

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache, StaticLayer

from .attention_registry import get_attention_family


class SimpleAttnCacheLayer(DynamicLayer):
    """beam_invariant: the keys and values are the same for all beams of a sentence (cross attention),
    so `reorder_cache` keeps them as they are and reorders only `states`."""

    def __init__(self, beam_invariant: bool = False):
        super().__init__()
        self.beam_invariant = beam_invariant
        self.states = {}
        self.length = 0  # positions seen, including those dropped by `keep_last`
        self.record_past = False  # `activate_past_recording`: positions are dropped by `crop` only
        self.window = None  # the last `keep_last` window

    def activate_past_recording(self) -> None:
        """Keep every position until the next `crop`, which assisted decoding calls to roll back rejected tokens
        (as transformers' sliding-window layers): `keep_last` then only records its window, and `crop` restores it."""
        self.record_past = True

    def update(self, key_states, value_states, *args, **kwargs):
        if self.is_initialized and key_states.shape[1] == 0:
            # Value-only heads: the keys have no heads, so they stay a view of the values (no copy per step).
            self.values = torch.cat([self.values, value_states], dim=-2)
            self.keys = self.values[:, :0]
        else:
            super().update(key_states, value_states, *args, **kwargs)
        self.length += value_states.shape[-2]
        return self.keys, self.values

    def keep_last(self, positions: int) -> None:
        """Drop all but the last `positions` cached positions (the length still counts them)."""
        self.window = positions
        if not self.record_past:
            self.drop_to(positions)

    def drop_to(self, positions: int) -> None:
        kept = self.values.shape[-2]
        if kept > positions:
            self.keys = self.keys[..., kept - positions :, :]
            self.values = self.values[..., kept - positions :, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last `-tokens_to_remove` positions; with past recording, then drop all but the window."""
        if not self.is_initialized:
            return
        if tokens_to_remove != 0:
            if self.length > self.values.shape[-2] and not self.record_past:
                raise ValueError(
                    "a cache layer that dropped early positions (`keep_last`) cannot be cropped; call "
                    "`activate_past_recording` first (generate does for assisted decoding)"
                )
            super().crop(tokens_to_remove)
            self.length -= abs(tokens_to_remove)
        if self.record_past and self.window is not None:
            self.drop_to(self.window)

    def reorder_cache(self, beam_idx):
        if not self.beam_invariant:
            super().reorder_cache(beam_idx)
        self.states = {name: state.index_select(0, beam_idx.to(state.device)) for name, state in self.states.items()}

    def batch_repeat_interleave(self, repeats: int):
        super().batch_repeat_interleave(repeats)
        self.states = {name: state.repeat_interleave(repeats, dim=0) for name, state in self.states.items()}

    def batch_select_indices(self, indices):
        super().batch_select_indices(indices)
        self.states = {name: state[indices, ...] for name, state in self.states.items()}

    def reset(self):
        super().reset()
        self.states = {}
        self.length = 0


class SimpleAttnStaticLayer(StaticLayer):
    """A `StaticLayer` that also holds value-only heads (keys with zero heads: a view of the values), absent
    sublayers (empty buffers that count positions) and per-step family state (`states`, written in place by the
    families). Buffers are allocated at the first update, written in place at `cumulative_length` (on the device), and
    reordered in place by beam search, so they keep their identity from step to step.

    beam_invariant: cross attention, whose buffers hold the encoder's positions (at most max_cache_len), filled once by
    the prefill and never reordered.
    """

    def __init__(self, max_cache_len: int, beam_invariant: bool = False):
        super().__init__(max_cache_len)
        self.beam_invariant = beam_invariant
        self.states = {}
        self.written = 0  # positions written by eager updates, to check max_cache_len without reading the device

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = value_states.device
        length = value_states.shape[-2] if self.beam_invariant else self.max_cache_len
        self.values = torch.zeros(
            (*value_states.shape[:2], length, value_states.shape[-1]), dtype=value_states.dtype, device=self.device
        )
        if key_states.shape[1] == 0:
            self.keys = self.values[:, :0]  # no heads score keys: nothing allocated
        else:
            self.keys = torch.zeros(
                (*key_states.shape[:2], length, key_states.shape[-1]), dtype=key_states.dtype, device=self.device
            )
        self.cumulative_length = self.cumulative_length.to(self.device)
        if not torch.compiler.is_compiling():
            # Fixed addresses: a compiled step (CUDA graphs) mutates them in place.
            for tensor in (self.keys, self.values, self.cumulative_length):
                torch._dynamo.mark_static_address(tensor)
        self.is_initialized = True

    def check_room(self, length: int) -> None:
        """A `ValueError` naming max_cache_len when `length` more positions do not fit (eager steps only)."""
        if torch.compiler.is_compiling():
            return
        if self.written + length > self.max_cache_len:
            raise ValueError(
                f"the static cache holds max_cache_len={self.max_cache_len} positions, and {self.written} are "
                f"written: {length} more do not fit; build it with a larger max_cache_len (generate sizes its own to "
                "max_length)"
            )
        self.written += length

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        *args,
        cache_position: torch.Tensor | None = None,
        **kwargs,
    ):
        """Write the new positions in place. cache_position: their positions (query_len,), as the decoder made them
        once for all its layers from the first layer's length (`static_positions`: every layer holds as many), so
        that a layer does not make them again; else from this layer's length."""
        if self.beam_invariant:
            return self.fill(key_states, value_states)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = value_states.shape[-2]
        self.check_room(length)
        positions = cache_position
        if positions is None:
            positions = torch.arange(length, device=self.device) + self.cumulative_length
        self.cumulative_length.add_(length)
        self.values.index_copy_(2, positions, value_states)
        if self.keys.shape[1]:
            self.keys.index_copy_(2, positions, key_states)
        return self.keys, self.values

    def fill(self, key_states: torch.Tensor, value_states: torch.Tensor):
        """Cross attention: the encoder's keys and values, copied into buffers of their length."""
        length = value_states.shape[-2]
        if length > self.max_cache_len:
            raise ValueError(
                f"the static cross-attention cache holds max_cache_len={self.max_cache_len} positions, but the "
                f"encoder output has {length}: build it with max_cache_len >= the source length"
            )
        if not self.is_initialized or self.values.shape != value_states.shape or self.keys.shape != key_states.shape:
            self.lazy_initialization(key_states, value_states)
        self.values.copy_(value_states)
        if self.keys.shape[1]:
            self.keys.copy_(key_states)
        self.cumulative_length.fill_(length)
        return self.keys, self.values

    def keep_last(self, positions: int) -> None:
        """Nothing: a static layer keeps every position (windowed heads mask by their window instead)."""

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self.written = max(0, self.written - abs(tokens_to_remove))

    def reorder_cache(self, beam_idx):
        """In place: the buffers keep their identity."""
        if self.is_initialized and not self.beam_invariant:
            beam_idx = beam_idx.to(self.device)
            self.values.copy_(self.values.index_select(0, beam_idx))
            if self.keys.shape[1]:
                self.keys.copy_(self.keys.index_select(0, beam_idx))
        for state in self.states.values():
            state.copy_(state.index_select(0, beam_idx.to(state.device)))

    def reset(self):
        super().reset()
        for state in self.states.values():
            state.zero_()  # a fresh start: the GMM synthesis network's means start at 0
        self.written = 0


class SimpleAttnCache(DynamicCache):
    """A `DynamicCache` of `SimpleAttnCacheLayer`s, one per decoder layer."""

    def __init__(self, num_layers: int, beam_invariant: bool = False):
        Cache.__init__(self, layers=[SimpleAttnCacheLayer(beam_invariant) for _ in range(num_layers)])


def is_static(cache: EncoderDecoderCache) -> bool:
    """Whether the decoder's self-attention half is static: its positions are then held on the device."""
    layers = cache.self_attention_cache.layers
    return bool(layers) and isinstance(layers[0], SimpleAttnStaticLayer)


def static_positions(cache: EncoderDecoderCache, query_length: int, device) -> torch.Tensor:
    """(query_len,) long: the positions of the next queries of a static cache, from its device-held length."""
    return torch.arange(query_length, device=device) + cache.self_attention_cache.layers[0].cumulative_length


def cache_slots(cache: EncoderDecoderCache) -> int:
    """max_cache_len of a static cache's self-attention half: the key length of every decoding step."""
    return cache.self_attention_cache.layers[0].max_cache_len


def static_attention_mask(cache: EncoderDecoderCache, attention_mask: torch.Tensor, batch_size: int) -> torch.Tensor:
    """A decoder attention mask (batch, cached + new positions) as wide as a static cache's slots: the slots after it
    are not written yet, which the causal mask hides (its true width is not checked: that would read the device)."""
    slots = cache_slots(cache)
    if attention_mask.dim() != 2 or attention_mask.shape[0] != batch_size or attention_mask.shape[1] > slots:
        raise ValueError(
            f"decoder_attention_mask has shape {tuple(attention_mask.shape)}: with a static cache of "
            f"max_cache_len={slots} expected (batch={batch_size}, at most {slots}), 1 at real tokens and 0 at padding"
        )
    return torch.nn.functional.pad(attention_mask, (0, slots - attention_mask.shape[1]), value=1)


def new_decoder_cache(config) -> EncoderDecoderCache:
    """The cache `generate` and the decoder create for a simple-attention seq2seq model."""
    return EncoderDecoderCache(
        SimpleAttnCache(config.decoder_layers), SimpleAttnCache(config.decoder_layers, beam_invariant=True)
    )


WHAT_TO_PASS = (
    "pass `model.new_cache()`, an empty `EncoderDecoderCache(DynamicCache(), DynamicCache())`, "
    "`DynamicCache(config=model.config)` or `EncoderDecoderCache(StaticCache(...), StaticCache(...))`, or no cache (the "
    "model builds one)"
)


def decoder_families(config) -> list[str]:
    """The attention families of the decoder's self- and cross-attention sublayers, sorted."""
    layout = config.attention_layout
    specs = [spec for site in ("decoder_self", "cross") for spec in layout[site] if spec is not None]
    return sorted({group["kind"] for spec in specs for group in spec["groups"]})


def rollback_refusal(config) -> str | None:
    """Why this model's decoding cache cannot be cropped (`AttentionHeads.rolls_back`), or None when it can."""
    layout = config.attention_layout
    specs = [spec for site in ("decoder_self", "cross") for spec in layout[site] if spec is not None]
    reasons = {get_attention_family(group["kind"]).rolls_back(group) for spec in specs for group in spec["groups"]}
    reasons.discard(None)
    return "; ".join(sorted(reasons)) or None


def describe_layout(config) -> str:
    preset = getattr(config, "attention_preset", None)
    layout = f"preset {preset!r}" if preset else "this attention layout"
    return f"{layout} (decoder families: {', '.join(decoder_families(config)) or 'none'})"


def keys_and_values_suffice(config, site: str, layer_idx: int) -> bool:
    """Whether a cache layer's keys and values are all the decoding state of this sublayer: learned dot-product heads
    only, which keep every position (no window, no per-step state, keys for every head)."""
    spec = config.attention_layout[site][layer_idx]
    return spec is not None and all(group["kind"] == "dot" for group in spec["groups"])


def adopted_layer(layer: DynamicLayer, beam_invariant: bool) -> SimpleAttnCacheLayer:
    """A `SimpleAttnCacheLayer` holding the keys and values of a filled `DynamicLayer`."""
    new = SimpleAttnCacheLayer(beam_invariant)
    new.device = layer.device
    new.keys, new.values, new.is_initialized = layer.keys, layer.values, True
    new.length = layer.values.shape[-2]
    return new


def converted_layers(config, cache: Cache, site: str, owner: str, beam_invariant: bool) -> list | None:
    """The layers `cache` (one half of the decoder's cache, `site`: "decoder_self" or "cross") must have, or None
    when they are already ours. Raises `ValueError` for a cache that cannot hold this model's decoding state."""
    num_layers = len(config.attention_layout[site])
    layers = list(cache.layers)
    for ours in (SimpleAttnCacheLayer, SimpleAttnStaticLayer):
        if len(layers) == num_layers and all(isinstance(layer, ours) for layer in layers):
            return None
    where = f"{owner} ({type(cache).__name__})"
    if isinstance(cache, EncoderDecoderCache):
        raise ValueError(f"{where} is an EncoderDecoderCache inside an EncoderDecoderCache; {WHAT_TO_PASS}")
    static = [layer for layer in layers if isinstance(layer, StaticLayer)]
    if static and len(static) < len(layers):
        raise ValueError(f"{where} mixes static and dynamic layers; {WHAT_TO_PASS}")
    new_layers = []
    for index in range(max(num_layers, len(layers))):
        layer = layers[index] if index < len(layers) else None
        # Not `get_seq_length`: a DynamicLayer reads it from the keys, which value-only heads and absent sublayers
        # leave empty.
        values = getattr(layer, "values", None)
        is_filled = getattr(layer, "is_initialized", False) and values is not None and values.shape[-2] > 0
        if index >= num_layers:
            if is_filled:
                raise ValueError(f"{where} has {len(layers)} filled layers; the decoder has {num_layers}")
            continue  # an empty extra layer (a cache sized for another model): dropped
        if isinstance(layer, (SimpleAttnCacheLayer, SimpleAttnStaticLayer)):
            new_layers.append(layer)
        elif static and (layer is None or (type(layer) is StaticLayer and not is_filled)):
            new_layers.append(SimpleAttnStaticLayer(static[0].max_cache_len, beam_invariant))
        elif layer is None or (type(layer) is DynamicLayer and not is_filled):
            new_layers.append(SimpleAttnCacheLayer(beam_invariant))
        elif type(layer) is DynamicLayer and keys_and_values_suffice(config, site, index):
            new_layers.append(adopted_layer(layer, beam_invariant))
        elif type(layer) in (DynamicLayer, StaticLayer):
            raise ValueError(
                f"{where} already holds keys and values at layer {index}, filled by another model or code: this "
                f"model with {describe_layout(config)} keeps decoding state that a {type(layer).__name__} does not "
                "hold (positions of value-only heads, windows, per-step state), so only an empty DynamicCache or "
                f"StaticCache is taken over; {WHAT_TO_PASS}"
            )
        else:
            raise ValueError(
                f"{where} holds a {type(layer).__name__} at layer {index}, which cannot hold this model's decoding "
                f"state with {describe_layout(config)}; {WHAT_TO_PASS}"
            )
    return new_layers


def decoder_cache_for(config, cache: Cache | None) -> EncoderDecoderCache:
    """The cache the decoder runs with, for the `cache` argument of a forward pass or of `generate` (with `use_cache`).

    None: a new cache (`new_decoder_cache`). An `EncoderDecoderCache`: the same object, its empty `DynamicLayer`s
    replaced in place by `SimpleAttnCacheLayer`s (the keys and values of filled ones are adopted where they are all of
    a layer's state: `dot` heads); its empty `StaticLayer`s by `SimpleAttnStaticLayer`s of the same max_cache_len. A
    plain `DynamicCache` or `StaticCache`: converted in place and used as the self-attention half of a new
    `EncoderDecoderCache`, which the model returns as its `cache`: pass that one on. Given the plain `DynamicCache`
    again, the model computes the cross-attention keys and values again, and the GMM synthesis network (normalization
    'none'), whose running means the cross-attention cache holds, raises. Anything else (a quantized cache, a legacy
    tuple, a cache another model filled for a family that keeps more than keys and values) raises an error naming it
    and what to pass instead.
    """
    if cache is None:
        return new_decoder_cache(config)
    if isinstance(cache, (tuple, list)):
        raise TypeError(
            f"Passing a tuple for `cache` is not supported anymore. Please use a `Cache` instance: {WHAT_TO_PASS}"
        )
    if not isinstance(cache, Cache):
        raise TypeError(f"cache: expected a transformers `Cache`, got {type(cache).__name__}; {WHAT_TO_PASS}")
    if isinstance(cache, EncoderDecoderCache):
        halves = (cache.self_attention_cache, cache.cross_attention_cache)
        if all(type(half) is SimpleAttnCache for half in halves):  # ours (every decoding step): nothing to check
            return cache
    else:
        halves = (cache, None)
    self_layers = converted_layers(config, halves[0], "decoder_self", "the self-attention cache", beam_invariant=False)
    cross_layers = None
    if halves[1] is not None:
        cross_layers = converted_layers(config, halves[1], "cross", "the cross-attention cache", beam_invariant=True)
    # Checked every half before changing any.
    for half, layers in zip(halves, (self_layers, cross_layers)):
        if layers is not None:
            half.layers = layers
    if isinstance(cache, EncoderDecoderCache):
        return cache
    wrapped = EncoderDecoderCache(cache, SimpleAttnCache(config.decoder_layers, beam_invariant=True))
    if getattr(cache, "_is_user_defined", False):
        wrapped._is_user_defined = True  # `generate` returns a cache the user passed
    return wrapped
