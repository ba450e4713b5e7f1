"""Turn a pretrained BERT or Marian checkpoint into a model with any attention layout, in one call.

    from hf_simple_attn.recipes.convert import convert_bert_checkpoint, convert_marian_checkpoint

    # Every head a band-6 local head; layers 1-10 of 12 share their query/key weights (all but
    # the last two), seeded by layer 1's pretrained ones:
    model = convert_bert_checkpoint(
        "path/to/bert-base-uncased",
        attention_layout={"encoder_self": {
            "default": {"kind": "local", "masks": ["band-6"]},
            "tie_query_key": "all_but_last_2",
        }},
    )
    model.save_pretrained("bert-band6-tied")
    # ... which is the paper's configuration, also available by name:
    model = convert_bert_checkpoint("path/to/bert-base-uncased", preset="band6-120tied")

    # A named preset, with a new classification head on a bare BertModel checkpoint:
    from hf_simple_attn import SimpleAttnBertForSequenceClassification

    model = convert_bert_checkpoint(
        "path/to/minilm", preset="band2", model_class=SimpleAttnBertForSequenceClassification, num_labels=2
    )

    # A MarianMTModel into hard-coded self-attention (HC-SA):
    model, info = convert_marian_checkpoint("path/to/opus-mt-en-de", preset="hc-sa", output_loading_info=True)

What is carried over: every tensor of the new model whose name (up to the base-model prefix
`bert.` / `model.`) and shape match a tensor of the checkpoint is copied. Query/key weights a
layout no longer uses (hard-coded, recurrent heads) are dropped; tensors the checkpoint lacks (new
heads, a classifier, family parameters) or whose shape changed (fewer query/key slots) keep the
new model's fresh initialisation. Query/key projections tied across layers are seeded by the
first tied layer's pretrained weights (the layer the others point to with
`share_query_key_with`); the other tied layers' pretrained query/key weights are dropped.

The report (logged, and returned with `output_loading_info=True`) lists `copied`, `new` (freshly
initialised, including shape mismatches), `mismatched` (name found but shape differs) and
`dropped` (checkpoint tensors whose values the new model does not hold) parameter names.

A checkpoint of the package's own (any layout) converts the same way, as its own class. The
converted model decodes as the source did (its generation config is copied).
`save_converted_checkpoint` (the command `hf-simple-attn convert MODEL --preset NAME OUTPUT_DIR`)
converts a folder or Hub name by its `model_type` and saves the model with its code, the source's
tokenizer and a model card naming the source and summarising the report (`conversion_summary`).

This module is not part of the code shipped with saved checkpoints, so it may import anything.
"""

import copy
import logging
import os
import re
from collections import Counter
from pathlib import Path

import torch
import transformers
from torch import nn

from ..modeling.configuration_simple_attn import SimpleAttnMarianConfig
from ..modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from ..modeling.modeling_simple_attn_bert import (
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertForTokenClassification,
    SimpleAttnBertModel,
)
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianModel, SimpleAttnMarianMTModel
from ..modeling.pipeline_translation import recorded_languages
from ..modeling.presets import get_preset
from .model_card import write_model_card


logger = logging.getLogger(__name__)

# transformers architecture -> the class it converts to by default.
BERT_TARGETS = {
    "BertModel": SimpleAttnBertModel,
    "BertForMaskedLM": SimpleAttnBertForMaskedLM,
    "BertForPreTraining": SimpleAttnBertForMaskedLM,
    "BertForSequenceClassification": SimpleAttnBertForSequenceClassification,
    "BertForTokenClassification": SimpleAttnBertForTokenClassification,
}
MARIAN_TARGETS = {"MarianModel": SimpleAttnMarianModel, "MarianMTModel": SimpleAttnMarianMTModel}
# The package's own classes, by name: a saved checkpoint of any layout converts to another one as its own class.
OWN_CLASSES = {cls.__name__: cls for cls in (*BERT_TARGETS.values(), *MARIAN_TARGETS.values())}
# A checkpoint's `model_type` -> the kind of model it converts to (`checkpoint_kind`).
CONVERTIBLE_MODEL_TYPES = {
    "marian": "seq2seq",
    SimpleAttnMarianConfig.model_type: "seq2seq",
    "bert": "encoder",
    SimpleAttnBertConfig.model_type: "encoder",
}
# The task a converted model does, by its class (the model card's pipeline tag and usage snippet).
TASK_OF_CLASS = {
    SimpleAttnMarianMTModel: "translation",
    SimpleAttnMarianModel: "feature-extraction",
    SimpleAttnBertModel: "feature-extraction",
    SimpleAttnBertForMaskedLM: "fill-mask",
    SimpleAttnBertForSequenceClassification: "text-classification",
    SimpleAttnBertForTokenClassification: "token-classification",
}
# An index inside a parameter name (`model.encoder.layers.3.self_attn...`), for `parameter_groups`.
NAME_INDEX = re.compile(r"\.\d+\.")

# Config entries that describe the source model, not the converted one.
SOURCE_ONLY_CONFIG_KEYS = ("model_type", "architectures", "transformers_version", "auto_map", "_name_or_path")


def load_source(path_or_model, targets: dict, fallback_architecture: str) -> nn.Module:
    """The pretrained model: given, or loaded as its own architecture when convertible (a transformers class of
    `targets` or one of the package's own classes), else as `fallback_architecture`."""
    if isinstance(path_or_model, nn.Module):
        return path_or_model
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise TypeError(f"path_or_model: expected a folder, a Hub name or a model, got {type(path_or_model).__name__}")
    config = transformers.AutoConfig.from_pretrained(path_or_model)
    for name in config.architectures or []:
        if name in targets:
            return getattr(transformers, name).from_pretrained(path_or_model)
        if name in OWN_CLASSES:
            return OWN_CLASSES[name].from_pretrained(path_or_model)
    return getattr(transformers, fallback_architecture).from_pretrained(path_or_model)


def build_config(config_class, source_config, preset, attention_layout, overrides: dict):
    """The source's config fields, the layout (or preset) and the user's overrides, as a SimpleAttn config."""
    fields = {k: v for k, v in source_config.to_dict().items() if k not in SOURCE_ONLY_CONFIG_KEYS}
    fields.pop("attention_layout", None)
    fields.pop("attention_preset", None)
    fields.update(overrides)
    if preset is not None:
        return config_class.from_preset(preset, attention_layout=attention_layout, **fields)
    return config_class(attention_layout=attention_layout, **fields)


def source_name_candidates(name: str, prefix: str) -> list[str]:
    """Where a target tensor may sit in the source: same name, or with the base-model prefix added or removed."""
    if name.startswith(prefix + "."):
        return [name, name[len(prefix) + 1 :]]
    return [name, f"{prefix}.{name}"]


@torch.no_grad()
def transfer_weights(source: nn.Module, target: nn.Module) -> dict[str, list[str]]:
    """Copy every source tensor whose name and shape match into `target`; report what happened.

    A tensor shared by several names (tied query/key projections, the MLM decoder tied to the
    word embeddings) is filled once, from the source tensor of the name that owns it (the first
    in registration order, i.e. the first tied layer); a source tensor under a tied name counts as
    dropped unless it holds exactly the value that ended up in the shared tensor.
    """
    prefix = target.base_model_prefix
    source_state = source.state_dict()
    owners, aliases, seen = {}, {}, {}
    for name, tensor in target.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            aliases[name] = seen[id(tensor)]
        else:
            seen[id(tensor)] = name
            owners[name] = tensor

    def find_source(name: str) -> str | None:
        return next((c for c in source_name_candidates(name, prefix) if c in source_state), None)

    info = {"copied": [], "new": [], "mismatched": [], "dropped": []}
    used = set()
    for name, tensor in owners.items():
        source_name = find_source(name)
        if source_name is None:
            info["new"].append(name)
        elif source_state[source_name].shape != tensor.shape:
            info["mismatched"].append(name)
            info["new"].append(name)
        else:
            tensor.copy_(source_state[source_name])
            info["copied"].append(name)
            used.add(source_name)
    for name, owner in aliases.items():
        source_name = find_source(name)
        if source_name is not None and torch.equal(source_state[source_name].to(owners[owner].dtype), owners[owner]):
            used.add(source_name)
    info["dropped"] = sorted(set(source_state) - used)
    return info


def log_report(info: dict[str, list[str]], target_name: str) -> None:
    logger.info("converted to %s: %d tensors copied", target_name, len(info["copied"]))
    if info["dropped"]:
        logger.warning("checkpoint tensors not used by %s (dropped): %s", target_name, info["dropped"])
    if info["new"]:
        logger.warning("tensors of %s newly initialised: %s", target_name, info["new"])
    if info["mismatched"]:
        logger.warning("tensors of %s whose shape differs from the checkpoint: %s", target_name, info["mismatched"])


def convert_checkpoint(
    path_or_model,
    *,
    config_class,
    targets: dict,
    fallback_architecture: str,
    preset: str | None,
    attention_layout: dict | None,
    model_class: type | None,
    output_loading_info: bool,
    config_overrides: dict,
):
    """Load the source, build the target config and model, copy the weights, report."""
    source = load_source(path_or_model, targets, fallback_architecture)
    source_kind = type(source).__name__
    if model_class is None:
        if source_kind in OWN_CLASSES:
            model_class = OWN_CLASSES[source_kind]
        elif source_kind in targets:
            model_class = targets[source_kind]
        else:
            raise ValueError(
                f"model_class: no default target for a {source_kind}; pass one of "
                f"{sorted({cls.__name__ for cls in targets.values()})}"
            )
    config = build_config(config_class, source.config, preset, attention_layout, config_overrides)
    model = model_class(config)
    if model.can_generate() and getattr(source, "generation_config", None) is not None:
        # How the source decodes (Marian's beams, length limit, banned pad token) is how the converted model does.
        model.generation_config = copy.deepcopy(source.generation_config)
    info = transfer_weights(source, model)
    log_report(info, model_class.__name__)
    model.eval()
    return (model, info) if output_loading_info else model


def convert_bert_checkpoint(
    path_or_model,
    preset: str | None = None,
    attention_layout: dict | None = None,
    model_class: type | None = None,
    output_loading_info: bool = False,
    **config_overrides,
):
    """A pretrained BERT (folder, Hub name or `BertModel`/`BertFor...` instance) as a SimpleAttnBert model.

    preset / attention_layout: the target layout (a preset, optionally overridden site by site;
    default `base`). model_class: the target class (default: the counterpart of the checkpoint's
    architecture, e.g. `BertForMaskedLM` -> `SimpleAttnBertForMaskedLM`). config_overrides: any
    config field to change (e.g. `num_labels`). Returns the model in eval mode, and with
    `output_loading_info=True` also the report (see the module docstring).
    """
    return convert_checkpoint(
        path_or_model,
        config_class=SimpleAttnBertConfig,
        targets=BERT_TARGETS,
        fallback_architecture="BertModel",
        preset=preset,
        attention_layout=attention_layout,
        model_class=model_class,
        output_loading_info=output_loading_info,
        config_overrides=config_overrides,
    )


def convert_marian_checkpoint(
    path_or_model,
    preset: str | None = None,
    attention_layout: dict | None = None,
    model_class: type | None = None,
    output_loading_info: bool = False,
    **config_overrides,
):
    """A pretrained Marian (folder, Hub name or `MarianMTModel`/`MarianModel` instance) as a SimpleAttnMarian model.

    Same arguments as `convert_bert_checkpoint`; the default target of a `MarianMTModel` is
    `SimpleAttnMarianMTModel`.
    """
    return convert_checkpoint(
        path_or_model,
        config_class=SimpleAttnMarianConfig,
        targets=MARIAN_TARGETS,
        fallback_architecture="MarianMTModel",
        preset=preset,
        attention_layout=attention_layout,
        model_class=model_class,
        output_loading_info=output_loading_info,
        config_overrides=config_overrides,
    )


def checkpoint_kind(model_name_or_path: str) -> str:
    """What the checkpoint (folder or Hub name) converts to, "seq2seq" or "encoder"; a ValueError for a model type
    that cannot be converted."""
    try:
        model_type = transformers.AutoConfig.from_pretrained(model_name_or_path).model_type
    except OSError as error:
        raise ValueError(f"{model_name_or_path}: no checkpoint could be loaded ({error})") from None
    if model_type not in CONVERTIBLE_MODEL_TYPES:
        raise ValueError(
            f"{model_name_or_path}: a {model_type!r} checkpoint cannot be converted; conversion takes Marian "
            f"(marian), BERT (bert) and hf_simple_attn's own ({SimpleAttnMarianConfig.model_type}, "
            f"{SimpleAttnBertConfig.model_type}) checkpoints"
        )
    return CONVERTIBLE_MODEL_TYPES[model_type]


def parameter_groups(names: list[str]) -> list[tuple[str, int]]:
    """Parameter names grouped by module across layers (`model.decoder.layers.*.encoder_attn.mu_ffn.hidden` for its
    weights and biases in every layer), with the number of tensors of each group, in order of first appearance: what
    a card lists instead of every name."""
    return list(Counter(NAME_INDEX.sub(".*.", name.rpartition(".")[0] or name) for name in names).items())


def conversion_summary(info: dict[str, list[str]], source_class: str) -> dict:
    """What a model card says of a conversion (`write_model_card(..., conversion=...)`): the source's class, the
    number of tensors copied, newly initialised, of another shape in the source and dropped, and the groups of the
    new and the dropped tensors (`parameter_groups`)."""
    return {
        "source_class": source_class,
        **{kind: len(names) for kind, names in info.items()},
        "new_groups": parameter_groups(info["new"]),
        "dropped_groups": parameter_groups(info["dropped"]),
    }


def save_converted_checkpoint(
    model_name_or_path: str,
    output_dir,
    *,
    preset: str | None = None,
    attention_layout: dict | None = None,
    model_class: type | None = None,
    tokenizer_name: str | None = None,
    overwrite_output_dir: bool = False,
) -> dict[str, list[str]]:
    """Convert a checkpoint (folder or Hub name: Marian, BERT, or the package's own) and save it in `output_dir`:
    the model with its code (loads with the Auto classes and `trust_remote_code=True` where the package is not
    installed), the source's tokenizer (or `tokenizer_name`'s) and a model card naming the source and what was
    copied, newly initialised and dropped. The target class defaults to the source's counterpart
    (`convert_marian_checkpoint`, `convert_bert_checkpoint`). A non-empty `output_dir` is refused unless
    `overwrite_output_dir` (files of the same names are then replaced, others kept). Returns the loading report."""
    output_dir = Path(output_dir)
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite_output_dir:
        raise FileExistsError(
            f"OUTPUT_DIR {output_dir} exists and is not empty; give a new folder, or pass --overwrite_output_dir to "
            "write into it (files of the same names are replaced)"
        )
    kind = checkpoint_kind(model_name_or_path)
    if preset is not None:
        get_preset(preset, kind)
    tokenizer_source = tokenizer_name or model_name_or_path
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_source)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{tokenizer_source}: no tokenizer could be loaded ({error}); pass the one the model was trained with as "
            "--tokenizer_name"
        ) from None
    converter = convert_marian_checkpoint if kind == "seq2seq" else convert_bert_checkpoint
    source = load_source(
        model_name_or_path,
        MARIAN_TARGETS if kind == "seq2seq" else BERT_TARGETS,
        "MarianMTModel" if kind == "seq2seq" else "BertModel",
    )
    model, info = converter(
        source, preset=preset, attention_layout=attention_layout, model_class=model_class, output_loading_info=True
    )
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    source_lang, target_lang = recorded_languages(source.config, tokenizer)
    write_model_card(
        output_dir,
        model,
        task=TASK_OF_CLASS[type(model)],
        dataset_name=None,
        metrics={},
        language=[source_lang, target_lang] if source_lang and target_lang else None,
        base_model=str(model_name_or_path),
        conversion=conversion_summary(info, type(source).__name__),
    )
    return info


__all__ = [
    "checkpoint_kind",
    "conversion_summary",
    "convert_bert_checkpoint",
    "convert_marian_checkpoint",
    "save_converted_checkpoint",
    "transfer_weights",
]
