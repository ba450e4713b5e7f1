#!/usr/bin/env python
"""Train a SimpleAttnMarian summarizer with `Seq2SeqTrainer`, scored with ROUGE on generated summaries.

The options follow transformers' examples/pytorch/summarization/run_summarization.py; on top of
them the model takes an attention layout (`--attention_preset`, `--attention_layout`,
`--length_ratio`) and either starts from a pretrained checkpoint (`--model_name_or_path`: a Marian
model converted to the layout, or a saved hf_simple_attn model) or is trained from scratch
(`--d_model`, `--encoder_layers`, ...) with a subword vocabulary trained on the training documents
and summaries.

Data, one of:
- `--dataset_name debian_summarization`: English Debian package descriptions -> their one-line
  synopsis, built offline by `hf_simple_attn.data.build_debian_summarization`;
- `--dataset_name` of a Hub dataset, e.g. `cnn_dailymail --dataset_config_name 3.0.0` or `xsum`
  (their text/summary columns are known; others need `--text_column` / `--summary_column`);
- `--train_file` / `--validation_file` / `--test_file`: csv, tsv, json or jsonl, read as text with
  every row checked (`hf_simple_attn.data.load_data_files`; errors name file, line and field).

    python training/run_summarization.py --dataset_name debian_summarization --attention_preset hc-sa \
        --do_train --do_eval --predict_with_generate --output_dir out/debian-hc-sa

ROUGE comes from `hf_simple_attn.metrics.load_metric("rouge")` (no Hub download). Its default
tokenizer keeps only ASCII letters and digits, so it suits English summaries (`--lang`, default en,
names the language: in the model card, for a multilingual tokenizer's `src_lang`/`tgt_lang`, and
with a warning about ROUGE when it is not English). Results go to
`output_dir` like the example's (`eval_results.json`, `generated_predictions.txt`, ...), with a
model card (`README.md`); `--push_to_hub` uploads the folder at the end.
"""

import logging
import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
from datasets import DatasetDict, load_dataset
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments, set_seed

from hf_simple_attn.data import build_debian_summarization, data_file_columns, data_files_by_split, load_data_files
from hf_simple_attn.data.files import reference_file
from hf_simple_attn.metrics import load_metric
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
    build_seq2seq_model,
    check_trained_from_scratch,
    compute_length_ratio,
    length_ratio_for_run,
    load_or_train_tokenizer,
    resumed_tokenizer,
)
from hf_simple_attn.training.run_steps import decode_token_ids, select_splits, train
from hf_simple_attn.training.sampling import LengthGroupedSeq2SeqTrainer


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


def split_sentences(text: str) -> str:
    """One sentence per line (a split after . ! ?), which ROUGE-Lsum needs."""
    return "\n".join(sentence for sentence in SENTENCE_END.split(text.strip()) if sentence)


def dataset_description(data_args: DataTrainingArguments) -> str:
    """How the model card names the data: a Hub id when it is one, else where the data came from."""
    if data_args.dataset_name in OFFLINE_DATASETS:
        return f"hf_simple_attn.data:{data_args.dataset_name}"
    if data_args.dataset_name is not None:
        return data_args.dataset_name
    files = (data_args.train_file, data_args.validation_file, data_args.test_file)
    return "local files: " + ", ".join(Path(path).name for path in files if path)


def training_summary(trainer, data_args, model_args, attention_args, generation_kwargs: dict) -> dict:
    """The settings and counts shown in the model card's Training table."""
    args, tokenizer = trainer.args, trainer.processing_class
    return {
        "dataset configuration": data_args.dataset_config_name or "-",
        "training examples": len(trainer.train_dataset),
        "steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0.0, 2),
        "batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "learning rate": args.learning_rate,
        "label smoothing": args.label_smoothing_factor,
        "seed": args.seed,
        "tokenizer": model_args.tokenizer_name
        or model_args.model_name_or_path
        or f"BPE trained on the training data ({len(tokenizer):,} entries)",
        "max source / target length": f"{data_args.max_source_length} / {data_args.max_target_length}",
        "source prefix": repr(data_args.source_prefix) if data_args.source_prefix else "none",
        "generation": ", ".join(f"{key} {value}" for key, value in generation_kwargs.items()),
        "length ratio γ": "given" if attention_args.length_ratio is not None else "computed from the training data",
    }


# The option groups of the command line, in the order `main` receives them.
SCRIPT_ARGUMENTS = (
    ModelArguments,
    AttentionArguments,
    ModelSizeArguments,
    DataTrainingArguments,
    Seq2SeqTrainingArguments,
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

    raw_datasets = load_raw_datasets(data_args, model_args)
    reference_split = raw_datasets["train"] if "train" in raw_datasets else next(iter(raw_datasets.values()))
    column_names = reference_split.column_names
    columns = text_and_summary_columns(data_args, column_names)
    raw_splits = select_splits(raw_datasets, data_args, training_args)
    check_trained_from_scratch(model_args, training_args.do_train)
    tokenizer = build_tokenizer(
        model_args, size_args, data_args, raw_splits["train"], columns, checkpoint, show_progress(training_args)
    )
    language = set_language(tokenizer, data_args)
    model = build_model(
        model_args, attention_args, size_args, data_args, tokenizer, raw_splits["train"], columns, checkpoint
    )
    check_checkpoint_fits(checkpoint, model.config)
    lengths = sequence_lengths(data_args, model)
    tokenized = preprocess(raw_splits, tokenizer, data_args, training_args, columns, column_names, lengths)
    set_generation_config(model, data_args, training_args, lengths[2])
    trainer = make_trainer(model, tokenizer, training_args, data_args, tokenized)

    all_metrics = {}
    if training_args.do_train:
        all_metrics.update(train(trainer, checkpoint))
    # What evaluate and predict generate with: the generation config the checkpoint is saved with.
    generation_config = model.generation_config
    generation_kwargs = {"max_length": generation_config.max_length, "num_beams": generation_config.num_beams}
    if training_args.do_eval:
        all_metrics.update(evaluate(trainer, generation_kwargs))
    if training_args.do_predict:
        all_metrics.update(predict(trainer, tokenized["test"], generation_kwargs))
    if training_args.do_train and trainer.is_world_process_zero():
        summary = training_summary(trainer, data_args, model_args, attention_args, generation_kwargs)
        publish(trainer, model_args, data_args, language, summary, all_metrics, push_to_hub, hub_token)
    return all_metrics


def text_summary_pairs(texts: list, summaries: list) -> list[tuple[str, str]]:
    """The (text, summary) pairs that have both: the examples a run trains on and scores, in order."""
    return [(text, summary) for text, summary in zip(texts, summaries) if text and summary]


def source_and_target_texts(dataset, data_args: DataTrainingArguments) -> tuple[list[str], list[str]]:
    """The texts and summaries of a raw split that the run scores (`text_summary_pairs`), in order."""
    text_column, summary_column = text_and_summary_columns(data_args, dataset.column_names)
    pairs = text_summary_pairs(dataset[text_column], dataset[summary_column])
    return [text for text, _ in pairs], [summary for _, summary in pairs]


def build_tokenizer(model_args, size_args, data_args, raw_train, columns: tuple[str, str], checkpoint, progress):
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


def build_model(
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


def preprocess(raw_splits: dict, tokenizer, data_args, training_args, columns, column_names: list[str], lengths):
    """Each split used as model inputs and labels (None for one not used); `lengths` as `sequence_lengths` gives."""
    max_source_length, max_target_length, val_max_target_length = lengths
    preprocess_function = make_preprocess_function(tokenizer, data_args, columns, max_source_length)
    tokenized = {}
    for split, dataset in raw_splits.items():
        if dataset is None:
            tokenized[split] = None
            continue
        with training_args.main_process_first(desc=f"{split} dataset map pre-processing"):
            tokenized[split] = dataset.map(
                preprocess_function,
                fn_kwargs={"target_length": max_target_length if split == "train" else val_max_target_length},
                batched=True,
                num_proc=data_args.preprocessing_num_workers,
                remove_columns=column_names,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Running tokenizer on the {split} dataset",
            )
    return tokenized


def set_generation_config(model, data_args, training_args, val_max_target_length: int) -> None:
    """The generation settings evaluate and predict use, saved with the checkpoint so that later generation decodes
    the same way: --generation_max_length (else the evaluation target length), --num_beams (else
    --generation_num_beams)."""
    model.generation_config.max_length = training_args.generation_max_length or val_max_target_length
    num_beams = data_args.num_beams if data_args.num_beams is not None else training_args.generation_num_beams
    if num_beams is not None:
        model.generation_config.num_beams = num_beams


def make_trainer(model, tokenizer, training_args, data_args: DataTrainingArguments, tokenized: dict):
    """The Seq2SeqTrainer of the run; with --predict_with_generate it scores generated summaries with ROUGE."""
    data_collator = DataCollatorForSeq2Seq(
        tokenizer,
        model=model,
        label_pad_token_id=-100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=8 if training_args.fp16 else None,
    )
    return LengthGroupedSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=build_compute_metrics(tokenizer) if training_args.predict_with_generate else None,
    )


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


def evaluate(trainer, generation_kwargs: dict) -> dict:
    """Scores of the validation split (eval_results.json)."""
    logger.info("*** Evaluate ***")
    metrics = trainer.evaluate(metric_key_prefix="eval", **generation_kwargs)
    metrics["eval_samples"] = len(trainer.eval_dataset)
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    return metrics


def predict(trainer, test_dataset, generation_kwargs: dict) -> dict:
    """Scores of the test split (predict_results.json) and, when generating, its summaries
    (generated_predictions.txt)."""
    logger.info("*** Predict ***")
    output = trainer.predict(test_dataset, metric_key_prefix="predict", **generation_kwargs)
    metrics = output.metrics
    metrics["predict_samples"] = len(test_dataset)
    trainer.log_metrics("predict", metrics)
    trainer.save_metrics("predict", metrics)
    if trainer.is_world_process_zero() and trainer.args.predict_with_generate:
        predictions = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        output_prediction_file = os.path.join(trainer.args.output_dir, "generated_predictions.txt")
        with open(output_prediction_file, "w", encoding="utf-8") as writer:
            summaries = decode_token_ids(trainer.processing_class, predictions)
            writer.write("\n".join(text.replace("\n", " ") for text in summaries) + "\n")
    return metrics


def publish(trainer, model_args, data_args, language: str, summary: dict, metrics: dict, push_to_hub, hub_token):
    """The model card of the trained checkpoint, then (--push_to_hub) one upload of the finished folder."""
    args = trainer.args
    publish_checkpoint(
        args.output_dir,
        trainer.model,
        task="summarization",
        dataset_name=dataset_description(data_args),
        dataset_config=data_args.dataset_config_name,
        metrics=metrics,
        language=[language],
        base_model=model_args.model_name_or_path,
        training_summary=summary,
        push_to_hub=push_to_hub,
        hub_model_id=args.hub_model_id,
        hub_token=hub_token,
        hub_private_repo=args.hub_private_repo,
    )


if __name__ == "__main__":
    main()
