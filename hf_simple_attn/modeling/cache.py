"""Decoding caches that also hold value-only heads and absent sublayers.

Hard-coded and recurrent heads need no keys, so their sublayers cache keys with zero heads;
a decoder layer without self-attention caches empty tensors just to count positions. A
`DynamicLayer` reads its length from the keys and would report 0 for both; this layer reads it
from the values, and reorders keys and values together for beam search.
"""

from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache


class SimpleAttnCacheLayer(DynamicLayer):
    def get_seq_length(self) -> int:
        return self.values.shape[-2] if self.is_initialized else 0


class SimpleAttnCache(DynamicCache):
    """A `DynamicCache` of `SimpleAttnCacheLayer`s, one per decoder layer."""

    def __init__(self, num_layers: int):
        Cache.__init__(self, layers=[SimpleAttnCacheLayer() for _ in range(num_layers)])


def new_decoder_cache(config) -> EncoderDecoderCache:
    """The cache `generate` and the decoder create for a simple-attention seq2seq model."""
    return EncoderDecoderCache(SimpleAttnCache(config.decoder_layers), SimpleAttnCache(config.decoder_layers))
