"""The steps every training script in `training/` takes alike: pick the splits a run uses, train and save with the
Trainer, decode generated ids back to text."""

import numpy as np
from datasets import DatasetDict


def select_split(datasets: DatasetDict, split: str, max_samples: int | None, flag: str):
    """`datasets[split]`, up to its first `max_samples` examples; `flag` names the option that needs the split."""
    if split not in datasets:
        raise ValueError(f"{flag} requires a {split} split; the data has {list(datasets)}")
    dataset = datasets[split]
    return dataset.select(range(min(max_samples, len(dataset)))) if max_samples is not None else dataset


def select_splits(datasets: DatasetDict, data_args, training_args, names: dict[str, str] | None = None) -> dict:
    """The train, validation and test splits the run uses (None for one that --do_train, --do_eval or --do_predict
    leaves out), up to --max_train_samples, --max_eval_samples, --max_predict_samples. `names`: another name in
    `datasets` for any of the three (MNLI's validation_matched, ...)."""
    wanted = {
        "train": (training_args.do_train, data_args.max_train_samples, "--do_train"),
        "validation": (training_args.do_eval, data_args.max_eval_samples, "--do_eval"),
        "test": (training_args.do_predict, data_args.max_predict_samples, "--do_predict"),
    }
    names = names or {}
    return {
        split: select_split(datasets, names.get(split, split), max_samples, flag) if used else None
        for split, (used, max_samples, flag) in wanted.items()
    }


def train(trainer, checkpoint: str | None) -> dict:
    """Train (resuming `checkpoint`), save the model (with its tokenizer and, for trust_remote_code, its modeling
    code), the train metrics (`train_results.json`) and the trainer state."""
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()
    metrics = dict(train_result.metrics, train_samples=len(trainer.train_dataset))
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    return metrics


def decode_token_ids(tokenizer, token_ids: np.ndarray) -> list[str]:
    """The texts, stripped, of a (batch, length) array of ids in which -100 marks padding (the Trainer pads
    predictions and labels gathered across batches with it)."""
    token_ids = np.where(token_ids != -100, token_ids, tokenizer.pad_token_id)
    return [text.strip() for text in tokenizer.batch_decode(token_ids, skip_special_tokens=True)]


__all__ = ["decode_token_ids", "select_split", "select_splits", "train"]
