"""Arguments shared by the training scripts in `training/`, and the start-up steps every script takes.

Every script parses these dataclasses with `HfArgumentParser` next to its own data arguments
and `(Seq2Seq)TrainingArguments`, so the options read the same everywhere:

- `ModelArguments`: start from a pretrained checkpoint (`--model_name_or_path`, converted to the
  chosen layout) or, without it, train from scratch; `--config_name`, `--tokenizer_name`,
  `--trust_remote_code`, `--use_fast_tokenizer` as in transformers' examples;
- `AttentionArguments`: `--attention_preset`, `--attention_layout` (JSON), `--length_ratio`;
- `ModelSizeArguments`: the size of a model trained from scratch (`--d_model`, `--encoder_layers`, ...).

`parse_script_arguments`, `setup_logging`, `prepare_hub_push`, `checkpoint_to_resume` and
`check_checkpoint_fits` are the start-up steps every script shares; `hf_simple_attn.recipes.model_setup`
turns the arguments into a tokenizer and a model.
"""

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import datasets
import torch
import transformers
from transformers import HfArgumentParser, PreTrainedConfig
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import CONFIG_NAME

from .hub import prepare_push
from .sizes import SIZES


logger = logging.getLogger(__name__)


def parse_script_arguments(argument_classes: tuple, argv: list[str] | None) -> tuple:
    """Parse `argv` (default: sys.argv) into instances of `argument_classes`; a single `.json`
    argument is read as a file holding every argument, as in transformers' example scripts.

    Started by a launcher with several processes (`torchrun --nproc_per_node 2`) on a machine without
    an accelerator, the processes form one distributed job on the CPU (gloo), as with `--use_cpu`:
    `ACCELERATE_USE_CPU` is set before the arguments set up the devices. (Otherwise transformers and
    accelerate run each process as a separate job, all writing the same output folder.)
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    parser = HfArgumentParser(argument_classes)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


def setup_logging(script_logger: logging.Logger, training_args) -> None:
    """Log to stdout: the script and this package (card, upload, tokenizer messages) at INFO on the
    process that logs, `datasets` and `transformers` at `--log_level` (warnings by default).
    `--disable_tqdm` also hides the progress bars of `datasets` (loading, map, corpus building)."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    for each in (script_logger, logging.getLogger("hf_simple_attn")):
        each.setLevel(logging.INFO if training_args.should_log else log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    if show_progress(training_args):
        datasets.enable_progress_bars()
    else:
        datasets.disable_progress_bars()


def show_progress(training_args) -> bool:
    """Whether this process draws progress bars: not with `--disable_tqdm` (by default set from the log
    level), and only on the first process of each machine."""
    return not training_args.disable_tqdm and training_args.local_process_index == 0


def prepare_hub_push(training_args, hub_token: str | None) -> bool:
    """`--push_to_hub`, switched off in `training_args` so that the Trainer does not push on every save: the
    script uploads the finished folder once, at the end (`hf_simple_attn.recipes.hub`). The repository is created now,
    before any training: one that cannot be created stops the script at once."""
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False
    if push_to_hub:
        training_args.hub_model_id = prepare_push(
            training_args.output_dir,
            training_args.hub_model_id,
            token=hub_token,
            private=training_args.hub_private_repo,
        )
    return push_to_hub


def checkpoint_to_resume(training_args) -> str | None:
    """`--resume_from_checkpoint`, or the newest complete `checkpoint-*` of an interrupted run in `--output_dir`
    (when training), or None to start afresh."""
    if training_args.resume_from_checkpoint is not None:
        return training_args.resume_from_checkpoint
    if not (training_args.do_train and os.path.isdir(training_args.output_dir)):
        return None
    last_checkpoint = last_complete_checkpoint(training_args.output_dir)
    if last_checkpoint is not None:
        logger.info("Checkpoint detected, resuming at %s; use a new --output_dir to start over", last_checkpoint)
    else:
        check_no_trained_model(training_args.output_dir)
    return last_checkpoint


def check_no_trained_model(output_dir: str | os.PathLike) -> None:
    """Stop a run that would train afresh into an `output_dir` holding a trained model and no checkpoint of it to
    resume: the run's final save would overwrite that model."""
    folder = Path(output_dir)
    weights = sorted(path.name for path in folder.glob("*.safetensors"))
    if (folder / CONFIG_NAME).is_file() and weights:
        raise ValueError(
            f"--output_dir {output_dir} holds a trained model ({CONFIG_NAME}, {', '.join(weights)}) and no checkpoint "
            "to resume: training afresh would overwrite it. Give a new --output_dir (to train this model further, "
            "pass its folder as --model_name_or_path), or remove the folder to start over."
        )


def check_checkpoint_fits(checkpoint: str | None, config: PreTrainedConfig) -> None:
    """Stop a run that would resume `checkpoint` into another model than the one it was trained as (another
    layout, size or vocabulary): its weights would load in part, or, for a layout with the same parameters,
    silently into other attention maths, and its optimizer state not at all. A checkpoint without a config
    (an Accelerate state of an older version) is not checked."""
    if checkpoint is None or not (Path(checkpoint) / CONFIG_NAME).is_file():
        return
    saved_dict, _ = PreTrainedConfig.get_config_dict(checkpoint)
    if saved_dict.get("model_type") != config.model_type:
        differences = [f"model_type (checkpoint: {saved_dict.get('model_type')!r}, this run: {config.model_type!r})"]
    else:
        saved = type(config).from_dict(saved_dict)
        differences = [
            describe_difference(name, saved, config)
            for name in config.architecture_fields
            if getattr(saved, name, None) != getattr(config, name, None)
        ]
    if differences:
        raise ValueError(
            f"Cannot resume {checkpoint}: it was trained as another model than this run builds; "
            + "; ".join(differences)
            + ". Resume with the options it was trained with, or give a new --output_dir to start afresh."
        )


def describe_difference(name: str, saved: PreTrainedConfig, config: PreTrainedConfig) -> str:
    """One field of `check_checkpoint_fits`'s error; a layout is named by its presets and first differing layer."""
    saved_value, value = getattr(saved, name, None), getattr(config, name, None)
    if name != "attention_layout":
        return f"{name} (checkpoint: {saved_value!r}, this run: {value!r})"
    for site in sorted(set(saved_value) | set(value)):
        layers = zip_longest(saved_value.get(site) or [], value.get(site) or [])
        layer = next((index for index, (old, new) in enumerate(layers) if old != new), None)
        if layer is not None:
            break
    presets = [
        f"preset {preset!r}" if preset else "no preset" for preset in (saved.attention_preset, config.attention_preset)
    ]
    return (
        f"attention_layout (checkpoint: {presets[0]}, this run: {presets[1]}; first difference: {site} layer {layer})"
    )


def last_complete_checkpoint(folder: str | os.PathLike) -> str | None:
    """The newest `checkpoint-<step>` in `folder` that has its `trainer_state.json` (written last by the Trainer);
    newer ones without it were cut off mid-save (a killed run) and are skipped, with a warning naming them."""
    checkpoints = sorted(
        (path for path in Path(folder).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if path.name.split("-")[-1].isdigit()),
        key=lambda path: int(path.name.split("-")[-1]),
        reverse=True,
    )
    for checkpoint in checkpoints:
        if (checkpoint / TRAINER_STATE_NAME).is_file() and any(checkpoint.glob("*.safetensors")):
            return str(checkpoint)
        logger.warning("Skipping %s: it has no %s (a save cut off mid-way)", checkpoint, TRAINER_STATE_NAME)
    return None


@dataclass
class ModelArguments:
    """Where the model and tokenizer come from."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A pretrained checkpoint (folder or Hub name): a Marian/BERT model, converted to the attention "
            "layout, or a saved hf_simple_attn model. Leave out to train from scratch (see the size options)."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Pretrained tokenizer (folder or Hub name) if not the model's. From scratch without it, a "
            "tokenizer is trained on the training data (--vocab_size)."
        },
    )
    cache_dir: str | None = field(
        default=None, metadata={"help": "Where to store models and datasets downloaded from the Hub."}
    )
    model_revision: str = field(
        default="main", metadata={"help": "The model version to use (branch name, tag name or commit id)."}
    )
    token: str | None = field(
        default=None, metadata={"help": "The Hub token for private models (default: the one from `hf auth login`)."}
    )
    config_name: str | None = field(
        default=None,
        metadata={
            "help": "Pretrained config name or path if not the same as model_name_or_path. Without "
            "--model_name_or_path, the config of the model trained from scratch: its size and layout (the size "
            "options are then unused); the vocabulary size and special token ids come from the tokenizer."
        },
    )
    use_fast_tokenizer: bool = field(
        default=True,
        metadata={
            "help": "Use a fast tokenizer (backed by the tokenizers library). transformers 5 has only those, and "
            "the tokenizers trained here are fast ones: false is refused."
        },
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Allow custom code from the Hub or a local folder for the config, tokenizer and model. Set it "
            "only for repositories you trust and whose code you have read: that code runs on your machine."
        },
    )

    def __post_init__(self):
        if not self.use_fast_tokenizer:
            raise ValueError(
                "--use_fast_tokenizer false: no slow tokenizer can be had here; transformers 5 loads fast "
                "tokenizers only (AutoTokenizer ignores use_fast), and the tokenizers trained from scratch are "
                "fast ones. Leave the option out."
            )


@dataclass
class AttentionArguments:
    """Which attention the model uses."""

    attention_preset: str | None = field(
        default=None,
        metadata={
            "help": "A named attention layout (`hf-simple-attn presets` lists them), e.g. base, hc-sa, sh-x. "
            "Default: base, or the checkpoint's own layout when continuing a saved hf_simple_attn model."
        },
    )
    attention_layout: str | None = field(
        default=None,
        metadata={
            "help": "An attention layout as JSON, or the path of a .json file holding one; with a preset, it "
            'replaces the preset\'s spec site by site. Example: \'{"cross": {"default": "none", "layers": '
            '{"last": {"kind": "dot", "num_heads": 1}}}}\''
        },
    )
    length_ratio: float | None = field(
        default=None,
        metadata={
            "help": "γ = mean source length / mean target length (in tokens), which centres hard-coded cross "
            "attention at floor(γ·i). Default: computed from the training data and stored in the config."
        },
    )


# A model trained from scratch is of the `small` size (hf_simple_attn.recipes.sizes) by default.
DEFAULT_SIZE = SIZES["small"]


@dataclass
class ModelSizeArguments:
    """The size of a model trained from scratch (ignored with --model_name_or_path)."""

    d_model: int = field(default=DEFAULT_SIZE["d_model"], metadata={"help": "Hidden size."})
    encoder_layers: int = field(default=DEFAULT_SIZE["layers"], metadata={"help": "Number of encoder layers."})
    decoder_layers: int = field(
        default=DEFAULT_SIZE["layers"], metadata={"help": "Number of decoder layers (seq2seq models)."}
    )
    attention_heads: int = field(
        default=DEFAULT_SIZE["heads"], metadata={"help": "Attention heads per layer (every site)."}
    )
    ffn_dim: int = field(default=DEFAULT_SIZE["ffn_dim"], metadata={"help": "Inner size of the feed-forward blocks."})
    vocab_size: int = field(
        default=DEFAULT_SIZE["vocab_size"],
        metadata={"help": "Size of the subword vocabulary trained on the training data."},
    )
    max_position_embeddings: int = field(default=512, metadata={"help": "Longest sequence the model accepts."})
    dropout: float = field(default=0.1, metadata={"help": "Dropout on embeddings, sublayer outputs and heads."})


def parse_attention_layout(value: str | None) -> dict | None:
    """`--attention_layout`: JSON text, or the path of a JSON file; None stays None."""
    if value is None:
        return None
    text = value.strip()
    if not text.startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"--attention_layout: expected a JSON object or the path of a .json file, got {value!r}")
        text = path.read_text(encoding="utf-8")
    try:
        layout = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--attention_layout: invalid JSON ({error})") from error
    if not isinstance(layout, dict):
        raise ValueError(f"--attention_layout: expected a JSON object (site -> spec), got {type(layout).__name__}")
    return layout


__all__ = [
    "AttentionArguments",
    "ModelArguments",
    "ModelSizeArguments",
    "checkpoint_to_resume",
    "check_checkpoint_fits",
    "check_no_trained_model",
    "parse_attention_layout",
    "parse_script_arguments",
    "prepare_hub_push",
    "setup_logging",
]
