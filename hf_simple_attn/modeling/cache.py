"""Decoding caches that also hold value-only heads, absent sublayers and per-step family state.

Hard-coded and recurrent heads need no keys, so their sublayers cache keys with zero heads;
a decoder layer without self-attention caches empty tensors just to count positions. A
`DynamicLayer` reads its length from the keys and would report 0 for both; this layer reads it
from the values. A family that carries a running quantity from one decoding step to the next
(the GMM synthesis network's means) keeps it in `states`, batch-first, so beam search reorders it
together with the keys and values.
"""

from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache


class SimpleAttnCacheLayer(DynamicLayer):
    def __init__(self):
        super().__init__()
        self.states = {}

    def get_seq_length(self) -> int:
        return self.values.shape[-2] if self.is_initialized else 0

    def reorder_cache(self, beam_idx):
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


class SimpleAttnCache(DynamicCache):
    """A `DynamicCache` of `SimpleAttnCacheLayer`s, one per decoder layer."""

    def __init__(self, num_layers: int):
        Cache.__init__(self, layers=[SimpleAttnCacheLayer() for _ in range(num_layers)])


def new_decoder_cache(config) -> EncoderDecoderCache:
    """The cache `generate` and the decoder create for a simple-attention seq2seq model."""
    return EncoderDecoderCache(SimpleAttnCache(config.decoder_layers), SimpleAttnCache(config.decoder_layers))
