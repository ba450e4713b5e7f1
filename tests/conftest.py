"""Shared test settings: offline, one thread, tiny models."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

TINY_MARIAN = dict(
    vocab_size=40,
    d_model=32,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=64,
    pad_token_id=39,
    decoder_start_token_id=39,
    eos_token_id=0,
    forced_eos_token_id=0,
    dropout=0.0,
)

WORDS = "the a cat dog sat on mat house is big small red blue green tree car runs fast slow and".split()


@pytest.fixture
def tiny_marian_kwargs():
    return dict(TINY_MARIAN)


def build_tokenizer():
    """A Marian-layout word-level fast tokenizer: </s>=0, <unk>=1, words, <pad> last (id 39)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"</s>": 0, "<unk>": 1}
    for word in WORDS:
        vocab[word] = len(vocab)
    for index in range(len(vocab), TINY_MARIAN["vocab_size"] - 1):
        vocab[f"w{index}"] = index
    vocab["<pad>"] = TINY_MARIAN["vocab_size"] - 1
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    backend.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tokenizer()
