"""Named model sizes, in one vocabulary for both architectures, and the config fields they give.

`opus-mt` is the size of the Helsinki-NLP opus-mt Marian models (74M parameters with their shared
58101-token vocabulary) and `bert-base` that of BERT-base, the papers' sizes; `small` is the default of
a model trained from scratch (`arguments.ModelSizeArguments`); `opus-mt-vocab8k` and `tiny` are
benchmark sizes. The CLI (`hf-simple-attn describe --size`) and `benchmarks/` pick their sizes from here.
"""

# d_model, layers per stack, attention heads per layer, feed-forward width, vocabulary.
SIZES = {
    "opus-mt": dict(d_model=512, layers=6, heads=8, ffn_dim=2048, vocab_size=58101),
    "opus-mt-vocab8k": dict(d_model=512, layers=6, heads=8, ffn_dim=2048, vocab_size=8000),
    "bert-base": dict(d_model=768, layers=12, heads=12, ffn_dim=3072, vocab_size=30522),
    "small": dict(d_model=256, layers=3, heads=4, ffn_dim=1024, vocab_size=8000),
    "tiny": dict(d_model=32, layers=2, heads=4, ffn_dim=64, vocab_size=100),
}


def marian_size_fields(d_model: int, encoder_layers: int, decoder_layers: int, heads: int, ffn_dim: int) -> dict:
    """The size fields of a Marian-style config (both stacks with `heads` heads and `ffn_dim` feed-forward)."""
    return dict(
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
    )


def bert_size_fields(d_model: int, layers: int, heads: int, ffn_dim: int) -> dict:
    """The size fields of a BERT-style config."""
    return dict(hidden_size=d_model, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn_dim)


def marian_size(name: str) -> dict:
    """Marian config fields of size `name`: its size, vocabulary, and `<pad>` (also the decoder start) last,
    as in opus-mt's vocabularies."""
    size = SIZES[name]
    vocab_size = size["vocab_size"]
    return marian_size_fields(size["d_model"], size["layers"], size["layers"], size["heads"], size["ffn_dim"]) | dict(
        vocab_size=vocab_size, pad_token_id=vocab_size - 1, decoder_start_token_id=vocab_size - 1
    )


def bert_size(name: str) -> dict:
    """BERT config fields of size `name`: its size and vocabulary."""
    size = SIZES[name]
    return bert_size_fields(size["d_model"], size["layers"], size["heads"], size["ffn_dim"]) | dict(
        vocab_size=size["vocab_size"]
    )


__all__ = ["SIZES", "bert_size", "bert_size_fields", "marian_size", "marian_size_fields"]
