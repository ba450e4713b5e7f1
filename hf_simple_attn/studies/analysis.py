"""The papers' analyses of a trained translation checkpoint: attention entropy and locality, GMM gates and means,
hard-retrieval agreement with a dot-product model, BLEU by source length, attention heatmaps.

The attention analyses read the weights every head actually used (`output_attentions=True`, (batch, heads,
query, key)) on real sentences, the decoder teacher-forced on the references so that every target position
exists; batches are right-padded and only real (non-padded) query rows count. Hard-coded Gaussian rows are not
renormalised and local masks multiply the softmax, so a row may sum to less than 1: entropy, locality and
attended distance are computed on the row renormalised to sum 1 (rows that sum to 0, e.g. a `prev-1` head at the
first token, are left out of them), and the mean row `mass` is reported next to them. Results are JSON-able: per
site a list over layers, None where the sublayer is `none`, else one value per head.

    hf-simple-attn analyze runs/hc-sa-en-de --test_file test.jsonl --output_dir runs/hc-sa-en-de/analysis

`analyze_checkpoint` runs every analysis that applies to a checkpoint's layout and writes `analysis.json` and PNGs;
`analyze_run` is the study runner's hook (`hf_simple_attn.studies.runner.run_study(..., analyze=analyze_run)`).
"""

import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from ..data.files import DataFileError, checked_value, file_rows
from ..modeling.attention_gaussian_mixture import GaussianMixtureHeads
from ..modeling.attention_heads import SITES
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from .runner import Run, Study, evaluation_texts, main_runs, run_finished, write_text_atomically
from .summary import pyplot, save_figure


logger = logging.getLogger(__name__)

CHUNK_SIZE = 16  # sentences per forward pass
STUDY_SENTENCES = 100  # test sentences a study run is analysed on
LENGTH_BUCKETS = (10, 20, 30, 40, 50)  # upper bounds of the source-length buckets, in words
GATE_BINS = 10
POSITION_BINS = 10
CONVENTIONS = {
    "rows": "real query positions, decoder teacher-forced on the references",
    "entropy": "nats, of each row renormalised to sum 1; mass: the row's sum before that (< 1 for hard-coded "
    "rows cut at borders and masked local heads)",
    "locality": "within_1/within_2: share of the renormalised row within ±1/±2 positions of the diagonal; "
    "distance: mean |j - centre|; centre i for self attention, i·J/I for cross attention (J, I: the sentence's "
    "source and target lengths)",
    "gmm_gates": "gate g (Eq. 14) pooled over heads and rows; mean_position: ω-weighted mean of μ/J against "
    "(i+1)/I (1-based, as the paper's μ)",
    "retrieval_agreement": "share of rows whose retrieved key equals the argmax of the base model's attention at "
    "the same site, layer and head; each model runs on its own hidden states",
}


class TokenizationMismatch(ValueError):
    """Two checkpoints tokenize the same sentences differently, so their attention positions cannot be compared."""


# ---- inputs ------------------------------------------------------------------------------------------------------


def load_checkpoint(run_dir: str | os.PathLike):
    """(model in eval mode, tokenizer) of a saved `SimpleAttnMarianMTModel` folder."""
    return SimpleAttnMarianMTModel.from_pretrained(run_dir).eval(), AutoTokenizer.from_pretrained(run_dir)


def read_pairs(path: str | os.PathLike, source_lang: str, target_lang: str) -> list[tuple[str, str]]:
    """(source, reference) pairs of a data file as the training scripts read one: json/jsonl rows of
    `{"translation": {lang: text}}` or `{lang: text}`, csv/tsv columns named by language. A bad row raises
    `DataFileError` naming the file, the line and the field."""
    path = str(path)
    if not os.path.isfile(path):
        raise DataFileError(f"{path}: no such file")
    pairs = []
    for place, row in file_rows(path):
        prefix = "translation." if "translation" in row else ""
        source, reference = (
            checked_value(path, place, row, prefix + lang, text=True) for lang in (source_lang, target_lang)
        )
        pairs.append((source, reference))
    return pairs


def encode_pairs(tokenizer, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """One right-padded batch: input_ids, attention_mask (batch, src_len); labels, decoder_attention_mask
    (batch, tgt_len)."""
    sources, targets = zip(*pairs)
    source = tokenizer(list(sources), padding=True, truncation=True, return_tensors="pt")
    target = tokenizer(text_target=list(targets), padding=True, truncation=True, return_tensors="pt")
    return {
        "input_ids": source["input_ids"],
        "attention_mask": source["attention_mask"],
        "labels": target["input_ids"],
        "decoder_attention_mask": target["attention_mask"],
    }


def chunks(batch: dict[str, torch.Tensor], size: int = CHUNK_SIZE):
    """Slices of `size` sentences, each cut to its longest source and target."""
    for start in range(0, len(batch["input_ids"]), size):
        part = {key: value[start : start + size] for key, value in batch.items()}
        source_length = int(part["attention_mask"].sum(-1).max())
        target_length = int(part["decoder_attention_mask"].sum(-1).max())
        yield {
            key: value[:, : source_length if key in ("input_ids", "attention_mask") else target_length]
            for key, value in part.items()
        }


def check_same_tokenization(batch: dict, base_batch: dict) -> None:
    for key in ("input_ids", "labels"):
        if batch[key].shape != base_batch[key].shape or not torch.equal(batch[key], base_batch[key]):
            raise TokenizationMismatch(
                f"the two checkpoints tokenize the test sentences differently ({key} differ); comparing attention "
                "positions needs identical tokenizers (e.g. both trained on the same data with the same vocab_size)"
            )


# ---- attention weights and their row statistics -----------------------------------------------------------------


@torch.inference_mode()
def teacher_forced(model, batch: dict, **kwargs):
    """The forward pass in eval mode (the model is switched to it), the decoder reading the references shifted
    right, without a cache."""
    model.eval()
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        decoder_input_ids=model.prepare_decoder_input_ids_from_labels(batch["labels"]),
        decoder_attention_mask=batch["decoder_attention_mask"],
        use_cache=False,
        **kwargs,
    )


def attention_maps(model, batch: dict) -> dict[str, list[torch.Tensor | None]]:
    """Per site and layer the weights every head used, (batch, heads, query, key); None where there is no sublayer."""
    outputs = teacher_forced(model, batch, output_attentions=True)
    return {
        "encoder_self": list(outputs.encoder_attentions),
        "decoder_self": list(outputs.decoder_attentions),
        "cross": list(outputs.cross_attentions),
    }


def site_masks(batch: dict, site: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(real queries (batch, q), real keys (batch, k), diagonal centre of each row (batch, q)) of a site.

    The centre is i for self attention and i·J/I for cross attention (J, I: the sentence's source and target lengths).
    """
    source, target = batch["attention_mask"].bool(), batch["decoder_attention_mask"].bool()
    queries = source if site == "encoder_self" else target
    keys = target if site == "decoder_self" else source
    centres = torch.arange(queries.shape[1], dtype=torch.float32)[None]  # (1, q)
    if site == "cross":
        centres = centres * source.sum(-1, keepdim=True) / target.sum(-1, keepdim=True)
    return queries, keys, centres.expand(queries.shape)


def row_statistics(weights: torch.Tensor, key_mask: torch.Tensor, centres: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per row (batch, heads, q): `mass` (the row's sum) and, on the row renormalised to sum 1, `entropy` (nats),
    `within_1` / `within_2` (mass at |j - centre| <= 1 / 2) and `distance` (mean |j - centre|); NaN where the mass
    is 0. weights: (batch, heads, q, k); key_mask: (batch, k) bool; centres: (batch, q)."""
    weights = weights.float() * key_mask[:, None, None, :]
    mass = weights.sum(-1)
    probabilities = weights / mass[..., None]  # 0/0 = NaN on empty rows
    distance = (torch.arange(weights.shape[-1]) - centres[..., None]).abs()[:, None]  # (batch, 1, q, k)
    return {
        "mass": mass,
        "entropy": -torch.special.xlogy(probabilities, probabilities).sum(-1),
        "within_1": (probabilities * (distance <= 1)).sum(-1),
        "within_2": (probabilities * (distance <= 2)).sum(-1),
        "distance": (probabilities * distance).sum(-1),
    }


def head_means(rows: list[torch.Tensor]) -> list[float | None]:
    """Mean per head over rows gathered from several chunks, each (heads, rows); NaN rows left out."""
    means = torch.cat(rows, dim=1).double().nanmean(dim=1).tolist()
    return [None if math.isnan(value) else value for value in means]


def attention_statistics(model, batch: dict) -> dict[str, list[dict | None]]:
    """Per site, layer and statistic of `row_statistics`: its mean over the real query rows, one value per head."""
    rows = {}  # site -> per layer None or {statistic: [(heads, rows) per chunk]}
    for part in chunks(batch):
        for site, layers in attention_maps(model, part).items():
            queries, keys, centres = site_masks(part, site)
            site_rows = rows.setdefault(site, [None if weights is None else {} for weights in layers])
            for weights, layer_rows in zip(layers, site_rows):
                if weights is None:
                    continue
                for name, values in row_statistics(weights, keys, centres).items():
                    layer_rows.setdefault(name, []).append(values.transpose(0, 1)[:, queries])
    return {
        site: [None if layer is None else {name: head_means(v) for name, v in layer.items()} for layer in layers]
        for site, layers in rows.items()
    }


def select(statistics: dict[str, list[dict | None]], names: tuple[str, ...]) -> dict[str, list[dict | None]]:
    return {
        site: [None if layer is None else {name: layer[name] for name in names} for layer in layers]
        for site, layers in statistics.items()
    }


def attention_entropy(model, batch: dict) -> dict[str, list[dict | None]]:
    """Per site, layer and head: mean `entropy` (nats) of the renormalised rows and mean row `mass`."""
    return select(attention_statistics(model, batch), ("entropy", "mass"))


def locality(model, batch: dict) -> dict[str, list[dict | None]]:
    """Per site, layer and head: mean share of the renormalised row within ±1 (`within_1`) and ±2 (`within_2`)
    positions of the diagonal, and the mean attended `distance` |j - centre|; the diagonal's centre is i, or i·J/I
    in cross attention."""
    return select(attention_statistics(model, batch), ("within_1", "within_2", "distance"))


# ---- Gaussian mixture cross attention ---------------------------------------------------------------------------


def mixture_summary(module: GaussianMixtureHeads, query: torch.Tensor, key_length: int, context) -> dict:
    """A GMM group's gate g (None unless its fusion is `gate`) and ω-weighted mean μ/J, each (batch, heads, q),
    recomputed from its query (batch, heads, q, head_dim) as its forward computes them."""
    real_keys = context.key_padding_mask
    if real_keys is None:
        real_keys = torch.ones(query.shape[0], key_length, dtype=torch.bool, device=query.device)
    source_length = real_keys.sum(-1).to(torch.float32)  # J, (batch,)
    log_weight, _, mean, _ = module.mixture_parameters(query.float(), source_length, context)  # (batch, heads, q, K)
    gate = None if module.gate_ffn is None else torch.sigmoid(module.gate_ffn(query)).squeeze(-1)
    return {"gate": gate, "mean_position": (log_weight.softmax(-1) * mean).sum(-1) / source_length[:, None, None]}


def gate_distribution(gates: np.ndarray) -> dict | None:
    if gates.size == 0:
        return None
    counts, edges = np.histogram(gates, bins=GATE_BINS, range=(0.0, 1.0))
    return {
        "mean": float(gates.mean()),
        "std": float(gates.std()),
        "bin_edges": edges.tolist(),
        "counts": counts.tolist(),
    }


def position_trend(target: np.ndarray, source: np.ndarray) -> dict:
    """Pearson correlation of μ/J with (i+1)/I, and the mean μ/J per bin of (i+1)/I over (0, 1] (None if empty)."""
    bins = np.clip(np.ceil(target * POSITION_BINS).astype(int) - 1, 0, POSITION_BINS - 1)
    counts = np.bincount(bins, minlength=POSITION_BINS)
    sums = np.bincount(bins, weights=source, minlength=POSITION_BINS)
    varies = target.std() > 0 and source.std() > 0
    return {
        "correlation": float(np.corrcoef(target, source)[0, 1]) if varies else None,
        "bin_upper_edges": [(index + 1) / POSITION_BINS for index in range(POSITION_BINS)],
        "mean": [float(total / count) if count else None for total, count in zip(sums, counts)],
        "count": counts.tolist(),
    }


def gmm_gates(model, batch: dict) -> list[dict | None]:
    """Per decoder layer with gaussian_mixture cross heads (None elsewhere): the gate g over real target rows and
    heads (`gate`: histogram over [0, 1], mean, std; None unless the fusion is `gate`), and the ω-weighted mean μ/J
    against the relative target position (i+1)/I (`mean_position`: correlation, mean μ/J per bin of (i+1)/I).

    g and μ are recomputed by forward hooks on the GMM groups from the queries they receive.
    """
    captured, layers = [], {}  # layers: decoder layer -> {"fusion", "gate", "target", "source"}

    def record(module, args, output):
        query, _, value, context = args[:4]  # the group's forward(query, key, value, context, output_attentions)
        captured.append((module, mixture_summary(module, query, value.shape[-2], context)))

    hooks = [
        module.register_forward_hook(record) for module in model.modules() if isinstance(module, GaussianMixtureHeads)
    ]
    try:
        for part in chunks(batch):
            captured.clear()
            teacher_forced(model, part)
            rows = part["decoder_attention_mask"].bool()  # (batch, q)
            target = (torch.arange(rows.shape[1]) + 1) / rows.sum(-1, keepdim=True)  # (i+1)/I, (batch, q)
            for module, summary in captured:
                layer = layers.setdefault(
                    module.layer_idx, {"fusion": module.spec["fusion"], "gate": [], "target": [], "source": []}
                )
                heads = summary["mean_position"].shape[1]
                layer["target"].append(target[rows].repeat(heads))  # head-major, as the flattened (heads, rows) below
                layer["source"].append(summary["mean_position"].transpose(0, 1)[:, rows].flatten())
                if summary["gate"] is not None:
                    layer["gate"].append(summary["gate"].transpose(0, 1)[:, rows].flatten())
    finally:
        for hook in hooks:
            hook.remove()
    return [
        summarize_mixture(layers[index]) if index in layers else None for index in range(model.config.decoder_layers)
    ]


def summarize_mixture(layer: dict) -> dict:
    values = {
        name: torch.cat(layer[name]).double().numpy() if layer[name] else np.zeros(0)
        for name in ("gate", "target", "source")
    }
    return {
        "fusion": layer["fusion"],
        "gate": gate_distribution(values["gate"]),
        "mean_position": position_trend(values["target"], values["source"]),
    }


# ---- hard retrieval ---------------------------------------------------------------------------------------------


def retrieval_heads(config) -> dict[str, dict[int, list[int]]]:
    """site -> layer -> indices of its hard_retrieval heads, for the sites and layers that have any."""
    found = {}
    for site in SITES:
        for layer, spec in enumerate(config.attention_layout.get(site, [])):
            start = 0
            for group in spec["groups"] if spec is not None else []:
                if group["kind"] == "hard_retrieval":
                    heads = found.setdefault(site, {}).setdefault(layer, [])
                    heads += range(start, start + group["num_heads"])
                start += group["num_heads"]
    return found


def retrieval_agreement(hard_model, base_model, batch: dict) -> dict[str, list[dict | None]]:
    """Per site with hard_retrieval heads, per layer (None without them): for each such head, the share of real query
    rows whose retrieved key (argmax of QKᵀ at inference) is also the argmax of `base_model`'s attention at the same
    site, layer and head (`agreement`), and its mean over those heads.

    Both models read the same batch, teacher-forced, and each runs on its own hidden states: after the first hard
    sublayer on the way through the model the two models' queries differ, so even with copied weights the
    agreement is exactly 1 only at sublayers that the hard heads have not yet fed (argmax of the scores = argmax of
    their softmax).
    """
    heads = retrieval_heads(hard_model.config)
    rows = {site: {layer: [] for layer in layers} for site, layers in heads.items()}
    for part in chunks(batch):
        hard_maps, base_maps = attention_maps(hard_model, part), attention_maps(base_model, part)
        for site, layers in heads.items():
            queries = site_masks(part, site)[0]
            for layer, indices in layers.items():
                hard, base = hard_maps[site][layer], base_maps[site][layer]
                if base is None or base.shape != hard.shape:
                    raise ValueError(f"{site} layer {layer}: the base model has no sublayer with the same heads there")
                same = hard[:, indices].argmax(-1) == base[:, indices].argmax(-1)  # (batch, heads, q)
                rows[site][layer].append(same.transpose(0, 1)[:, queries])
    return {
        site: [
            agreement_of(heads[site][layer], rows[site][layer]) if layer in rows[site] else None
            for layer in range(len(specs))
        ]
        for site, specs in hard_model.config.attention_layout.items()
        if site in heads
    }


def agreement_of(heads: list[int], rows: list[torch.Tensor]) -> dict:
    """rows: per chunk (heads, rows) bool, True where the two argmaxes agree."""
    return {"heads": heads, "agreement": head_means(rows), "mean": float(torch.cat(rows, dim=1).double().mean())}


# ---- BLEU by source length --------------------------------------------------------------------------------------


def bucket_labels(buckets: tuple[int, ...]) -> list[str]:
    """(10, 20) -> ["0-10", "11-20", "21+"]."""
    lows = [0, *(bound + 1 for bound in buckets)]
    return [f"{low}-{high}" for low, high in zip(lows, buckets)] + [f"{lows[-1]}+"]


def bleu_by_length(
    sources: list[str], predictions: list[str], references: list[str], buckets: tuple[int, ...] = LENGTH_BUCKETS
) -> dict[str, dict]:
    """SacreBLEU corpus BLEU (`sacrebleu.corpus_bleu`) per bucket of source length in words (whitespace split):
    up to buckets[0], up to buckets[1], ..., longer than the last; each with its sentence `count` (BLEU None if 0)."""
    import sacrebleu

    if not len(sources) == len(predictions) == len(references):
        raise ValueError(
            f"bleu_by_length: {len(sources)} sources, {len(predictions)} predictions, {len(references)} references"
        )
    labels = bucket_labels(buckets)
    grouped = {label: ([], []) for label in labels}
    for source, prediction, reference in zip(sources, predictions, references):
        words = len(source.split())
        bucket = labels[next((index for index, bound in enumerate(buckets) if words <= bound), len(buckets))]
        grouped[bucket][0].append(prediction)
        grouped[bucket][1].append(reference)
    return {
        label: {
            "count": len(hypotheses),
            "bleu": sacrebleu.corpus_bleu(hypotheses, [refs]).score if hypotheses else None,
        }
        for label, (hypotheses, refs) in grouped.items()
    }


def read_predictions(run_dir: Path, count: int) -> list[str] | None:
    """The run's `generated_predictions.txt` (one per line), or None if it is missing or has not `count` lines."""
    path = run_dir / "generated_predictions.txt"
    if not path.is_file():
        return None
    predictions = path.read_text(encoding="utf-8").removesuffix("\n").split("\n")
    if len(predictions) != count:
        logger.warning("%s has %d lines for %d test pairs: no BLEU by length", path, len(predictions), count)
        return None
    return predictions


# ---- plots ------------------------------------------------------------------------------------------------------


def attention_heatmaps(model, tokenizer, source: str, target: str, site: str, layer: int, path) -> Path:
    """Every head of one sublayer on one sentence pair (teacher-forced), in one PNG: queries as rows, keys as columns.

    Decoder rows are labelled with the target token predicted there; decoder-self columns with the token read
    there (the previous target token; the first is the start token). Colours span [0, 1], so rows summing to
    less than 1 look fainter.
    """
    batch = encode_pairs(tokenizer, [(source, target)])
    weights = attention_maps(model, batch)[site][layer]
    if weights is None:
        raise ValueError(f"{site} layer {layer} has no attention sublayer (its spec is 'none')")
    source_tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    target_tokens = tokenizer.convert_ids_to_tokens(batch["labels"][0])
    read_tokens = tokenizer.convert_ids_to_tokens(model.prepare_decoder_input_ids_from_labels(batch["labels"])[0])
    rows = source_tokens if site == "encoder_self" else target_tokens
    columns = read_tokens if site == "decoder_self" else source_tokens
    heads = weights.shape[1]
    grid_columns = min(heads, 4)
    grid_rows = math.ceil(heads / grid_columns)
    width, height = 0.22 * len(columns) + 1.5, 0.22 * len(rows) + 1.5  # inches per head
    plt = pyplot()
    figure, axes = plt.subplots(
        grid_rows, grid_columns, figsize=(width * grid_columns, height * grid_rows), squeeze=False
    )
    for head, axis in enumerate(axes.flat):
        if head >= heads:
            axis.set_axis_off()
            continue
        axis.imshow(weights[0, head].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=6)
        axis.set_yticks(range(len(rows)), rows, fontsize=6)
        axis.set_title(f"head {head}", fontsize=8)
    figure.suptitle(f"{site}, layer {layer}")
    return save_figure(plt, figure, path)


def layer_head_chart(
    values: dict[str, list[dict | None]], name: str, title: str, path: Path, limits: tuple[float, float] | None = None
) -> Path:
    """One panel per site: the statistic `name` per layer (rows) and head (columns); absent ones blank. Every panel
    shares one colour scale: `limits`, or 0 to the largest value."""
    sites = [site for site, layers in values.items() if any(layers)]
    grids = {}
    for site in sites:
        layers = values[site]
        grid = np.full((len(layers), max(len(layer[name]) for layer in layers if layer)), np.nan)
        for index, layer in enumerate(layers):
            if layer:
                grid[index, : len(layer[name])] = [np.nan if value is None else value for value in layer[name]]
        grids[site] = grid
    low, high = limits or (0.0, float(np.nanmax([np.nanmax(grid) for grid in grids.values()])))
    plt = pyplot()
    figure, axes = plt.subplots(1, len(sites), figsize=(4.2 * len(sites), 3.4), squeeze=False)
    for (site, grid), axis in zip(grids.items(), axes[0]):
        figure.colorbar(axis.imshow(grid, cmap="viridis", aspect="auto", vmin=low, vmax=high), ax=axis)
        axis.set(title=site, xlabel="head", ylabel="layer", xticks=range(grid.shape[1]), yticks=range(grid.shape[0]))
    figure.suptitle(title)
    return save_figure(plt, figure, path)


def gate_chart(gates: list[dict | None], path: Path) -> Path:
    """The GMM gate histogram of each layer that has a gate."""
    layers = [(index, layer["gate"]) for index, layer in enumerate(gates) if layer and layer["gate"]]
    plt = pyplot()
    figure, axes = plt.subplots(1, len(layers), figsize=(3.6 * len(layers), 3.2), squeeze=False)
    for (index, gate), axis in zip(layers, axes[0]):
        edges = np.array(gate["bin_edges"])
        axis.bar(edges[:-1], gate["counts"], width=np.diff(edges), align="edge")
        axis.set(title=f"decoder layer {index}: mean {gate['mean']:.2f}", xlabel="gate g", ylabel="rows × heads")
    return save_figure(plt, figure, path)


def write_plots(analysis: dict, model, tokenizer, first_pair: tuple[str, str], folder: Path) -> list[str]:
    """Entropy and locality charts, the gate histograms, and for each site a heatmap of its last layer on the
    first sentence pair; returns the file names."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [
        layer_head_chart(analysis["entropy"], "entropy", "mean attention entropy (nats)", folder / "entropy.png"),
        layer_head_chart(
            analysis["locality"],
            "within_1",
            "attention mass within ±1 of the diagonal",
            folder / "locality.png",
            limits=(0.0, 1.0),
        ),
    ]
    if any(layer and layer["gate"] for layer in analysis.get("gmm_gates", [])):
        written.append(gate_chart(analysis["gmm_gates"], folder / "gmm_gates.png"))
    for site, layers in analysis["entropy"].items():
        present = [index for index, layer in enumerate(layers) if layer is not None]
        if present:
            path = folder / f"heatmap-{site}-layer{present[-1]}.png"
            written.append(attention_heatmaps(model, tokenizer, *first_pair, site, present[-1], path))
    return [path.name for path in written]


# ---- a checkpoint, a study run ----------------------------------------------------------------------------------


def run_analyses(
    run_dir: Path, pairs: list[tuple[str, str]], plot_dir: Path, max_sentences: int, base_run_dir=None
) -> dict:
    """Every analysis that applies to the checkpoint's layout, on its first `max_sentences` pairs (BLEU by length on
    all pairs, from the run's `generated_predictions.txt` if it has one line per pair); plots into `plot_dir`."""
    model, tokenizer = load_checkpoint(run_dir)
    sample = pairs[:max_sentences]
    batch = encode_pairs(tokenizer, sample)
    analysis = {"run_dir": str(run_dir), "sentences": len(sample), "conventions": CONVENTIONS}
    if retrieval_heads(model.config) and base_run_dir is None:
        logger.warning("%s: hard retrieval heads but no `base` checkpoint to compare with: no agreement", run_dir)
    elif retrieval_heads(model.config):
        base_model, base_tokenizer = load_checkpoint(base_run_dir)
        check_same_tokenization(batch, encode_pairs(base_tokenizer, sample))
        analysis["base_run_dir"] = str(base_run_dir)
        analysis["retrieval_agreement"] = retrieval_agreement(model, base_model, batch)
    analysis["entropy"] = attention_entropy(model, batch)
    analysis["locality"] = locality(model, batch)
    if any(isinstance(module, GaussianMixtureHeads) for module in model.modules()):
        analysis["gmm_gates"] = gmm_gates(model, batch)
    predictions = read_predictions(Path(run_dir), len(pairs))
    if predictions is not None:
        sources, references = zip(*pairs)
        analysis["bleu_by_length"] = bleu_by_length(list(sources), predictions, list(references))
    analysis["plots"] = write_plots(analysis, model, tokenizer, sample[0], plot_dir)
    return analysis


def write_json(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")  # its presence marks an analysed run
    return path


def analyze_checkpoint(
    run_dir,
    test_file_or_pairs,
    output_dir,
    max_sentences: int = STUDY_SENTENCES,
    base_run_dir=None,
    source_lang: str = "en",
    target_lang: str = "de",
) -> dict:
    """Analyse a saved checkpoint on a jsonl test file (`source_lang` -> `target_lang`) or a list of (source,
    reference) pairs: writes `analysis.json` and the PNGs into `output_dir` and returns the analysis. Retrieval
    agreement needs hard_retrieval heads and `base_run_dir` (a `base` checkpoint with the same tokenizer)."""
    for name, folder in (("run_dir", run_dir), ("base_run_dir", base_run_dir)):
        if folder is not None and not (Path(folder) / "config.json").is_file():
            raise ValueError(f"{name}: {folder} is not a saved checkpoint (it has no config.json)")
    pairs = test_file_or_pairs
    if isinstance(pairs, (str, os.PathLike)):
        pairs = read_pairs(pairs, source_lang, target_lang)
    output_dir = Path(output_dir)
    analysis = run_analyses(Path(run_dir), list(pairs), output_dir, max_sentences, base_run_dir)
    write_json(output_dir / "analysis.json", analysis)
    return analysis


def base_run_dir_for(study: Study, run: Run) -> Path | None:
    """The folder of the study's finished `base` run of the same seed, else of another seed (a run folder may be gone
    with the machine that trained it), or None."""
    base_runs = [other for other in main_runs(study) if other is not None and other.preset == "base"]
    base_runs.sort(key=lambda other: other.seed != run.seed)
    return next((study.runs_dir / other.name for other in base_runs if run_finished(study, other)), None)


def analyze_run(study: Study, run: Run, result_path) -> Path | None:
    """The study runner's hook: analyse a finished translation run on the first 100 sentences of its test split.

    Writes `<result>.analysis.json` next to the result file and the plots into `<results>/plots/<preset>--seed<k>/`;
    hard-retrieval runs are compared with the study's finished `base` run (skipped if its tokenizer differs).
    Returns the JSON's path (None for other tasks).
    """
    if study.task != "translation":
        logger.info("%s: no attention analyses for %s studies", run.name, study.task)
        return None
    sources, references = evaluation_texts(study, "test")
    arguments = (
        study.runs_dir / run.name,
        list(zip(sources, references)),
        study.results_dir / "plots" / f"{run.preset}--seed{run.seed}",
        STUDY_SENTENCES,
    )
    try:
        analysis = run_analyses(*arguments, base_run_dir_for(study, run))
    except TokenizationMismatch as error:
        logger.warning("%s: no retrieval agreement with base: %s", run.name, error)
        analysis = run_analyses(*arguments)
    return write_json(Path(result_path).with_suffix(".analysis.json"), analysis)
