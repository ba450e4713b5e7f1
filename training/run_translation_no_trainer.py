#!/usr/bin/env python
"""Train and evaluate a translation model with any attention layout, in a plain Accelerate loop.

The same model, data and metric options as `run_translation.py` (its data loading, preprocessing
and scoring are shared through `hf_simple_attn.recipes.translation_task`), with the training options of transformers'
`run_translation_no_trainer.py` example (`--per_device_train_batch_size`, `--learning_rate`,
`--num_train_epochs`, `--max_train_steps`, `--checkpointing_steps`, `--resume_from_checkpoint`, ...).
It runs as a plain script on one device or under `accelerate launch` on several:

    python training/run_translation_no_trainer.py --dataset_name embedded --attention_preset sh-x \
        --max_train_steps 400 --output_dir runs/sh-x
    accelerate launch --multi_gpu --num_processes 4 training/run_translation_no_trainer.py ...

At the end the model, tokenizer and modeling code are saved in `--output_dir` with a model
card, BLEU/chrF on the validation split in `eval_results.json` (and on the test split in
`predict_results.json` with `--do_predict`; `--predict_with_generate false`: the loss instead);
`--push_to_hub` uploads them (`hf_simple_attn.recipes.hub`). `--with_tracking` logs the training loss,
learning rate and results to the trackers of `--report_to` (`accelerator.init_trackers` / `log`,
as transformers' no_trainer examples do).

`--torch_compile` (with `--torch_compile_backend`, default inductor, and `--torch_compile_mode`, named and meant
as in transformers' `TrainingArguments`) compiles the model in `accelerator.prepare`, through Accelerate's
`TorchDynamoPlugin` as the Trainer does. Training and loss evaluation run the compiled model; `generate`, the saved
model and the `--checkpointing_steps` states are the plain model's (no `_orig_mod.` names), so a state saved with or
without compilation resumes either way.
"""

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DataLoaderConfiguration, TorchDynamoPlugin, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import DataCollatorForSeq2Seq, get_scheduler
from transformers.utils import CONFIG_NAME

from hf_simple_attn.deploy.distill import DistillationArguments, distill_training_split, distillation_summary
from hf_simple_attn.recipes.arguments import (
    AttentionArguments,
    ModelArguments,
    ModelSizeArguments,
    check_checkpoint_fits,
    check_no_trained_model,
    parse_script_arguments,
)
from hf_simple_attn.recipes.hub import prepare_push, publish_checkpoint
from hf_simple_attn.recipes.run_steps import select_split
from hf_simple_attn.recipes.translation_task import (
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

CHECKPOINT_PREFIX = "step_"


@dataclass
class LoopArguments:
    """Optimisation, checkpointing and output (names as in transformers' no_trainer examples)."""

    output_dir: str = field(metadata={"help": "Where to store the final model, its card and the results."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Training batch size per device."})
    per_device_eval_batch_size: int = field(default=8, metadata={"help": "Evaluation batch size per device."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate (after warmup)."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay (not on biases and LayerNorms)."})
    num_train_epochs: int = field(default=3, metadata={"help": "Training epochs (if --max_train_steps is not set)."})
    max_train_steps: int | None = field(
        default=None, metadata={"help": "Total optimizer steps; overrides --num_train_epochs."}
    )
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches accumulated per optimizer step."})
    lr_scheduler_type: str = field(
        default="linear", metadata={"help": "linear, cosine, inverse_sqrt, constant_with_warmup, ..."}
    )
    num_warmup_steps: int = field(default=0, metadata={"help": "Warmup steps of the learning-rate scheduler."})
    label_smoothing_factor: float = field(default=0.0, metadata={"help": "Label smoothing of the loss."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0: no clipping)."})
    seed: int = field(default=42, metadata={"help": "Random seed (model initialisation, data order, dropout)."})
    logging_steps: int = field(default=50, metadata={"help": "Show the mean training loss every this many steps."})
    checkpointing_steps: str | None = field(
        default=None,
        metadata={"help": "Save a resumable state every n steps (an integer) or at the end of every epoch ('epoch')."},
    )
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": f"A saved state folder ({CHECKPOINT_PREFIX}N or epoch_N) to continue from."}
    )
    do_predict: bool = field(default=False, metadata={"help": "Also score the test split (predict_results.json)."})
    predict_with_generate: bool = field(
        default=True,
        metadata={
            "help": "Score the validation (and test) split by generating translations (BLEU, chrF); false: by "
            "the loss on the reference translations (eval_loss, predict_loss), without generating."
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "The max_length of `generate` in evaluation and prediction, saved in the checkpoint's generation "
            "config (default: --val_max_target_length)."
        },
    )
    with_tracking: bool = field(
        default=False,
        metadata={"help": "Log the training loss, the learning rate and the results to the --report_to trackers."},
    )
    report_to: str = field(
        default="all",
        metadata={
            "help": 'The trackers of --with_tracking, comma-separated: "all" (every one installed), "tensorboard", '
            '"wandb", "comet_ml", "clearml", "mlflow", "aim", "dvclive", "swanlab", "trackio", or the name of one '
            "registered with accelerate.tracking.register_tracker_class. Local ones write under --output_dir."
        },
    )
    push_to_hub: bool = field(
        default=False,
        metadata={"help": "Upload the final model, code and card to the Hub (hf_simple_attn.recipes.hub)."},
    )
    hub_model_id: str | None = field(default=None, metadata={"help": "Hub repository (default: the folder's name)."})
    hub_token: str | None = field(default=None, metadata={"help": "Hub token (default: from `hf auth login`)."})
    hub_private_repo: bool = field(default=False, metadata={"help": "Create the Hub repository as private."})
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "Compile the model with `torch.compile` (in `accelerator.prepare`, through Accelerate's "
            "TorchDynamoPlugin, as the Trainer's --torch_compile). Set by --torch_compile_backend or "
            "--torch_compile_mode."
        },
    )
    torch_compile_backend: str | None = field(
        default=None,
        metadata={
            "help": "The backend of `torch.compile` (default with --torch_compile: inductor; aot_eager traces without "
            "generating code); setting it turns on --torch_compile."
        },
    )
    torch_compile_mode: str | None = field(
        default=None,
        metadata={
            "help": "The mode of `torch.compile` (default, reduce-overhead, max-autotune, ...); setting it turns on "
            "--torch_compile."
        },
    )

    def __post_init__(self):
        steps = self.checkpointing_steps
        if steps is not None and steps != "epoch" and not steps.isdigit():
            raise ValueError(f"--checkpointing_steps: expected an integer or 'epoch', got {steps!r}")
        # As TrainingArguments: a backend or mode turns compilation on, which uses inductor unless told otherwise.
        if self.torch_compile_backend is not None or self.torch_compile_mode is not None:
            self.torch_compile = True
        if self.torch_compile and self.torch_compile_backend is None:
            self.torch_compile_backend = "inductor"


def resume_position(checkpoint: str, steps_per_epoch: int) -> tuple[int, int, int]:
    """(completed optimizer steps, epoch to start in, batches of that epoch to skip) for a saved state."""
    name = Path(checkpoint).name
    if name.startswith("epoch_"):
        epoch = int(name[len("epoch_") :]) + 1
        return epoch * steps_per_epoch, epoch, 0
    if not name.startswith(CHECKPOINT_PREFIX):
        raise ValueError(
            f"--resume_from_checkpoint: expected a {CHECKPOINT_PREFIX}N or epoch_N folder, got {checkpoint}"
        )
    completed = int(name[len(CHECKPOINT_PREFIX) :])
    return completed, completed // steps_per_epoch, completed % steps_per_epoch


# The option groups of the command line, in the order `main` receives them.
SCRIPT_ARGUMENTS = (
    ModelArguments,
    DataTrainingArguments,
    DistillationArguments,
    AttentionArguments,
    ModelSizeArguments,
    LoopArguments,
)


def main(argv: list[str] | None = None) -> dict:
    """Run the script on `argv` (default: the command line); returns the metrics it wrote."""
    model_args, data_args, distill_args, attention_args, size_args, args = parse_script_arguments(
        SCRIPT_ARGUMENTS, argv
    )
    # The Hub token stays in this variable, out of `args`, as in the Trainer scripts (which save their arguments).
    hub_token, args.hub_token = args.hub_token, None
    if args.resume_from_checkpoint is None:
        check_no_trained_model(args.output_dir)
    if args.push_to_hub:  # before any training: a repository that cannot be created stops the script now
        args.hub_model_id = prepare_push(
            args.output_dir, args.hub_model_id, token=hub_token, private=args.hub_private_repo
        )
    accelerator = start_accelerator(args)

    train_raw, eval_raw, predict_raw = load_splits(data_args, model_args, args)
    if distill_args.distill_from is not None:
        with accelerator.main_process_first():
            train_raw = distill_training_split(
                train_raw, distill_args, data_args, model_args, accelerator.is_local_main_process
            )
    tokenizer = tokenizer_for_run(
        model_args, size_args, data_args, train_raw, args.resume_from_checkpoint, accelerator.is_local_main_process
    )
    model = translation_model(
        model_args, attention_args, size_args, data_args, tokenizer, train_raw, args.seed, args.resume_from_checkpoint
    )
    check_checkpoint_fits(args.resume_from_checkpoint, model.config)
    if args.max_length is not None:
        model.generation_config.max_length = args.max_length
    collator, train_dataloader, eval_dataloader = make_dataloaders(
        accelerator, args, data_args, tokenizer, model, train_raw, eval_raw
    )
    optimizer = make_optimizer(model, args)
    lr_scheduler = make_scheduler(args, optimizer, train_dataloader, accelerator.num_processes)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    if args.with_tracking:
        start_tracking(accelerator, model_args, data_args, attention_args, size_args, args)
    completed_steps, train_runtime = train(
        accelerator, args, model, optimizer, lr_scheduler, train_dataloader, tokenizer
    )

    scorer = TranslationScorer() if args.predict_with_generate else None
    results = evaluate_and_predict(
        accelerator, args, data_args, model, tokenizer, scorer, collator, eval_dataloader, eval_raw, predict_raw
    )
    all_results = save_results(accelerator, args, model, tokenizer, results, completed_steps, train_runtime)
    if accelerator.is_main_process:
        summary = training_summary(
            accelerator, args, model_args, data_args, tokenizer, scorer, len(train_raw), completed_steps, train_runtime
        )
        summary.update(distillation_summary(distill_args))
        # The plain model: the card names its class and counts its parameters.
        plain_model = accelerator.unwrap_model(model, keep_torch_compile=False)
        publish(plain_model, args, model_args, data_args, summary, all_results, hub_token)
    accelerator.end_training()
    return all_results


def start_accelerator(args: LoopArguments) -> Accelerator:
    """The Accelerator of the run, with logging (INFO on the main process) and the seed set, and the output folder."""
    # A seedable sampler shuffles each epoch from (seed, epoch) alone, so a resumed run sees the same batches.
    tracking = {"log_with": args.report_to.split(","), "project_dir": args.output_dir} if args.with_tracking else {}
    # Without --torch_compile, Accelerate's own settings (`accelerate launch --dynamo_backend`) apply.
    dynamo_plugin = None
    if args.torch_compile:
        dynamo_plugin = TorchDynamoPlugin(backend=args.torch_compile_backend, mode=args.torch_compile_mode)
    # Every Accelerator of a process shares one state, set by the first: a run started again in the same process (a
    # notebook, the tests) would keep the compilation settings of the one before. Reset it, as TrainingArguments does.
    AcceleratorState._reset_state()
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        dynamo_plugin=dynamo_plugin,
        **tracking,
    )
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
    )
    logger.setLevel(logging.INFO if accelerator.is_main_process else logging.WARNING)
    logger.info(accelerator.state)
    if accelerator.is_local_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
    set_seed(args.seed)
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
    accelerator.wait_for_everyone()
    return accelerator


def load_splits(data_args: DataTrainingArguments, model_args: ModelArguments, args: LoopArguments) -> tuple:
    """The raw train and validation splits, and the test split with --do_predict (else None)."""
    raw_datasets = load_raw_datasets(data_args, model_args)
    train_raw = select_split(raw_datasets, "train", data_args.max_train_samples, "training")
    eval_raw = select_split(raw_datasets, "validation", data_args.max_eval_samples, "evaluation")
    predict_raw = (
        select_split(raw_datasets, "test", data_args.max_predict_samples, "--do_predict") if args.do_predict else None
    )
    return train_raw, eval_raw, predict_raw


def tokenize(accelerator: Accelerator, dataset, tokenizer, data_args: DataTrainingArguments, split: str):
    """`tokenize_translations`, on the main process first (the others then read its cache)."""
    with accelerator.main_process_first():
        return tokenize_translations(dataset, tokenizer, data_args, split)


def make_dataloaders(accelerator, args: LoopArguments, data_args, tokenizer, model, train_raw, eval_raw) -> tuple:
    """(collator, training dataloader, validation dataloader) of the tokenized splits."""
    collator = DataCollatorForSeq2Seq(
        tokenizer,
        model=model,
        label_pad_token_id=-100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=8 if accelerator.mixed_precision != "no" else None,
    )
    train_dataloader = DataLoader(
        tokenize(accelerator, train_raw, tokenizer, data_args, "train"),
        shuffle=True,
        collate_fn=collator,
        batch_size=args.per_device_train_batch_size,
        # Its own generator: starting an epoch then draws nothing from the global RNG that dropout
        # uses (and load_state restores), so a resumed run continues exactly as an uninterrupted one.
        generator=torch.Generator().manual_seed(args.seed),
    )
    eval_dataset = tokenize(accelerator, eval_raw, tokenizer, data_args, "validation")
    return collator, train_dataloader, make_eval_dataloader(eval_dataset, collator, args)


def make_eval_dataloader(dataset, collator, args: LoopArguments) -> DataLoader:
    return DataLoader(dataset, collate_fn=collator, batch_size=args.per_device_eval_batch_size)


def make_optimizer(model, args: LoopArguments) -> torch.optim.AdamW:
    """AdamW with weight decay on every parameter but the biases and LayerNorm weights."""
    no_decay = ("bias", "layer_norm.weight", "LayerNorm.weight")
    parameter_groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(parameter_groups, lr=args.learning_rate)


def make_scheduler(args: LoopArguments, optimizer, train_dataloader: DataLoader, num_processes: int):
    """The learning-rate schedule over the training steps of the dataloader (not yet sharded) on every process."""
    steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    max_train_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    return get_scheduler(
        name=args.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=args.num_warmup_steps * num_processes,
        num_training_steps=max_train_steps * num_processes,
    )


def training_length(args: LoopArguments, train_dataloader: DataLoader) -> tuple[int, int, int]:
    """(optimizer steps per epoch, optimizer steps in all, epochs) of the prepared dataloader (sharded across
    processes)."""
    steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    max_train_steps = args.max_train_steps
    if max_train_steps is None:
        max_train_steps = args.num_train_epochs * steps_per_epoch
    return steps_per_epoch, max_train_steps, math.ceil(max_train_steps / steps_per_epoch)


def start_tracking(accelerator: Accelerator, model_args, data_args, attention_args, size_args, args) -> None:
    """`--with_tracking`: the trackers, with the options that describe the run (numbers, texts, flags); the Hub
    token is not among them."""
    options = vars(data_args) | vars(attention_args) | vars(size_args) | vars(args)
    experiment_config = {key: value for key, value in options.items() if isinstance(value, int | float | str)}
    experiment_config["model_name_or_path"] = model_args.model_name_or_path or "from scratch"
    accelerator.init_trackers("translation_no_trainer", experiment_config)


def resume(accelerator: Accelerator, args: LoopArguments, steps_per_epoch: int) -> tuple[int, int, int]:
    """(completed optimizer steps, epoch to start in, batches of it to skip): the state of --resume_from_checkpoint
    loaded, or a fresh start."""
    if args.resume_from_checkpoint is None:
        return 0, 0, 0
    accelerator.print(f"Resumed from checkpoint: {args.resume_from_checkpoint}")
    accelerator.load_state(args.resume_from_checkpoint)
    completed_steps, starting_epoch, resume_batches = resume_position(args.resume_from_checkpoint, steps_per_epoch)
    return completed_steps, starting_epoch, resume_batches * args.gradient_accumulation_steps


def train(accelerator, args: LoopArguments, model, optimizer, lr_scheduler, train_dataloader, tokenizer) -> tuple:
    """Train for --max_train_steps optimizer steps (or --num_train_epochs), saving the resumable state every
    --checkpointing_steps; returns (completed optimizer steps, training time in seconds)."""
    steps_per_epoch, max_train_steps, num_train_epochs = training_length(args, train_dataloader)
    log_training_plan(accelerator, args, len(train_dataloader.dataset), num_train_epochs, max_train_steps)
    completed_steps, starting_epoch, resume_batches = resume(accelerator, args, steps_per_epoch)
    progress_bar = tqdm(range(max_train_steps), disable=not accelerator.is_local_main_process)
    progress_bar.update(completed_steps)
    start_time = time.time()
    logged_losses = []
    for epoch in range(starting_epoch, num_train_epochs):
        model.train()
        if epoch == starting_epoch and resume_batches:
            active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_batches)
        else:
            active_dataloader = train_dataloader
        for batch in active_dataloader:
            logged_losses.append(training_step(accelerator, args, model, batch, optimizer, lr_scheduler))
            if accelerator.sync_gradients:
                progress_bar.update(1)
                completed_steps += 1
                if completed_steps % args.logging_steps == 0:
                    log_loss(accelerator, args, progress_bar, lr_scheduler, logged_losses, completed_steps, epoch)
                    logged_losses = []
                if (
                    args.checkpointing_steps not in (None, "epoch")
                    and completed_steps % int(args.checkpointing_steps) == 0
                ):
                    save_state(accelerator, model, tokenizer, args, f"{CHECKPOINT_PREFIX}{completed_steps}")
            if completed_steps >= max_train_steps:
                break
        if args.checkpointing_steps == "epoch":
            save_state(accelerator, model, tokenizer, args, f"epoch_{epoch}")
        if completed_steps >= max_train_steps:
            break
    train_runtime = time.time() - start_time
    progress_bar.close()
    return completed_steps, train_runtime


def total_batch_size(accelerator: Accelerator, args: LoopArguments) -> int:
    """Examples per optimizer step: over every process and the accumulated batches."""
    return args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps


def log_training_plan(accelerator, args: LoopArguments, num_examples: int, num_epochs: int, max_train_steps: int):
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {num_examples}")
    logger.info(f"  Num epochs = {num_epochs}")
    logger.info(f"  Total train batch size (parallel, accumulation) = {total_batch_size(accelerator, args)}")
    logger.info(f"  Total optimization steps = {max_train_steps}")


def training_step(accelerator: Accelerator, args: LoopArguments, model, batch, optimizer, lr_scheduler) -> float:
    """One forward and backward pass (an optimizer step once the gradients of --gradient_accumulation_steps
    batches are accumulated); returns the batch's loss (with --label_smoothing_factor, the smoothed one)."""
    with accelerator.accumulate(model):
        # The model smooths its loss itself, which it computes in chunks without full logits in training.
        loss = model(**batch, label_smoothing=args.label_smoothing_factor).loss
        accelerator.backward(loss)
        if accelerator.sync_gradients and args.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
    return loss.detach().float().item()


def log_loss(accelerator, args: LoopArguments, progress_bar, lr_scheduler, losses: list[float], step: int, epoch: int):
    """Show the mean loss of the batches since the last report (and log it to the trackers)."""
    mean_loss, learning_rate = sum(losses) / len(losses), lr_scheduler.get_last_lr()[0]
    progress_bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{learning_rate:.2e}")
    logger.info(f"step {step}: loss {mean_loss:.4f}")
    if args.with_tracking:
        accelerator.log({"train_loss": mean_loss, "learning_rate": learning_rate, "epoch": epoch}, step=step)


def save_state(accelerator: Accelerator, model, tokenizer, args: LoopArguments, name: str) -> None:
    """A resumable state in `--output_dir/name`, with the tokenizer (a from-scratch tokenizer must survive a resume)
    and the model's config (a resume checks that it rebuilds the same model)."""
    folder = os.path.join(args.output_dir, name)
    accelerator.save_state(folder)
    if accelerator.is_main_process:
        tokenizer.save_pretrained(folder)
        accelerator.unwrap_model(model).config.to_json_file(os.path.join(folder, CONFIG_NAME))


def generate_and_score(accelerator, model, dataloader, references, tokenizer, scorer, generate_kwargs):
    """Translate every batch (all processes), gather in dataset order, score against the raw
    `references`; returns (metrics, predictions)."""
    model.eval()
    predictions, lengths = [], []
    # `generate` runs the plain model, uncompiled, as in Seq2SeqTrainer.
    plain_model = accelerator.unwrap_model(model, keep_torch_compile=False)
    for batch in tqdm(dataloader, desc="Generating", disable=not accelerator.is_local_main_process):
        with torch.no_grad():
            generated = plain_model.generate(
                batch["input_ids"], attention_mask=batch["attention_mask"], **generate_kwargs
            )
        generated = accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)
        generated = accelerator.gather_for_metrics(generated)
        lengths += (generated != tokenizer.pad_token_id).sum(dim=1).tolist()
        predictions += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    metrics = scorer(predictions, references)
    metrics["gen_len"] = round(sum(lengths) / len(lengths), 4)
    return metrics, predictions


def evaluation_loss(accelerator, model, dataloader) -> float:
    """The mean loss of every example of `dataloader` (all processes) on its reference translation."""
    model.eval()
    losses = []
    for batch in dataloader:
        with torch.no_grad():
            loss = model(**batch).loss
        losses.append(accelerator.gather_for_metrics(loss.repeat(batch["input_ids"].shape[0])))
    return round(torch.cat(losses).mean().item(), 4)


def split_results(prefix: str, metrics: dict, scorer: TranslationScorer, num_samples: int) -> dict:
    """`eval_bleu`, `eval_chrf`, ..., the SacreBLEU signatures and the sample count (as run_translation.py)."""
    results = {f"{prefix}_{key}": value for key, value in (metrics | scorer.signatures).items()}
    results[f"{prefix}_samples"] = num_samples
    return results


def evaluate_and_predict(
    accelerator, args, data_args, model, tokenizer, scorer, collator, eval_dataloader, eval_raw, predict_raw
) -> dict:
    """Results of the validation split and, with --do_predict, of the test split (its translations written to
    generated_predictions.txt): BLEU and chrF of generated translations, or the loss without a scorer."""
    generate_kwargs = generation_settings(args, data_args)

    def score(split: str, dataloader, raw_dataset) -> tuple[dict, list[str] | None]:
        """`<split>_bleu`, `<split>_chrf`, ... of generated translations (and these), or `<split>_loss`."""
        if scorer is None:
            loss = evaluation_loss(accelerator, model, dataloader)
            return {f"{split}_loss": loss, f"{split}_samples": len(raw_dataset)}, None
        references = source_and_target_texts(raw_dataset, data_args)[1]
        metrics, predictions = generate_and_score(
            accelerator, model, dataloader, references, tokenizer, scorer, generate_kwargs
        )
        return split_results(split, metrics, scorer, len(raw_dataset)), predictions

    results = {"eval": score("eval", eval_dataloader, eval_raw)[0]}
    logger.info(f"validation: {results['eval']}")
    if predict_raw is not None:
        predict_dataset = tokenize(accelerator, predict_raw, tokenizer, data_args, "test")
        predict_dataloader = accelerator.prepare(make_eval_dataloader(predict_dataset, collator, args))
        results["predict"], predictions = score("predict", predict_dataloader, predict_raw)
        logger.info(f"test: {results['predict']}")
        if accelerator.is_main_process and predictions is not None:
            Path(args.output_dir, "generated_predictions.txt").write_text(
                "\n".join(predictions) + "\n", encoding="utf-8"
            )
    return results


def generation_settings(args: LoopArguments, data_args: DataTrainingArguments) -> dict:
    return {"max_length": args.max_length or data_args.val_max_target_length, "num_beams": data_args.num_beams or 1}


def save_results(accelerator, args: LoopArguments, model, tokenizer, results: dict, completed_steps: int, runtime):
    """Save the model, its tokenizer and the results (`<split>_results.json`, `all_results.json`) in --output_dir;
    returns all results (also logged to the trackers)."""
    accelerator.wait_for_everyone()
    accelerator.unwrap_model(model, keep_torch_compile=False).save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    all_results = {"train_runtime": round(runtime, 2), "train_steps": completed_steps}
    for result in results.values():
        all_results.update(result)
    if args.with_tracking:
        numbers = {key: value for key, value in all_results.items() if isinstance(value, int | float)}
        accelerator.log(numbers, step=completed_steps)
    if accelerator.is_main_process:
        tokenizer.save_pretrained(args.output_dir)
        for split, result in results.items():
            Path(args.output_dir, f"{split}_results.json").write_text(json.dumps(result, indent=4) + "\n")
        Path(args.output_dir, "all_results.json").write_text(json.dumps(all_results, indent=4) + "\n")
    return all_results


def training_summary(
    accelerator, args, model_args, data_args, tokenizer, scorer, num_examples: int, completed_steps: int, runtime
) -> dict:
    """The settings and counts shown in the model card's Training table."""
    summary = {
        "dataset configuration": data_args.dataset_config_name or "-",
        "training examples": num_examples,
        "steps": completed_steps,
        "batch size": total_batch_size(accelerator, args),
        "learning rate": args.learning_rate,
        "scheduler": f"{args.lr_scheduler_type}, warmup {args.num_warmup_steps}",
        "label smoothing": args.label_smoothing_factor,
        "seed": args.seed,
        "tokenizer": model_args.tokenizer_name
        or model_args.model_name_or_path
        or f"BPE trained on the training data ({len(tokenizer):,} entries)",
        "beams (evaluation)": "- (loss only)" if scorer is None else generation_settings(args, data_args)["num_beams"],
        "training time": f"{runtime:.0f} s on {accelerator.num_processes} × {accelerator.device}",
    }
    if scorer is not None:
        summary["BLEU signature"] = scorer.signatures["bleu_signature"]
        summary["chrF signature"] = scorer.signatures["chrf_signature"]
    return summary


def publish(model, args: LoopArguments, model_args, data_args, summary: dict, all_results: dict, hub_token) -> None:
    """The model card of the trained checkpoint, then (--push_to_hub) one upload of the finished folder."""
    publish_checkpoint(
        args.output_dir,
        model,
        task="translation",
        dataset_name=dataset_label(data_args),
        dataset_config=data_args.dataset_config_name,
        metrics=all_results,
        language=[data_args.source_lang, data_args.target_lang],
        base_model=model_args.model_name_or_path,
        training_summary=summary,
        push_to_hub=args.push_to_hub,
        hub_model_id=args.hub_model_id,
        hub_token=hub_token,
        hub_private_repo=args.hub_private_repo,
    )


if __name__ == "__main__":
    main()
