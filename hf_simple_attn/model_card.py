"""Model cards for trained checkpoints: `write_model_card` renders `model_cards/model_card.md`.

The card's YAML front matter (built with `huggingface_hub.ModelCardData`) carries
`library_name: transformers`, tags, the pipeline tag and a `model-index` with every evaluation
metric, so the Hub shows the results; the body has the attention layout table
(`hf_simple_attn.analysis.layout_table`), parameter counts, data, training settings, results and
how to load the checkpoint with and without the package.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .analysis import layout_table
from .modeling.presets import get_preset


TEMPLATE_PATH = Path(__file__).resolve().parent.parent / "model_cards" / "model_card.md"


@dataclass(frozen=True)
class TaskCard:
    pipeline_tag: str
    description: str
    example_input: str


TASKS = {
    "translation": TaskCard("translation", "A translation model", "Click OK to close the dialog."),
    "summarization": TaskCard(
        "summarization",
        "A summarization model",
        "This package provides a small command-line tool that converts images between formats.",
    ),
    "text-classification": TaskCard("text-classification", "A text classifier", "A charming and funny film."),
}

# Metric name (without its split prefix) -> (model-index metric type, name shown in the card).
METRIC_NAMES = {
    "bleu": ("sacrebleu", "BLEU"),
    "chrf": ("chrf", "chrF"),
    "rouge1": ("rouge", "ROUGE-1"),
    "rouge2": ("rouge", "ROUGE-2"),
    "rougeL": ("rouge", "ROUGE-L"),
    "rougeLsum": ("rouge", "ROUGE-Lsum"),
    "accuracy": ("accuracy", "accuracy"),
    "f1": ("f1", "F1"),
    "matthews_correlation": ("matthews_correlation", "MCC"),
    "pearson": ("pearsonr", "Pearson"),
    "spearmanr": ("spearmanr", "Spearman"),
    "loss": ("loss", "loss"),
    "gen_len": ("gen_len", "mean generated length"),
}
# Prefixes that Trainer and the example scripts put on metric names -> dataset split.
SPLIT_PREFIXES = {"eval": "validation", "validation": "validation", "predict": "test", "test": "test"}
# Bookkeeping entries of the results dicts that are not model quality.
NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "samples")
HUB_DATASET_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
# Parameter names of attention sublayers: Marian-style `self_attn`/`encoder_attn`, BERT-style `.attention.`.
ATTENTION_PARAMETER = re.compile(r"attn|\.attention\.")


def parse_metrics(metrics: dict) -> list[tuple[str, str, str, str, float]]:
    """(split, metric key, metric type, shown name, value) for each quality metric in `metrics`.

    Keys look like `eval_bleu` or `predict_rougeL`; training metrics and bookkeeping entries
    (runtime, throughput, epoch, sample counts) and non-numeric values are left out.
    """
    parsed = []
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        prefix, _, name = key.partition("_")
        if prefix not in SPLIT_PREFIXES or not name or any(name.endswith(word) for word in NOT_METRICS):
            continue
        metric_type, shown = METRIC_NAMES.get(name, (name, name))
        parsed.append((SPLIT_PREFIXES[prefix], name, metric_type, shown, float(value)))
    return parsed


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def attention_kinds(config) -> list[str]:
    """The attention families a layout uses, in a stable order."""
    kinds = {
        group["kind"]
        for site, layers in config.attention_layout.items()
        if not site.endswith("_ffn")
        for spec in layers
        if spec is not None
        for group in spec["groups"]
    }
    return sorted(kinds)


def size_summary(config) -> str:
    if hasattr(config, "decoder_layers"):
        return (
            f"d_model {config.d_model}, {config.encoder_layers} encoder + {config.decoder_layers} decoder layers, "
            f"{config.encoder_attention_heads}/{config.decoder_attention_heads} heads (encoder/decoder), "
            f"feed-forward {config.encoder_ffn_dim}, vocabulary {config.vocab_size:,}"
        )
    return (
        f"hidden size {config.hidden_size}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
        f"feed-forward {config.intermediate_size}, vocabulary {config.vocab_size:,}"
    )


def write_model_card(
    output_dir,
    model,
    *,
    task: str,
    dataset_name: str | None,
    metrics: dict[str, float],
    language: list[str] | None = None,
    base_model: str | None = None,
    training_summary: dict | None = None,
    model_id: str | None = None,
) -> Path:
    """Render the card of `model` (a SimpleAttn model) into `output_dir/README.md` and return its path.

    task: "translation", "summarization" or "text-classification". dataset_name: a Hub dataset id
    (listed under `datasets` in the metadata) or any description of the data (e.g.
    "hf_simple_attn:embedded", "local files: train.jsonl"). metrics: the scripts' results
    (`eval_bleu`, `predict_chrf`, ...); quality metrics go to the `model-index`. base_model: the
    checkpoint the model was converted from, if any. training_summary: settings shown in a table
    (steps, batch size, SacreBLEU signature, ...). model_id: the name used in the usage snippets
    (default: the folder's name; pass the Hub repository id when pushing).
    """
    if task not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    task_card = TASKS[task]
    config = model.config
    output_dir = Path(output_dir)
    model_id = model_id or output_dir.resolve().name
    dataset_label = dataset_name or "unspecified data"

    parsed_metrics = parse_metrics(metrics)
    eval_results = [
        EvalResult(
            task_type=task_card.pipeline_tag,
            dataset_type=dataset_label,
            dataset_name=dataset_label,
            dataset_split=split,
            metric_type=metric_type,
            metric_name=f"{shown} ({split})",
            metric_value=round(value, 4),
        )
        for split, _, metric_type, shown, value in parsed_metrics
    ]
    preset = config.attention_preset
    card_data = ModelCardData(
        model_name=model_id,
        language=language,
        library_name="transformers",
        pipeline_tag=task_card.pipeline_tag,
        base_model=base_model,
        datasets=[dataset_name] if dataset_name and HUB_DATASET_ID.match(dataset_name) else None,
        tags=["hf_simple_attn", config.model_type, task, *attention_kinds(config), *([preset] if preset else [])],
        metrics=sorted({metric_type for _, _, metric_type, _, _ in parsed_metrics}) or None,
        eval_results=eval_results or None,
    )

    model_kind = "seq2seq" if hasattr(config, "decoder_layers") else "encoder"
    preset_info = get_preset(preset, model_kind) if preset else {}
    num_parameters = sum(p.numel() for p in model.parameters())
    num_attention_parameters = sum(
        p.numel() for name, p in model.named_parameters() if ATTENTION_PARAMETER.search(name)
    )
    languages = " → ".join(language) if language else None
    data_description = f"`{dataset_label}`" + (f" ({languages})" if languages else "") + "."

    card = ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=model_id,
        model_id=model_id,
        task=task,
        task_description=task_card.description + (f" ({languages})" if languages else ""),
        example_input=task_card.example_input,
        preset_title=preset or "custom",
        preset_description=preset_info.get("description"),
        preset_source=preset_info.get("source"),
        base_model=base_model,
        architecture=type(model).__name__,
        model_type=config.model_type,
        config_class=type(config).__name__,
        num_parameters=f"{num_parameters:,}",
        num_attention_parameters=f"{num_attention_parameters:,}",
        size_summary=size_summary(config),
        length_ratio=round(config.length_ratio, 4) if hasattr(config, "length_ratio") else None,
        layout_table=layout_table(config),
        data_description=data_description,
        training_rows=[(key, format_value(value)) for key, value in (training_summary or {}).items()],
        metric_rows=[(split, shown, f"{value:.4g}") for split, _, _, shown, value in parsed_metrics],
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "README.md"
    card.save(path)
    return path


__all__ = ["TEMPLATE_PATH", "parse_metrics", "write_model_card"]
