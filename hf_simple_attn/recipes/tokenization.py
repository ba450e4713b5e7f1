"""A shared source/target subword vocabulary for models trained from scratch, in Marian's layout.

`train_tokenizer` learns byte-pair merges (`tokenizers` BPE) over whitespace-marked words
(`Metaspace`, as SentencePiece does), so `decode` gives back ordinary text. The ids follow
Marian's tokenizers, which `SimpleAttnMarianConfig` and the decoding code expect: `</s>` = 0,
`<unk>` = 1, `<pad>` = the last id (also the decoder start token). Every encoded sequence ends
with `</s>`; `tokenizer(sources, text_target=targets)` gives `labels` the same way.

`train_bert_tokenizer` does the same for BERT-style encoders: a lowercasing WordPiece vocabulary
with BERT's special tokens.
"""

from collections.abc import Iterable

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import BertTokenizer, PreTrainedTokenizerFast


EOS_TOKEN = "</s>"
UNK_TOKEN = "<unk>"
PAD_TOKEN = "<pad>"
# Characters kept as single-character tokens; rarer ones become <unk> (as in Marian's SentencePiece models).
MAX_ALPHABET = 1000
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    model_max_length: int = 256,
    min_frequency: int = 2,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a BPE vocabulary of at most `vocab_size` entries (`<pad>` included) on `texts`.

    Pass source and target texts together: the model shares one embedding matrix between
    encoder, decoder and output layer. `min_frequency` is the fewest occurrences a merge needs;
    a small corpus may give fewer than `vocab_size` entries (`len(tokenizer)` is the real size).
    `show_progress` draws the `tokenizers` trainer's progress bars (on stderr).
    The result saves and loads with `save_pretrained` / `AutoTokenizer.from_pretrained`.
    """
    if vocab_size < 3:
        raise ValueError(f"vocab_size: needs room for </s>, <unk> and <pad>, got {vocab_size}")
    backend = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # <pad> is added last, after training
        min_frequency=min_frequency,
        special_tokens=[EOS_TOKEN, UNK_TOKEN],
        limit_alphabet=MAX_ALPHABET,
        show_progress=show_progress,
    )
    backend.train_from_iterator(texts, trainer)
    backend.add_special_tokens([PAD_TOKEN])
    eos_id = backend.token_to_id(EOS_TOKEN)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=model_max_length,
    )


def train_bert_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 512, show_progress: bool = False
) -> BertTokenizer:
    """A lowercasing BERT WordPiece vocabulary ([PAD] = 0, `[CLS] a [SEP] b [SEP]`) trained on `texts`
    (`show_progress`: the trainer's progress bars)."""
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=BERT_SPECIAL_TOKENS, show_progress=show_progress
    )
    backend.train_from_iterator(texts, trainer)
    return BertTokenizer(vocab=backend.get_vocab(), model_max_length=model_max_length)


__all__ = ["BERT_SPECIAL_TOKENS", "EOS_TOKEN", "PAD_TOKEN", "UNK_TOKEN", "train_bert_tokenizer", "train_tokenizer"]
