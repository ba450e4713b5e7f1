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

The data options, loading, preprocessing and ROUGE are in `hf_simple_attn.recipes.summarization_task`.
"""

import logging
import os

from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments, set_seed

from hf_simple_attn.recipes.arguments import (
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
from hf_simple_attn.recipes.hub import publish_checkpoint
from hf_simple_attn.recipes.model_setup import check_trained_from_scratch
from hf_simple_attn.recipes.run_steps import decode_token_ids, select_splits, train
from hf_simple_attn.recipes.sampling import LengthGroupedSeq2SeqTrainer
from hf_simple_attn.recipes.summarization_task import (
    DataTrainingArguments,
    build_compute_metrics,
    dataset_label,
    load_raw_datasets,
    make_preprocess_function,
    sequence_lengths,
    set_generation_config,
    set_language,
    summarization_model,
    text_and_summary_columns,
    tokenizer_for_run,
)


logger = logging.getLogger(__name__)


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
    tokenizer = tokenizer_for_run(
        model_args, size_args, data_args, raw_splits["train"], columns, checkpoint, show_progress(training_args)
    )
    language = set_language(tokenizer, data_args)
    model = summarization_model(
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
        dataset_name=dataset_label(data_args),
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


if __name__ == "__main__":
    main()
