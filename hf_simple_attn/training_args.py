"""Arguments and model builders shared by the training scripts in `training/`.

Every script parses these dataclasses with `HfArgumentParser` next to its own data arguments
and `(Seq2Seq)TrainingArguments`, so the options read the same everywhere:

- `ModelArguments`: start from a pretrained checkpoint (`--model_name_or_path`, converted to the
  chosen layout) or, without it, train from scratch; `--config_name`, `--tokenizer_name`,
  `--trust_remote_code`, `--use_fast_tokenizer` as in transformers' examples;
- `AttentionArguments`: `--attention_preset`, `--attention_layout` (JSON), `--length_ratio`;
- `ModelSizeArguments`: the size of a model trained from scratch (`--d_model`, `--encoder_layers`, ...).

`build_seq2seq_model` / `build_encoder_model` turn them into a model; `load_or_train_tokenizer`
(`load_pretrained_tokenizer`) gives the matching tokenizer and `compute_length_ratio` the γ that
centres hard-coded cross attention. `parse_script_arguments`, `setup_logging` and
`checkpoint_to_resume` are the start-up steps every script shares.
"""

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser, PreTrainedConfig, PreTrainedTokenizerBase
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .convert import (
    BERT_TARGETS,
    MARIAN_TARGETS,
    build_config,
    convert_bert_checkpoint,
    convert_marian_checkpoint,
)
from .modeling.configuration_simple_attn import SimpleAttnMarianConfig
from .modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from .modeling.modeling_simple_attn_bert import SimpleAttnBertForSequenceClassification
from .modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from .modeling.presets import list_presets
from .tokenization import train_tokenizer


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
    return last_checkpoint


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


@dataclass
class ModelSizeArguments:
    """The size of a model trained from scratch (ignored with --model_name_or_path)."""

    d_model: int = field(default=256, metadata={"help": "Hidden size."})
    encoder_layers: int = field(default=3, metadata={"help": "Number of encoder layers."})
    decoder_layers: int = field(default=3, metadata={"help": "Number of decoder layers (seq2seq models)."})
    attention_heads: int = field(default=4, metadata={"help": "Attention heads per layer (every site)."})
    ffn_dim: int = field(default=1024, metadata={"help": "Inner size of the feed-forward blocks."})
    vocab_size: int = field(
        default=8000, metadata={"help": "Size of the subword vocabulary trained on the training data."}
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


def compute_length_ratio(sources: list[str], targets: list[str], tokenizer) -> float:
    """γ: mean source length / mean target length, in tokens as the model sees them (with `</s>`)."""
    if not sources or len(sources) != len(targets):
        raise ValueError(
            "compute_length_ratio: needs as many sources as targets, at least one; "
            f"got {len(sources)} and {len(targets)}"
        )
    source_tokens = sum(len(ids) for ids in tokenizer(list(sources), verbose=False)["input_ids"])
    target_tokens = sum(len(ids) for ids in tokenizer(text_target=list(targets), verbose=False)["input_ids"])
    return source_tokens / target_tokens


def load_pretrained_tokenizer(model_args: ModelArguments) -> PreTrainedTokenizerBase:
    """The tokenizer of `--tokenizer_name`, else of `--model_name_or_path`."""
    return AutoTokenizer.from_pretrained(
        model_args.tokenizer_name or model_args.model_name_or_path, **pretrained_kwargs(model_args)
    )


def load_or_train_tokenizer(
    model_args: ModelArguments,
    size_args: ModelSizeArguments,
    training_texts: Callable[[], Iterable[str]],
    model_max_length: int = 256,
    show_progress: bool = False,
) -> PreTrainedTokenizerBase:
    """The tokenizer of `--tokenizer_name` or `--model_name_or_path`, else one trained on `training_texts()`.

    `training_texts` is called only when a tokenizer is trained (pass source and target texts);
    `show_progress` draws the trainer's progress bars.
    """
    if model_args.tokenizer_name or model_args.model_name_or_path:
        return load_pretrained_tokenizer(model_args)
    tokenizer = train_tokenizer(
        training_texts(),
        vocab_size=size_args.vocab_size,
        model_max_length=model_max_length,
        show_progress=show_progress,
    )
    logger.info("trained a BPE tokenizer of %d entries on the training data", len(tokenizer))
    return tokenizer


def pretrained_kwargs(model_args: ModelArguments) -> dict:
    return {
        "cache_dir": model_args.cache_dir,
        "revision": model_args.model_revision,
        "token": model_args.token,
        "trust_remote_code": model_args.trust_remote_code,
    }


def load_config(name: str, model_args: ModelArguments) -> PreTrainedConfig:
    return AutoConfig.from_pretrained(name, **pretrained_kwargs(model_args))


def load_source_model(path: str, config: PreTrainedConfig, targets: dict, fallback: str, model_args: ModelArguments):
    """A transformers checkpoint to convert, as its own architecture (as `convert` loads it), with `config`."""
    architectures = [name for name in (config.architectures or []) if name in targets]
    source_class = getattr(transformers, architectures[0] if architectures else fallback)
    return source_class.from_pretrained(path, config=config, **pretrained_kwargs(model_args))


def checked_config_name(model_args: ModelArguments, path_config: PreTrainedConfig) -> PreTrainedConfig:
    """The config of `--config_name`, for the checkpoint whose own config is `path_config`."""
    config = load_config(model_args.config_name, model_args)
    if type(config) is not type(path_config):
        raise ValueError(
            f"--config_name: {model_args.config_name} is a {type(config).__name__}, but --model_name_or_path "
            f"{model_args.model_name_or_path} holds a {type(path_config).__name__}"
        )
    return config


def scratch_config(config_class, model_args, attention_args, layout: dict | None, fields: dict, size_fields: dict):
    """The config of a model trained from scratch: `--config_name`'s (its size and layout; converted to
    `config_class` when it is transformers' own, the layout options replacing its layout), else one of
    `size_fields`; `fields` (vocabulary, special ids, ...) set in either case."""
    if model_args.config_name is None:
        return new_config(config_class, attention_args, layout, size_fields | fields)
    logger.info("model size from --config_name %s; the size options are not used", model_args.config_name)
    config = load_config(model_args.config_name, model_args)
    if isinstance(config, config_class) and not changes_layout(attention_args):
        config.update(fields)
        return config
    return build_config(config_class, config, attention_args.attention_preset, layout, fields)


def changes_layout(attention_args: AttentionArguments) -> bool:
    return attention_args.attention_preset is not None or attention_args.attention_layout is not None


def check_preset(attention_args: AttentionArguments, model_kind: str) -> None:
    preset = attention_args.attention_preset
    if preset is not None and preset not in list_presets(model_kind):
        raise ValueError(
            f"--attention_preset: unknown {model_kind} preset {preset!r}; valid: {list_presets(model_kind)}"
        )


def new_config(config_class: type, attention_args: AttentionArguments, layout: dict | None, fields: dict):
    """A new config of `config_class`: the preset's layout (with `layout` replacing its sites), or `layout` alone."""
    if attention_args.attention_preset is not None:
        return config_class.from_preset(attention_args.attention_preset, attention_layout=layout, **fields)
    return config_class(attention_layout=layout, **fields)


def build_seq2seq_model(
    model_args: ModelArguments,
    attention_args: AttentionArguments,
    size_args: ModelSizeArguments,
    tokenizer,
    length_ratio: float | None,
) -> SimpleAttnMarianMTModel:
    """A `SimpleAttnMarianMTModel` with the requested layout.

    With `--model_name_or_path`: a Marian checkpoint is converted (`convert_marian_checkpoint`);
    a saved hf_simple_attn checkpoint is loaded as it is, or converted when a preset or layout is
    given; `--config_name` replaces the checkpoint's config. Without it: a new model of `size_args`
    (or of `--config_name`'s config) whose vocabulary and special ids are the tokenizer's.
    `length_ratio` (None: keep the config's) is stored in the config.
    """
    check_preset(attention_args, "seq2seq")
    layout = parse_attention_layout(attention_args.attention_layout)
    ratio = {} if length_ratio is None else {"length_ratio": float(length_ratio)}
    path = model_args.model_name_or_path
    if path is not None:
        config = load_config(path, model_args)
        if model_args.config_name is not None:
            config = checked_config_name(model_args, config)
        if isinstance(config, SimpleAttnMarianConfig):
            config.update(ratio)
            source = SimpleAttnMarianMTModel.from_pretrained(path, config=config, **pretrained_kwargs(model_args))
            if not changes_layout(attention_args):
                return source
        else:
            source = load_source_model(path, config, MARIAN_TARGETS, "MarianMTModel", model_args)
        return convert_marian_checkpoint(
            source,
            preset=attention_args.attention_preset,
            attention_layout=layout,
            model_class=SimpleAttnMarianMTModel,
            **ratio,
        )
    size_fields = dict(
        d_model=size_args.d_model,
        encoder_layers=size_args.encoder_layers,
        decoder_layers=size_args.decoder_layers,
        encoder_attention_heads=size_args.attention_heads,
        decoder_attention_heads=size_args.attention_heads,
        encoder_ffn_dim=size_args.ffn_dim,
        decoder_ffn_dim=size_args.ffn_dim,
        max_position_embeddings=size_args.max_position_embeddings,
        dropout=size_args.dropout,
        # opus-mt's choices: swish feed-forward, embeddings scaled by sqrt(d_model)
        activation_function="swish",
        scale_embedding=True,
    )
    fields = dict(
        vocab_size=len(tokenizer),
        decoder_vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        **ratio,
    )
    config = scratch_config(SimpleAttnMarianConfig, model_args, attention_args, layout, fields, size_fields)
    return SimpleAttnMarianMTModel(config)


def build_encoder_model(
    model_args: ModelArguments,
    attention_args: AttentionArguments,
    size_args: ModelSizeArguments,
    tokenizer,
    model_class: type = SimpleAttnBertForSequenceClassification,
    ignore_mismatched_sizes: bool = False,
    **config_overrides,
):
    """A SimpleAttnBert model (`model_class`) with the requested layout.

    With `--model_name_or_path`: a BERT checkpoint is converted (`convert_bert_checkpoint`, new
    task head), a saved hf_simple_attn checkpoint loaded as it is or converted when a preset or
    layout is given; `--config_name` replaces the checkpoint's config, and `ignore_mismatched_sizes`
    lets a saved model's head of another size (e.g. another number of labels) start anew. Without
    it: a new model of `size_args` (or of `--config_name`'s config) with the tokenizer's vocabulary.
    `config_overrides` are config fields such as `num_labels`, `id2label`, `label2id`, `problem_type`.
    """
    check_preset(attention_args, "encoder")
    layout = parse_attention_layout(attention_args.attention_layout)
    path = model_args.model_name_or_path
    if path is not None:
        config = load_config(path, model_args)
        if model_args.config_name is not None:
            config = checked_config_name(model_args, config)
        if not isinstance(config, SimpleAttnBertConfig):
            source = load_source_model(path, config, BERT_TARGETS, "BertModel", model_args)
        elif changes_layout(attention_args):
            source = model_class.from_pretrained(path, config=config, **pretrained_kwargs(model_args))
        else:
            config.update(config_overrides)
            return model_class.from_pretrained(
                path, config=config, ignore_mismatched_sizes=ignore_mismatched_sizes, **pretrained_kwargs(model_args)
            )
        return convert_bert_checkpoint(
            source,
            preset=attention_args.attention_preset,
            attention_layout=layout,
            model_class=model_class,
            **config_overrides,
        )
    size_fields = dict(
        hidden_size=size_args.d_model,
        num_hidden_layers=size_args.encoder_layers,
        num_attention_heads=size_args.attention_heads,
        intermediate_size=size_args.ffn_dim,
        max_position_embeddings=size_args.max_position_embeddings,
        hidden_dropout_prob=size_args.dropout,
        attention_probs_dropout_prob=size_args.dropout,
    )
    fields = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **config_overrides)
    config = scratch_config(SimpleAttnBertConfig, model_args, attention_args, layout, fields, size_fields)
    return model_class(config)


__all__ = [
    "AttentionArguments",
    "ModelArguments",
    "ModelSizeArguments",
    "build_encoder_model",
    "build_seq2seq_model",
    "compute_length_ratio",
    "load_or_train_tokenizer",
    "load_pretrained_tokenizer",
    "parse_attention_layout",
]
