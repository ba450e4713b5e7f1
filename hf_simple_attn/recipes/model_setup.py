"""The tokenizer and model of a training run, from the scripts' arguments (`arguments.py`).

`build_seq2seq_model` / `build_encoder_model` give a model with the requested attention layout: a
pretrained checkpoint converted to it (`--model_name_or_path`), or a new model trained from scratch
(`ModelSizeArguments`, or the config of `--config_name`). `load_or_train_tokenizer`
(`load_pretrained_tokenizer`, `resumed_tokenizer`) gives the matching tokenizer, and
`length_ratio_for_run` (`compute_length_ratio`) the γ that centres hard-coded cross attention.
"""

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig, PreTrainedTokenizerBase
from transformers.utils import CONFIG_NAME

from ..modeling.configuration_simple_attn import SimpleAttnMarianConfig
from ..modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from ..modeling.modeling_simple_attn_bert import SimpleAttnBertForSequenceClassification
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from ..modeling.presets import get_preset
from .arguments import AttentionArguments, ModelArguments, ModelSizeArguments, parse_attention_layout
from .convert import (
    BERT_TARGETS,
    MARIAN_TARGETS,
    build_config,
    convert_bert_checkpoint,
    convert_marian_checkpoint,
)
from .sizes import bert_size_fields, marian_size_fields
from .tokenization import train_tokenizer


logger = logging.getLogger(__name__)


def check_trained_from_scratch(model_args: ModelArguments, do_train: bool) -> None:
    """Without `--model_name_or_path` there is nothing to evaluate but a model trained here."""
    if model_args.model_name_or_path is None and not do_train:
        raise ValueError("Without --model_name_or_path the model is trained from scratch: pass --do_train.")


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


def resumed_tokenizer(model_args: ModelArguments, checkpoint: str | None) -> PreTrainedTokenizerBase | None:
    """The tokenizer saved with `checkpoint` when a run from scratch resumes (its tokenizer was trained on the
    data: the one the checkpoint was trained with, not a new one), else None."""
    if model_args.model_name_or_path is None and model_args.tokenizer_name is None and checkpoint is not None:
        return AutoTokenizer.from_pretrained(checkpoint)
    return None


def length_ratio_for_run(
    attention_args: AttentionArguments,
    model_args: ModelArguments,
    checkpoint: str | None,
    estimate: Callable[[], float] | None,
) -> float | None:
    """γ for hard-coded cross attention: `--length_ratio`, else the one the model was trained with
    (`trained_length_ratio`), else `estimate()` on the training data (None when not training: keep the config's)."""
    if attention_args.length_ratio is not None:
        return attention_args.length_ratio
    length_ratio = trained_length_ratio(model_args, checkpoint)
    if length_ratio is None and estimate is not None:
        length_ratio = estimate()
        logger.info("Length ratio γ of the training data (source / target tokens): %.4f", length_ratio)
    return length_ratio


def trained_length_ratio(model_args: ModelArguments, checkpoint: str | None) -> float | None:
    """The γ of the `checkpoint` a run resumes, else of the saved hf_simple_attn model it continues
    (`--model_name_or_path`); None for any other run. Hard-coded cross attention's centres must not move under
    weights trained with them (nor with the data a resumed run is given)."""
    if checkpoint is not None and (Path(checkpoint) / CONFIG_NAME).is_file():
        saved, _ = PreTrainedConfig.get_config_dict(checkpoint)
        if saved.get("model_type") == SimpleAttnMarianConfig.model_type:
            return saved.get("length_ratio")
    if model_args.model_name_or_path is not None:
        config = checkpoint_config(model_args)
        if isinstance(config, SimpleAttnMarianConfig):
            return config.length_ratio
    return None


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


def checkpoint_config(model_args: ModelArguments) -> PreTrainedConfig:
    """The config of `--model_name_or_path`, or of `--config_name` (which must be of the same kind) when given."""
    config = load_config(model_args.model_name_or_path, model_args)
    if model_args.config_name is None:
        return config
    replacement = load_config(model_args.config_name, model_args)
    if type(replacement) is not type(config):
        raise ValueError(
            f"--config_name: {model_args.config_name} is a {type(replacement).__name__}, but --model_name_or_path "
            f"{model_args.model_name_or_path} holds a {type(config).__name__}"
        )
    return replacement


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
    """Refuse an unknown `--attention_preset` before any checkpoint is loaded (`presets.get_preset`'s check)."""
    if attention_args.attention_preset is not None:
        try:
            get_preset(attention_args.attention_preset, model_kind)
        except ValueError as error:
            raise ValueError(f"--{error}") from None


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
    if model_args.model_name_or_path is not None:
        return pretrained_seq2seq_model(model_args, attention_args, layout, ratio)
    size_fields = marian_size_fields(
        size_args.d_model,
        size_args.encoder_layers,
        size_args.decoder_layers,
        size_args.attention_heads,
        size_args.ffn_dim,
    ) | dict(
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


def pretrained_seq2seq_model(model_args, attention_args, layout: dict | None, ratio: dict) -> SimpleAttnMarianMTModel:
    """`--model_name_or_path` as a SimpleAttnMarianMTModel: a saved one as it is (its γ replaced by `ratio` when
    given), anything else converted to the preset and layout."""
    path = model_args.model_name_or_path
    config = checkpoint_config(model_args)
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
    if model_args.model_name_or_path is not None:
        return pretrained_encoder_model(
            model_args, attention_args, layout, model_class, ignore_mismatched_sizes, config_overrides
        )
    size_fields = bert_size_fields(
        size_args.d_model, size_args.encoder_layers, size_args.attention_heads, size_args.ffn_dim
    ) | dict(
        max_position_embeddings=size_args.max_position_embeddings,
        hidden_dropout_prob=size_args.dropout,
        attention_probs_dropout_prob=size_args.dropout,
    )
    fields = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **config_overrides)
    config = scratch_config(SimpleAttnBertConfig, model_args, attention_args, layout, fields, size_fields)
    return model_class(config)


def pretrained_encoder_model(
    model_args, attention_args, layout: dict | None, model_class: type, ignore_mismatched_sizes: bool, overrides: dict
):
    """`--model_name_or_path` as a `model_class`: a saved SimpleAttnBert one as it is (with `overrides`), anything
    else converted to the preset and layout."""
    path = model_args.model_name_or_path
    config = checkpoint_config(model_args)
    if not isinstance(config, SimpleAttnBertConfig):
        source = load_source_model(path, config, BERT_TARGETS, "BertModel", model_args)
    elif changes_layout(attention_args):
        source = model_class.from_pretrained(path, config=config, **pretrained_kwargs(model_args))
    else:
        config.update(overrides)
        return model_class.from_pretrained(
            path, config=config, ignore_mismatched_sizes=ignore_mismatched_sizes, **pretrained_kwargs(model_args)
        )
    return convert_bert_checkpoint(
        source,
        preset=attention_args.attention_preset,
        attention_layout=layout,
        model_class=model_class,
        **overrides,
    )


__all__ = [
    "build_encoder_model",
    "build_seq2seq_model",
    "compute_length_ratio",
    "length_ratio_for_run",
    "load_or_train_tokenizer",
    "load_pretrained_tokenizer",
    "resumed_tokenizer",
]
