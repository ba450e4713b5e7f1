"""Arguments and model builders shared by the training scripts in `training/`.

Every script parses these dataclasses with `HfArgumentParser` next to its own data arguments
and `(Seq2Seq)TrainingArguments`, so the options read the same everywhere:

- `ModelArguments`: start from a pretrained checkpoint (`--model_name_or_path`, converted to the
  chosen layout) or, without it, train from scratch;
- `AttentionArguments`: `--attention_preset`, `--attention_layout` (JSON), `--length_ratio`;
- `ModelSizeArguments`: the size of a model trained from scratch (`--d_model`, `--encoder_layers`, ...).

`build_seq2seq_model` / `build_encoder_model` turn them into a model; `load_or_train_tokenizer`
gives the matching tokenizer and `compute_length_ratio` the γ that centres hard-coded cross
attention. `parse_script_arguments`, `setup_logging` and `checkpoint_to_resume` are the start-up
steps every script shares.
"""

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import transformers
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser, PreTrainedTokenizerBase
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .convert import convert_bert_checkpoint, convert_marian_checkpoint
from .modeling.configuration_simple_attn import SimpleAttnMarianConfig
from .modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from .modeling.modeling_simple_attn_bert import SimpleAttnBertForSequenceClassification
from .modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from .modeling.presets import list_presets
from .tokenization import train_tokenizer


logger = logging.getLogger(__name__)


def parse_script_arguments(argument_classes: tuple, argv: list[str] | None) -> tuple:
    """Parse `argv` (default: sys.argv) into instances of `argument_classes`; a single `.json`
    argument is read as a file holding every argument, as in transformers' example scripts."""
    parser = HfArgumentParser(argument_classes)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


def setup_logging(script_logger: logging.Logger, training_args) -> None:
    """Log to stdout: the script and this package (card, upload, tokenizer messages) at INFO on the
    process that logs, `datasets` and `transformers` at `--log_level` (warnings by default)."""
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


def load_or_train_tokenizer(
    model_args: ModelArguments,
    size_args: ModelSizeArguments,
    training_texts: Callable[[], Iterable[str]],
    model_max_length: int = 256,
) -> PreTrainedTokenizerBase:
    """The tokenizer of `--tokenizer_name` or `--model_name_or_path`, else one trained on `training_texts()`.

    `training_texts` is called only when a tokenizer is trained (pass source and target texts).
    """
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name is not None:
        return AutoTokenizer.from_pretrained(
            name, cache_dir=model_args.cache_dir, revision=model_args.model_revision, token=model_args.token
        )
    tokenizer = train_tokenizer(training_texts(), vocab_size=size_args.vocab_size, model_max_length=model_max_length)
    logger.info("trained a BPE tokenizer of %d entries on the training data", len(tokenizer))
    return tokenizer


def pretrained_kwargs(model_args: ModelArguments) -> dict:
    return {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision, "token": model_args.token}


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
    given. Without it: a new model of `size_args` whose vocabulary and special ids are the
    tokenizer's. `length_ratio` (None: keep the config's) is stored in the config.
    """
    check_preset(attention_args, "seq2seq")
    layout = parse_attention_layout(attention_args.attention_layout)
    ratio = {} if length_ratio is None else {"length_ratio": float(length_ratio)}
    path = model_args.model_name_or_path
    if path is not None:
        source_config = AutoConfig.from_pretrained(path, **pretrained_kwargs(model_args))
        is_ours = isinstance(source_config, SimpleAttnMarianConfig)
        if is_ours and not changes_layout(attention_args):
            return SimpleAttnMarianMTModel.from_pretrained(path, **pretrained_kwargs(model_args), **ratio)
        source = SimpleAttnMarianMTModel.from_pretrained(path, **pretrained_kwargs(model_args)) if is_ours else path
        return convert_marian_checkpoint(
            source,
            preset=attention_args.attention_preset,
            attention_layout=layout,
            model_class=SimpleAttnMarianMTModel,
            **ratio,
        )
    fields = dict(
        vocab_size=len(tokenizer),
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
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        **ratio,
    )
    config = new_config(SimpleAttnMarianConfig, attention_args, layout, fields)
    return SimpleAttnMarianMTModel(config)


def build_encoder_model(
    model_args: ModelArguments,
    attention_args: AttentionArguments,
    size_args: ModelSizeArguments,
    tokenizer,
    model_class: type = SimpleAttnBertForSequenceClassification,
    **config_overrides,
):
    """A SimpleAttnBert model (`model_class`) with the requested layout.

    With `--model_name_or_path`: a BERT checkpoint is converted (`convert_bert_checkpoint`, new
    task head), a saved hf_simple_attn checkpoint loaded as it is or converted when a preset or
    layout is given. Without it: a new model of `size_args` with the tokenizer's vocabulary.
    `config_overrides` are config fields such as `num_labels`, `id2label`, `label2id`, `problem_type`.
    """
    check_preset(attention_args, "encoder")
    layout = parse_attention_layout(attention_args.attention_layout)
    path = model_args.model_name_or_path
    if path is not None:
        source_config = AutoConfig.from_pretrained(path, **pretrained_kwargs(model_args))
        is_ours = isinstance(source_config, SimpleAttnBertConfig)
        if is_ours and not changes_layout(attention_args):
            return model_class.from_pretrained(
                path, **pretrained_kwargs(model_args), ignore_mismatched_sizes=True, **config_overrides
            )
        source = model_class.from_pretrained(path, **pretrained_kwargs(model_args)) if is_ours else path
        return convert_bert_checkpoint(
            source,
            preset=attention_args.attention_preset,
            attention_layout=layout,
            model_class=model_class,
            **config_overrides,
        )
    fields = dict(
        vocab_size=len(tokenizer),
        hidden_size=size_args.d_model,
        num_hidden_layers=size_args.encoder_layers,
        num_attention_heads=size_args.attention_heads,
        intermediate_size=size_args.ffn_dim,
        max_position_embeddings=size_args.max_position_embeddings,
        hidden_dropout_prob=size_args.dropout,
        attention_probs_dropout_prob=size_args.dropout,
        pad_token_id=tokenizer.pad_token_id,
        **config_overrides,
    )
    config = new_config(SimpleAttnBertConfig, attention_args, layout, fields)
    return model_class(config)


__all__ = [
    "AttentionArguments",
    "ModelArguments",
    "ModelSizeArguments",
    "build_encoder_model",
    "build_seq2seq_model",
    "compute_length_ratio",
    "load_or_train_tokenizer",
    "parse_attention_layout",
]
