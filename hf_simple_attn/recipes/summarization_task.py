"""The summarization task of `training/run_summarization.py`.

Its data options (`DataTrainingArguments`); its data (`load_raw_datasets`): `debian_summarization`, built offline
by `hf_simple_attn.data`, a Hub dataset (the text and summary columns of cnn_dailymail, xsum, ... are known), or
local csv/tsv/json/jsonl files read as text with every row checked (`hf_simple_attn.data.load_data_files`); the
pairs it trains on and scores (`text_summary_pairs`: a text and a summary both present); its tokenizer and model
(`tokenizer_for_run`, `summarization_model`, with γ estimated from the training data); its preprocessing
(`make_preprocess_function`) and ROUGE (`build_compute_metrics`, one sentence a line for ROUGE-Lsum).
"""

import logging
import re
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from datasets import DatasetDict, load_dataset

from ..data import build_debian_summarization, data_file_columns, data_files_by_split, load_data_files
from ..data.files import reference_file
from ..metrics import load_metric
from . import model_card
from .arguments import ModelArguments
from .model_setup import (
    build_seq2seq_model,
    compute_length_ratio,
    length_ratio_for_run,
    load_or_train_tokenizer,
    resumed_tokenizer,
)
from .run_steps import decode_token_ids


logger = logging.getLogger(__name__)

# Dataset name -> (text column, summary column).
summarization_name_mapping = {
    "cnn_dailymail": ("article", "highlights"),
    "xsum": ("document", "summary"),
    "samsum": ("dialogue", "summary"),
    "billsum": ("text", "summary"),
    "big_patent": ("description", "abstract"),
    "debian_summarization": ("document", "summary"),
}
# Corpora built offline by hf_simple_attn.data: name -> builder(cache_dir).
OFFLINE_DATASETS = {"debian_summarization": lambda cache_dir: build_debian_summarization(cache_dir=cache_dir)}
# Training examples at most used to measure the length ratio γ.
LENGTH_RATIO_SAMPLES = 10_000
# Where ROUGE-Lsum's one-sentence-a-line split breaks a summary.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class DataTrainingArguments:
    """What data to train and evaluate on, and how to prepare it."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A dataset name: debian_summarization (built offline from Debian package descriptions by "
            "hf_simple_attn.data) or a Hub dataset such as cnn_dailymail or xsum."
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The dataset configuration (cnn_dailymail: 3.0.0)."}
    )
    data_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the offline corpora keep their downloaded packages (default: $HF_SIMPLE_ATTN_DATA_CACHE "
            "or ~/.cache/hf_simple_attn/data)."
        },
    )
    text_column: str | None = field(
        default=None, metadata={"help": "The column with the full texts (default: known per dataset, else the first)."}
    )
    summary_column: str | None = field(
        default=None, metadata={"help": "The column with the summaries (default: known per dataset, else the second)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "Training data: csv, tsv, json or jsonl."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation data, same format."})
    test_file: str | None = field(default=None, metadata={"help": "Test data, same format."})
    overwrite_cache: bool = field(default=False, metadata={"help": "Overwrite the cached preprocessed datasets."})
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Number of processes for the preprocessing."}
    )
    max_source_length: int = field(
        default=1024, metadata={"help": "The longest tokenized text; longer ones are truncated."}
    )
    max_target_length: int = field(
        default=128, metadata={"help": "The longest tokenized training summary; longer ones are truncated."}
    )
    val_max_target_length: int | None = field(
        default=None,
        metadata={
            "help": "The longest tokenized summary for evaluation and prediction, also the generation length "
            "(default: max_target_length)."
        },
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every input to the maximum length; by default batches are padded to their longest."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only this many evaluation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only this many test examples."})
    num_beams: int | None = field(
        default=None,
        metadata={"help": "Beams for evaluation and prediction (default: --generation_num_beams, else the model's)."},
    )
    ignore_pad_token_for_loss: bool = field(
        default=True, metadata={"help": "Leave padded label tokens out of the loss."}
    )
    source_prefix: str | None = field(
        default="", metadata={"help": "A text put before every source text (e.g. 'summarize: ')."}
    )
    lang: str | None = field(
        default=None,
        metadata={
            "help": "Language id of the texts and summaries (default: en): the model card's language, and the "
            "src_lang/tgt_lang of a multilingual tokenizer (mBART, ...), which needs it."
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
        if self.dataset_name is None:
            data_files_by_split(self.train_file, self.validation_file, self.test_file)
        if self.val_max_target_length is None:
            self.val_max_target_length = self.max_target_length


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments) -> DatasetDict:
    """The DatasetDict of the named dataset (offline or Hub), or the text and summary columns of the local
    files with every row checked (`hf_simple_attn.data.load_data_files`)."""
    if data_args.dataset_name in OFFLINE_DATASETS:
        return OFFLINE_DATASETS[data_args.dataset_name](data_args.data_cache_dir)
    if data_args.dataset_name is not None:
        return load_dataset(
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            token=model_args.token,
        )
    data_files = data_files_by_split(data_args.train_file, data_args.validation_file, data_args.test_file)
    columns = data_file_columns(reference_file(data_files))
    return load_data_files(data_files, text_and_summary_columns(data_args, columns), cache_dir=model_args.cache_dir)


def text_and_summary_columns(data_args: DataTrainingArguments, column_names: list[str]) -> tuple[str, str]:
    """`--text_column` / `--summary_column`, else the dataset's known columns, else the first two."""
    known = summarization_name_mapping.get(data_args.dataset_name or "") or [*column_names, None, None]
    text_column = data_args.text_column or known[0]
    summary_column = data_args.summary_column or known[1]
    for option, column in (("--text_column", text_column), ("--summary_column", summary_column)):
        if column not in column_names:
            raise ValueError(
                f"{option}: {column!r} is not a column of the dataset; columns: {', '.join(column_names)}"
            )
    return text_column, summary_column


def text_summary_pairs(texts: list, summaries: list) -> list[tuple[str, str]]:
    """The (text, summary) pairs that have both: the examples a run trains on and scores, in order."""
    return [(text, summary) for text, summary in zip(texts, summaries) if text and summary]


def source_and_target_texts(dataset, data_args: DataTrainingArguments) -> tuple[list[str], list[str]]:
    """The texts and summaries of a raw split that the run scores (`text_summary_pairs`), in order."""
    text_column, summary_column = text_and_summary_columns(data_args, dataset.column_names)
    pairs = text_summary_pairs(dataset[text_column], dataset[summary_column])
    return [text for text, _ in pairs], [summary for _, summary in pairs]


def tokenizer_for_run(model_args, size_args, data_args, raw_train, columns: tuple[str, str], checkpoint, progress):
    """The pretrained tokenizer, the one saved with the checkpoint a from-scratch run resumes, or one trained on
    the training texts and summaries (`columns`: the text and summary columns)."""
    tokenizer = resumed_tokenizer(model_args, checkpoint)
    if tokenizer is not None:
        return tokenizer
    return load_or_train_tokenizer(
        model_args,
        size_args,
        lambda: (text for column in columns for text in raw_train[column] if text),
        model_max_length=max(data_args.max_source_length, data_args.val_max_target_length),
        show_progress=progress,
    )


def set_language(tokenizer, data_args: DataTrainingArguments) -> str:
    """The language of the texts (--lang, default en), set as a multilingual tokenizer's source and target
    language; a warning when ROUGE cannot score it."""
    language = data_args.lang or "en"
    if hasattr(tokenizer, "src_lang"):  # a multilingual tokenizer (mBART, M2M100, ...)
        if data_args.lang is None:
            raise ValueError(f"--lang: {type(tokenizer).__name__} is a multilingual tokenizer; give the language")
        tokenizer.src_lang = tokenizer.tgt_lang = data_args.lang
    if language != "en":
        logger.warning(
            "--lang %s: ROUGE's tokenizer keeps only ASCII letters and digits; scores of summaries in another "
            "language than English are not meaningful",
            language,
        )
    return language


def summarization_model(
    model_args, attention_args, size_args, data_args, tokenizer, raw_train, columns: tuple[str, str], checkpoint
):
    """The model, with γ for hard-coded cross attention: `--length_ratio`, else that of the `checkpoint` this run
    resumes or the saved model it continues, else estimated from the training data (none when not training):
    `length_ratio_for_run`."""
    prefix = data_args.source_prefix or ""
    estimate = None if raw_train is None else partial(estimate_length_ratio, raw_train, columns, prefix, tokenizer)
    length_ratio = length_ratio_for_run(attention_args, model_args, checkpoint, estimate)
    model = build_seq2seq_model(model_args, attention_args, size_args, tokenizer, length_ratio)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    if model.config.decoder_start_token_id is None:
        raise ValueError("Make sure that `config.decoder_start_token_id` is correctly defined")
    return model


def estimate_length_ratio(raw_train, columns: tuple[str, str], prefix: str, tokenizer) -> float:
    """γ over the first LENGTH_RATIO_SAMPLES training pairs that have both a text and a summary."""
    text_column, summary_column = columns
    sample = raw_train.select(range(min(len(raw_train), LENGTH_RATIO_SAMPLES)))
    sample = sample.filter(lambda example: bool(example[text_column]) and bool(example[summary_column]))
    return compute_length_ratio([prefix + text for text in sample[text_column]], sample[summary_column], tokenizer)


def sequence_lengths(data_args: DataTrainingArguments, model) -> tuple[int, int, int]:
    """--max_source_length, --max_target_length and --val_max_target_length, cut to the model's longest input."""
    max_positions = model.config.max_position_embeddings
    max_source_length = min(data_args.max_source_length, max_positions)
    max_target_length = min(data_args.max_target_length, max_positions)
    val_max_target_length = min(data_args.val_max_target_length, max_positions)
    if max_source_length < data_args.max_source_length:
        logger.warning(
            "--max_source_length %d is longer than the model accepts; using %d",
            data_args.max_source_length,
            max_source_length,
        )
    return max_source_length, max_target_length, val_max_target_length


def make_preprocess_function(tokenizer, data_args, columns: tuple[str, str], max_source_length: int):
    """Tokenize the pairs of a batch that have both a text and a summary into input_ids, attention_mask and labels."""
    text_column, summary_column = columns
    prefix = data_args.source_prefix or ""
    padding = "max_length" if data_args.pad_to_max_length else False

    def preprocess_function(examples, target_length: int):
        pairs = text_summary_pairs(examples[text_column], examples[summary_column])
        inputs = [prefix + text for text, _ in pairs]
        model_inputs = tokenizer(inputs, max_length=max_source_length, padding=padding, truncation=True)
        labels = tokenizer(
            text_target=[summary for _, summary in pairs], max_length=target_length, padding=padding, truncation=True
        )
        label_ids = labels["input_ids"]
        if padding == "max_length" and data_args.ignore_pad_token_for_loss:
            label_ids = [[token if token != tokenizer.pad_token_id else -100 for token in ids] for ids in label_ids]
        model_inputs["labels"] = label_ids
        return model_inputs

    return preprocess_function


def set_generation_config(model, data_args, training_args, val_max_target_length: int) -> None:
    """The generation settings evaluate and predict use, saved with the checkpoint so that later generation decodes
    the same way: --generation_max_length (else the evaluation target length), --num_beams (else
    --generation_num_beams)."""
    model.generation_config.max_length = training_args.generation_max_length or val_max_target_length
    num_beams = data_args.num_beams if data_args.num_beams is not None else training_args.generation_num_beams
    if num_beams is not None:
        model.generation_config.num_beams = num_beams


def split_sentences(text: str) -> str:
    """One sentence per line (a split after . ! ?), which ROUGE-Lsum needs."""
    return "\n".join(sentence for sentence in SENTENCE_END.split(text.strip()) if sentence)


def build_compute_metrics(tokenizer):
    """`compute_metrics` for the Trainer: ROUGE (with stemming, one sentence a line) and the generated length."""
    metric = load_metric("rouge")

    def compute_metrics(eval_preds) -> dict[str, float]:
        predictions, labels = eval_preds
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        decoded_predictions = [split_sentences(text) for text in decode_token_ids(tokenizer, predictions)]
        decoded_labels = [split_sentences(text) for text in decode_token_ids(tokenizer, labels)]
        result = metric.compute(predictions=decoded_predictions, references=decoded_labels, use_stemmer=True)
        result = {name: round(value * 100, 4) for name, value in result.items()}
        predictions = np.where(predictions != -100, predictions, tokenizer.pad_token_id)
        result["gen_len"] = float(np.mean([np.count_nonzero(ids != tokenizer.pad_token_id) for ids in predictions]))
        return result

    return compute_metrics


def dataset_label(data_args: DataTrainingArguments) -> str:
    """How the model card names the data (`model_card.dataset_label`)."""
    files = (data_args.train_file, data_args.validation_file, data_args.test_file)
    return model_card.dataset_label(data_args.dataset_name, OFFLINE_DATASETS, data_args.dataset_config_name, files)


__all__ = [
    "OFFLINE_DATASETS",
    "DataTrainingArguments",
    "build_compute_metrics",
    "dataset_label",
    "load_raw_datasets",
    "make_preprocess_function",
    "sequence_lengths",
    "set_generation_config",
    "set_language",
    "source_and_target_texts",
    "split_sentences",
    "summarization_model",
    "text_and_summary_columns",
    "tokenizer_for_run",
]
