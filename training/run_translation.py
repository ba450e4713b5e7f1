#!/usr/bin/env python
"""Train and evaluate a translation model with any attention layout, using `Seq2SeqTrainer`.

Modelled on transformers' `examples/pytorch/translation/run_translation.py`: the options it shares
with that script have the same names and meaning. Added here:

- the model: `--attention_preset` / `--attention_layout` pick the attention; without
  `--model_name_or_path` the model is trained from scratch at the size given by `--d_model`,
  `--encoder_layers`, `--decoder_layers`, `--attention_heads`, `--ffn_dim`, with a BPE vocabulary
  of `--vocab_size` trained on the training data; with it, a Marian checkpoint is converted to
  the layout (`hf_simple_attn.recipes.convert.convert_marian_checkpoint`). γ (`--length_ratio`) is
  computed from the training data and stored in the config when not given.
- the data: `--dataset_name` also takes the offline corpora of `hf_simple_attn.data`:
  `embedded` (the committed LibreOffice help en-de corpus), `libreoffice_help`,
  `debian_descriptions`, `bible_en_es`, with `--dataset_config_name` as the target language.
  Hub datasets (`wmt16`, `iwslt2017`, ...) load through `datasets.load_dataset` as in the
  original; local files may be json/jsonl (`{"translation": {"en": ..., "de": ...}}` or one
  column per language), csv or tsv (a header row naming the language columns), read as text
  with every row checked (`hf_simple_attn.data.load_data_files`; errors name file, line and field).
- batching: `--train_sampling_strategy group_by_length` groups sentences of similar length and
  shuffles the batches, and evaluates in dataset order (`hf_simple_attn.recipes.sampling`).
- the results: BLEU and chrF (SacreBLEU, with their signatures) in `eval_results.json` /
  `predict_results.json`, a model card (`README.md`) in `--output_dir`, and `--push_to_hub`
  uploads the final checkpoint, its code and card once at the end (`hf_simple_attn.recipes.hub`).

The data options, loading, preprocessing and scoring are shared with `run_translation_no_trainer.py`
(`hf_simple_attn.recipes.translation_task`).

    python training/run_translation.py --dataset_name embedded --attention_preset hc-sa \
        --do_train --do_eval --predict_with_generate --max_steps 400 --output_dir runs/hc-sa
"""

import logging
from pathlib import Path

import numpy as np
from transformers import DataCollatorForSeq2Seq, SchedulerType, Seq2SeqTrainingArguments, set_seed

import hf_simple_attn  # noqa: F401  (registers the model classes for saving with their code)
from hf_simple_attn.deploy.distill import DistillationArguments, distill_training_split, distillation_summary
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
from hf_simple_attn.recipes.translation_task import (
    TOKENIZING_DESCRIPTIONS,
    DataTrainingArguments,
    TranslationScorer,
    dataset_label,
    load_raw_datasets,
    source_and_target_texts,
    tokenize_translations,
    tokenizer_for_run,
    translation_model,
)


logger = logging.getLogger(__name__)


# The option groups of the command line, in the order `main` receives them.
SCRIPT_ARGUMENTS = (
    ModelArguments,
    DataTrainingArguments,
    DistillationArguments,
    AttentionArguments,
    ModelSizeArguments,
    Seq2SeqTrainingArguments,
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the script on `argv` (default: the command line); returns every metric it wrote."""
    model_args, data_args, distill_args, attention_args, size_args, training_args = parse_script_arguments(
        SCRIPT_ARGUMENTS, argv
    )
    # The Hub token stays in this variable: training_args is saved with the model and every checkpoint.
    hub_token, training_args.hub_token = training_args.hub_token, None
    setup_logging(logger, training_args)
    logger.warning(
        f"Process rank: {training_args.process_index}, device: {training_args.device}, n_gpu: {training_args.n_gpu}, "
        f"distributed training: {training_args.parallel_mode.value == 'distributed'}, "
        f"16-bits training: {training_args.fp16}"
    )
    push_to_hub = prepare_hub_push(training_args, hub_token)
    # An interrupted run in output_dir is resumed (with the tokenizer it saved).
    checkpoint = checkpoint_to_resume(training_args)
    set_seed(training_args.seed)

    raw_splits = select_splits(load_raw_datasets(data_args, model_args), data_args, training_args)
    check_trained_from_scratch(model_args, training_args.do_train)
    if distill_args.distill_from is not None and raw_splits["train"] is not None:
        with training_args.main_process_first(desc="translating the training sources with the teacher"):
            raw_splits["train"] = distill_training_split(
                raw_splits["train"], distill_args, data_args, model_args, show_progress(training_args)
            )
    tokenizer = tokenizer_for_run(
        model_args, size_args, data_args, raw_splits["train"], checkpoint, show_progress(training_args)
    )
    model = translation_model(
        model_args,
        attention_args,
        size_args,
        data_args,
        tokenizer,
        raw_splits["train"],
        training_args.seed,
        checkpoint,
    )
    check_checkpoint_fits(checkpoint, model.config)
    if model.config.decoder_start_token_id is None:
        raise ValueError("Make sure that `config.decoder_start_token_id` is correctly defined")
    tokenized = tokenize_splits(raw_splits, tokenizer, data_args, training_args)
    scorer = None
    if training_args.predict_with_generate and (training_args.do_eval or training_args.do_predict):
        scorer = TranslationScorer()
    trainer = make_trainer(model, tokenizer, training_args, data_args, tokenized, raw_splits["validation"], scorer)

    all_metrics = {}
    if training_args.do_train:
        all_metrics.update(train(trainer, checkpoint))
    if training_args.do_eval:
        all_metrics.update(evaluate(trainer, data_args, scorer))
    if training_args.do_predict:
        all_metrics.update(predict(trainer, data_args, scorer, raw_splits["test"], tokenized["test"]))
    if training_args.do_train and trainer.is_world_process_zero():
        summary = training_summary(trainer, data_args, model_args, attention_args, scorer)
        summary.update(distillation_summary(distill_args))
        publish(trainer, model_args, data_args, summary, all_metrics, push_to_hub, hub_token)
    return all_metrics


def tokenize_splits(raw_splits: dict, tokenizer, data_args: DataTrainingArguments, training_args) -> dict:
    """Each split used as model inputs and labels (None for one not used)."""
    tokenized = dict.fromkeys(raw_splits)
    for split, dataset in raw_splits.items():
        if dataset is not None:
            with training_args.main_process_first(desc=TOKENIZING_DESCRIPTIONS[split]):
                tokenized[split] = tokenize_translations(dataset, tokenizer, data_args, split)
    return tokenized


def make_trainer(model, tokenizer, training_args, data_args, tokenized: dict, raw_validation, scorer):
    """The Seq2SeqTrainer of the run; with a scorer, evaluation scores the validation split's raw target texts."""
    data_collator = DataCollatorForSeq2Seq(
        tokenizer,
        model=model,
        label_pad_token_id=-100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=8 if training_args.fp16 else None,
    )
    compute_metrics = None
    if scorer is not None and raw_validation is not None:
        compute_metrics = metrics_against(scorer, tokenizer, source_and_target_texts(raw_validation, data_args)[1])
    return LengthGroupedSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
    )


def metrics_against(scorer: TranslationScorer, tokenizer, references: list[str]):
    """compute_metrics for one split: its predictions (in dataset order) against its raw target texts."""

    def compute_metrics(eval_preds):
        preds = eval_preds.predictions[0] if isinstance(eval_preds.predictions, tuple) else eval_preds.predictions
        result = scorer(decode_token_ids(tokenizer, preds), references)
        result["gen_len"] = round(float(np.mean(np.count_nonzero(preds != tokenizer.pad_token_id, axis=1))), 4)
        return result

    return compute_metrics


def generation_settings(data_args: DataTrainingArguments) -> dict:
    return {"max_length": data_args.val_max_target_length, "num_beams": data_args.num_beams}


def evaluate(trainer, data_args: DataTrainingArguments, scorer: TranslationScorer | None) -> dict:
    """Scores of the validation split (eval_results.json), with the SacreBLEU signatures."""
    logger.info("*** Evaluate ***")
    metrics = trainer.evaluate(metric_key_prefix="eval", **generation_settings(data_args))
    metrics["eval_samples"] = len(trainer.eval_dataset)
    if scorer is not None:
        metrics.update({f"eval_{key}": value for key, value in scorer.signatures.items()})
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    return metrics


def predict(trainer, data_args: DataTrainingArguments, scorer: TranslationScorer | None, raw_test, test_dataset):
    """Scores of the test split (predict_results.json) and, when generating, its translations
    (generated_predictions.txt)."""
    logger.info("*** Predict ***")
    tokenizer = trainer.processing_class
    sources, references = source_and_target_texts(raw_test, data_args)
    if scorer is not None:
        trainer.compute_metrics = metrics_against(scorer, tokenizer, references)
    predict_results = trainer.predict(test_dataset, metric_key_prefix="predict", **generation_settings(data_args))
    metrics = dict(predict_results.metrics, predict_samples=len(test_dataset))
    if scorer is not None:
        metrics.update({f"predict_{key}": value for key, value in scorer.signatures.items()})
    trainer.log_metrics("predict", metrics)
    trainer.save_metrics("predict", metrics)
    if trainer.is_world_process_zero() and trainer.args.predict_with_generate:
        predictions = decode_token_ids(tokenizer, predict_results.predictions)
        Path(trainer.args.output_dir, "generated_predictions.txt").write_text(
            "\n".join(predictions) + "\n", encoding="utf-8"
        )
        for source, reference, prediction in list(zip(sources, references, predictions))[:3]:
            logger.info(f"source:     {source}\nprediction: {prediction}\nreference:  {reference}")
    return metrics


def publish(trainer, model_args, data_args, summary: dict, metrics: dict, push_to_hub: bool, hub_token):
    """The model card of the trained checkpoint (`summary`: its Training table), then (--push_to_hub) one upload of
    the finished folder."""
    args = trainer.args
    publish_checkpoint(
        args.output_dir,
        trainer.model,
        task="translation",
        dataset_name=dataset_label(data_args),
        dataset_config=data_args.dataset_config_name,
        metrics=metrics,
        language=[data_args.source_lang, data_args.target_lang],
        base_model=model_args.model_name_or_path,
        training_summary=summary,
        push_to_hub=push_to_hub,
        hub_model_id=args.hub_model_id,
        hub_token=hub_token,
        hub_private_repo=args.hub_private_repo,
    )


def training_summary(trainer, data_args, model_args, attention_args, scorer) -> dict:
    """The settings and counts shown in the model card's Training table."""
    args, tokenizer = trainer.args, trainer.processing_class
    summary = {
        "dataset configuration": data_args.dataset_config_name or "-",
        "training examples": len(trainer.train_dataset),
        "steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0.0, 2),
        "batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "learning rate": args.learning_rate,
        "scheduler": f"{SchedulerType(args.lr_scheduler_type).value}, warmup {args.warmup_steps:g}",
        "label smoothing": args.label_smoothing_factor,
        "seed": args.seed,
        "tokenizer": model_args.tokenizer_name
        or model_args.model_name_or_path
        or f"BPE trained on the training data ({len(tokenizer):,} entries)",
        "max source / target length": f"{data_args.max_source_length} / {data_args.max_target_length}",
        "beams (evaluation)": data_args.num_beams or 1,
        "length ratio γ": "given" if attention_args.length_ratio is not None else "computed from the training data",
    }
    runtime = next((entry["train_runtime"] for entry in trainer.state.log_history if "train_runtime" in entry), None)
    if runtime is not None:
        summary["training time"] = f"{runtime:.0f} s on {args.device}"
    if scorer is not None and scorer.signatures:
        summary["BLEU signature"] = scorer.signatures["bleu_signature"]
        summary["chrF signature"] = scorer.signatures["chrf_signature"]
    return summary


if __name__ == "__main__":
    main()
