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

This module is not part of the code shipped with saved checkpoints, so it may import anything.
"""

import logging
import os

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

# Config entries that describe the source model, not the converted one.
SOURCE_ONLY_CONFIG_KEYS = ("model_type", "architectures", "transformers_version", "auto_map", "_name_or_path")


def load_source(path_or_model, targets: dict, fallback_architecture: str) -> nn.Module:
    """The pretrained transformers model: given, or loaded as its own architecture (if convertible)."""
    if isinstance(path_or_model, nn.Module):
        return path_or_model
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise TypeError(f"path_or_model: expected a folder, a Hub name or a model, got {type(path_or_model).__name__}")
    config = transformers.AutoConfig.from_pretrained(path_or_model)
    architectures = [name for name in (config.architectures or []) if name in targets]
    source_class = getattr(transformers, architectures[0] if architectures else fallback_architecture)
    return source_class.from_pretrained(path_or_model)


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
        if source_kind not in targets:
            raise ValueError(
                f"model_class: no default target for a {source_kind}; pass one of "
                f"{sorted({cls.__name__ for cls in targets.values()})}"
            )
        model_class = targets[source_kind]
    config = build_config(config_class, source.config, preset, attention_layout, config_overrides)
    model = model_class(config)
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


__all__ = ["convert_bert_checkpoint", "convert_marian_checkpoint", "transfer_weights"]
