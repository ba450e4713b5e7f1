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
"""

from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache


class SimpleAttnCacheLayer(DynamicLayer):
    """beam_invariant: the keys and values are the same for all beams of a sentence (cross attention),
    so `reorder_cache` keeps them as they are and reorders only `states`."""

    def __init__(self, beam_invariant: bool = False):
        super().__init__()
        self.beam_invariant = beam_invariant
        self.states = {}
        self.length = 0  # positions seen, including those dropped by `keep_last`

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        self.length += value_states.shape[-2]
        return keys, values

    def keep_last(self, positions: int) -> None:
        """Drop all but the last `positions` cached positions (the length still counts them)."""
        kept = self.values.shape[-2]
        if kept > positions:
            self.keys = self.keys[..., kept - positions :, :]
            self.values = self.values[..., kept - positions :, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if not self.is_initialized or tokens_to_remove == 0:
            return
        if self.length > self.values.shape[-2]:
            raise ValueError("a cache layer that dropped early positions (`keep_last`) cannot be cropped")
        super().crop(tokens_to_remove)
        self.length = self.values.shape[-2]

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


class SimpleAttnCache(DynamicCache):
    """A `DynamicCache` of `SimpleAttnCacheLayer`s, one per decoder layer."""

    def __init__(self, num_layers: int, beam_invariant: bool = False):
        Cache.__init__(self, layers=[SimpleAttnCacheLayer(beam_invariant) for _ in range(num_layers)])


def new_decoder_cache(config) -> EncoderDecoderCache:
    """The cache `generate` and the decoder create for a simple-attention seq2seq model."""
    return EncoderDecoderCache(
        SimpleAttnCache(config.decoder_layers), SimpleAttnCache(config.decoder_layers, beam_invariant=True)
    )
