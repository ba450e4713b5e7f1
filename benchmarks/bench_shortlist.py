"""Vocabulary shortlist against the full vocabulary on trained checkpoints: coverage, BLEU and decoding speed.

For each checkpoint, a copy (the original folder is not touched) gets the shortlist built from the training split of
the embedded corpus (`hf_simple_attn.deploy.shortlist.shortlist_from_data`: IBM Model 1, `--top-k` target tokens per
source token, `--frequent` most frequent target tokens and the special tokens always allowed); its coverage is measured
on the validation and test splits (the share of reference tokens among their sentence's candidates). The test split
(`--sentences` first ones) is then translated in batches of `--batch-size`, in the split's order, greedy and with
`--beams` beams, by each engine, `--repeats` times (engines interleaved in a rotated order, after one warm-up batch
each): `full` (no shortlist), `shortlist` (`use_shortlist=True`: the union of the batch's candidates, as in Marian and
CTranslate2) and, greedy only, `own` (the shortlist, and a logits processor that leaves each sentence only its own
candidates, as when it is translated alone). Scores: SacreBLEU BLEU and chrF of the raw references; `identical` is
the share of sentences translated exactly as without the shortlist. Speed is given in wall time and in the process's
CPU time (all threads), the steadier of the two on a machine shared with other jobs.

The output projection is a small part of a decoding step at these checkpoints' size (d_model 128, 4k vocabulary), so
`--large-size` (default opus-mt: d_model 512, 6+6 layers, 58,101 tokens) also times greedy decoding of the first batch
by an untrained model of that size, exactly `--large-tokens` new tokens per sentence, without and with the first
checkpoint's shortlist (its token ids, in the larger vocabulary): speed only.

    PYTHONPATH=. python benchmarks/bench_shortlist.py --checkpoints studies/runs/mt-families/base--lr0.001--seed1 \\
        studies/runs/mt-families/hc-sa--lr0.001--seed1
"""

import argparse
import functools
import json
import os
import shutil
import tempfile
import time

import torch
from transformers import AutoTokenizer, LogitsProcessor, LogitsProcessorList

from hf_simple_attn import SimpleAttnMarianMTModel
from hf_simple_attn.deploy.shortlist import Shortlist, shortlist_coverage, shortlist_from_data, tokenized_pairs
from hf_simple_attn.modeling.vocab_shortlist import CandidateRows, shortlist_logits
from hf_simple_attn.recipes.arguments import ModelArguments
from hf_simple_attn.recipes.translation_task import DataTrainingArguments, load_raw_datasets

import common


FULL = "full"  # the reference engine: no shortlist
SEARCH_ENGINES = {"greedy": (FULL, "shortlist", "own"), "beam": (FULL, "shortlist")}
RUNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "studies", "runs", "mt-families")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        default=[os.path.join(RUNS, name) for name in ("base--lr0.001--seed1", "hc-sa--lr0.001--seed1")],
    )
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--frequent", type=int, default=100)
    parser.add_argument("--sentences", type=int, default=None, help="the first N test sentences (default: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--large-size", default="opus-mt", help="size of the untrained model timed (none: skip)")
    parser.add_argument("--large-tokens", type=int, default=10)
    parser.add_argument("--large-repeats", type=int, default=20, help="timings of the output projection alone")
    parser.add_argument("--large-decode-repeats", type=int, default=3)
    parser.add_argument(
        "--only-large",
        action="store_true",
        help="time only the larger model (with the first checkpoint's shortlist), updating --output",
    )
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "shortlist.json"))
    return parser.parse_args(argv)


class OwnCandidates(LogitsProcessor):
    """-inf outside each sentence's own candidates (`masks`: (batch, vocab)), for every beam of it."""

    def __init__(self, masks: torch.Tensor, num_beams: int):
        self.masks = masks.repeat_interleave(num_beams, dim=0)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(~self.masks, float("-inf"))


def generate(model, batch, engine: str, **kwargs) -> torch.Tensor:
    if engine == "own":
        masks = model.shortlist.candidate_mask(batch["input_ids"], batch["attention_mask"])
        kwargs["logits_processor"] = LogitsProcessorList([OwnCandidates(masks, kwargs.get("num_beams", 1))])
    with torch.inference_mode():
        return model.generate(**batch, use_shortlist=engine != FULL, do_sample=False, **kwargs)


def translate_all(model, tokenizer, sources: list[str], batch_size: int, num_beams: int, engine: str) -> list[str]:
    """The translations of `sources`, batch after batch."""
    translations = []
    for first in range(0, len(sources), batch_size):
        batch = tokenizer(sources[first : first + batch_size], return_tensors="pt", padding=True, truncation=True)
        translations += tokenizer.batch_decode(
            generate(model, batch, engine, num_beams=num_beams), skip_special_tokens=True
        )
    return translations


def speed(sentences: int, walls: list[float], cpus: list[float]) -> dict:
    return {
        "sentences_per_second": common.summary([sentences / wall for wall in walls]),
        "sentences_per_cpu_second": common.summary([sentences / cpu for cpu in cpus]),
    }


def versus_full(results: dict) -> None:
    """Add each engine's BLEU change and speed ratios against `full`."""
    full = results[FULL]
    for entry in results.values():
        entry["vs_full"] = {
            "speedup": entry["sentences_per_second"]["median"] / full["sentences_per_second"]["median"],
            "cpu_speedup": entry["sentences_per_cpu_second"]["median"] / full["sentences_per_cpu_second"]["median"],
        }
        if "bleu" in entry:
            entry["vs_full"]["bleu_change"] = entry["bleu"] - full["bleu"]


def measure_search(model, tokenizer, sources, references, search: str, args, name: str) -> dict:
    """The engines of one search: scores, and speed over `--repeats` interleaved passes."""
    engines, num_beams = SEARCH_ENGINES[search], 1 if search == "greedy" else args.beams
    calls = {
        engine: functools.partial(translate_all, model, tokenizer, sources, args.batch_size, num_beams, engine)
        for engine in engines
    }
    walls, cpus, translations = common.interleaved(calls, args.repeats, f"{name} {search}", len(sources))
    results = {
        engine: {
            **common.translation_scores(translations[engine], references, translations[FULL]),
            **speed(len(sources), walls[engine], cpus[engine]),
        }
        for engine in engines
    }
    versus_full(results)
    return results


def checkpoint_shortlist(path: str, args):
    """(the shortlist's build report, the model with it, the tokenizer, seconds taken) of a checkpoint, built in a
    temporary copy."""
    name = os.path.basename(os.path.normpath(path))
    with tempfile.TemporaryDirectory() as workdir:
        copy = shutil.copytree(path, os.path.join(workdir, name), ignore=shutil.ignore_patterns("checkpoint-*"))
        started = time.perf_counter()
        built = shortlist_from_data(copy, DataTrainingArguments(dataset_name="embedded"), args.top_k, args.frequent)
        build_seconds = time.perf_counter() - started
        model = SimpleAttnMarianMTModel.from_pretrained(copy).eval()
        tokenizer = AutoTokenizer.from_pretrained(copy)
    common.progress(
        f"{name}: shortlist built in {build_seconds:.0f} s, validation coverage {built['validation']['coverage']:.2%}"
    )
    return built, model, tokenizer, build_seconds


def measure_checkpoint(path: str, raw_datasets, args) -> tuple[dict, Shortlist, list[list[int]]]:
    """The checkpoint's results, its shortlist and the source ids of the first test batch."""
    name = os.path.basename(os.path.normpath(path))
    data_args = DataTrainingArguments(dataset_name="embedded")
    built, model, tokenizer, build_seconds = checkpoint_shortlist(path, args)
    shortlist = Shortlist(model.shortlist.candidates, model.shortlist.frequent)
    test = raw_datasets["test"].select(range(args.sentences or len(raw_datasets["test"])))
    coverage = shortlist_coverage(
        shortlist,
        *tokenized_pairs(test, tokenizer, data_args, "test"),
        model.lm_head.out_features,
        tokenizer.all_special_ids,
        args.batch_size,
    )
    pairs = test["translation"]
    sources, references = [pair["en"] for pair in pairs], [pair["de"] for pair in pairs]
    for engine in SEARCH_ENGINES["greedy"]:  # warm-up
        translate_all(model, tokenizer, sources[: args.batch_size], args.batch_size, 1, engine)
    results = {
        "name": name,
        "path": path,
        "shortlist": {**built, "build_seconds": build_seconds, "test": coverage},
        **{
            search: measure_search(model, tokenizer, sources, references, search, args, name)
            for search in SEARCH_ENGINES
        },
    }
    return results, shortlist, [tokenizer(text)["input_ids"] for text in sources[: args.batch_size]]


def interleaved_times(calls: dict, repeats: int, label: str, sentences: int) -> dict:
    """{engine: speed} of `calls` ({engine: function}), each run `repeats` times in a rotated order."""
    walls, cpus, _ = common.interleaved(calls, repeats, label, sentences)
    results = {engine: speed(sentences, walls[engine], cpus[engine]) for engine in calls}
    versus_full(results)
    common.progress(
        f"{label}: "
        + ", ".join(f"{engine} {results[engine]['sentences_per_second']['median']:.1f}" for engine in calls)
        + " sent/s (medians)"
    )
    return results


def measure_large_vocabulary(shortlist: Shortlist, source_ids: list[list[int]], args) -> dict:
    """An untrained `--large-size` model with `shortlist` (its rows placed in the larger vocabulary), over one batch:
    the output projection of one decoding step alone (`--large-repeats` times), and greedy decoding of exactly
    `--large-tokens` new tokens (`--large-decode-repeats` times), without and with the shortlist."""
    model = common.build_seq2seq("base", args.large_size)
    vocab_size = model.config.vocab_size
    candidates = shortlist.candidates.new_full((vocab_size, shortlist.candidates.shape[1]), -1)
    candidates[: len(shortlist.candidates)] = shortlist.candidates
    model.set_vocab_shortlist(candidates, shortlist.frequent)
    longest = max(len(ids) for ids in source_ids)
    batch = {
        "input_ids": torch.tensor([ids + [model.config.pad_token_id] * (longest - len(ids)) for ids in source_ids]),
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (longest - len(ids)) for ids in source_ids]),
    }
    union = model.shortlist.batch_mask(batch["input_ids"], batch["attention_mask"])
    hidden_states = torch.randn(len(source_ids), 1, model.config.d_model)  # one decoding step
    candidate_rows = CandidateRows()  # gathered once, as for the steps of one `generate` call

    def projection(engine: str):
        def project():
            with torch.inference_mode():
                if engine == FULL:
                    return model.lm_head(hidden_states) + model.final_logits_bias
                rows = candidate_rows.get(union, model.lm_head.weight, model.final_logits_bias)
                return shortlist_logits(hidden_states, rows, model.config.vocab_size)

        return project

    lengths = dict(min_new_tokens=args.large_tokens, max_new_tokens=args.large_tokens, max_length=None, num_beams=1)
    engines = (FULL, "shortlist")
    for engine in engines:  # warm-up
        projection(engine)()
        generate(model, batch, engine, **lengths)
    label = f"{args.large_size} (untrained)"
    return {
        "size": args.large_size,
        "vocab_size": vocab_size,
        "sentences": len(source_ids),
        "new_tokens": args.large_tokens,
        "candidates": int(union.sum()),
        "projection": interleaved_times(
            {engine: projection(engine) for engine in engines},
            args.large_repeats,
            f"{label} projection",
            len(source_ids),
        ),
        "greedy": interleaved_times(
            {engine: lambda engine=engine: generate(model, batch, engine, **lengths) for engine in engines},
            args.large_decode_repeats,
            f"{label} greedy",
            len(source_ids),
        ),
    }


def table(checkpoints: list[dict], beams: int) -> list[str]:
    lines = [
        f"| checkpoint | decoding | coverage (test) | candidates per batch | BLEU greedy | identical | "
        f"greedy sent/s | × | × CPU | BLEU beam {beams} | identical | beam sent/s | × | × CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for checkpoint in checkpoints:
        coverage = checkpoint["shortlist"]["test"]
        vocab_size = round(coverage["candidates_per_batch"] / coverage["vocabulary_share_per_batch"])
        candidates = {
            FULL: ["", f"{vocab_size}"],
            "shortlist": [
                "",
                f"{coverage['candidates_per_batch']:.0f} ({coverage['vocabulary_share_per_batch']:.0%})",
            ],
            "own": [f"{coverage['coverage']:.1%}", f"{coverage['candidates_per_sentence']:.0f} per sentence"],
        }
        for engine, cells in candidates.items():
            cells = [checkpoint["name"], engine, *cells]
            for search in SEARCH_ENGINES:
                entry = checkpoint[search].get(engine)
                if entry is None:
                    cells += [""] * 5
                    continue
                ratio = entry["vs_full"]
                change = f" ({ratio['bleu_change']:+.2f})" if engine != FULL else ""
                cells += [
                    f"{entry['bleu']:.2f}{change}",
                    f"{entry['identical']:.1%}",
                    f"{entry['sentences_per_second']['median']:.1f}",
                ]
                cells += [f"{ratio['speedup']:.2f}", f"{ratio['cpu_speedup']:.2f}"] if engine != FULL else ["", ""]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    raw_datasets = load_raw_datasets(DataTrainingArguments(dataset_name="embedded"), ModelArguments())
    if args.only_large:
        with open(args.output) as handle:
            data = json.load(handle)
        _, model, tokenizer, _ = checkpoint_shortlist(args.checkpoints[0], args)
        pairs = raw_datasets["test"]["translation"][: args.batch_size]
        shortlist = Shortlist(model.shortlist.candidates, model.shortlist.frequent)
        source_ids = [tokenizer(pair["en"])["input_ids"] for pair in pairs]
    else:
        data = common.result_header("shortlist", args)
        measured = [measure_checkpoint(path, raw_datasets, args) for path in args.checkpoints]
        data["checkpoints"] = [results for results, _, _ in measured]
        print("\n".join(table(data["checkpoints"], args.beams)))
        print(
            "(identical: share of sentences equal to the full vocabulary's output; ×: speed ratio to full, medians of "
            "wall time and of process CPU time; own: each sentence's own candidates only, as alone)"
        )
        _, shortlist, source_ids = measured[0]
    if args.large_size != "none":
        large = data["large_vocabulary"] = measure_large_vocabulary(shortlist, source_ids, args)
        large["environment"] = common.environment(args.threads)
        large["settings"] = {key: value for key, value in vars(args).items() if key.startswith("large")}
        for part in ("projection", "greedy"):
            ratio = large[part]["shortlist"]["vs_full"]
            print(
                f"{large['size']} size, untrained, vocabulary {large['vocab_size']:,}, {large['candidates']:,} "
                f"candidates, {part}: {ratio['speedup']:.2f}× ({ratio['cpu_speedup']:.2f}× CPU) with the shortlist"
            )
    common.write_json(args.output, data)
    return data


if __name__ == "__main__":
    main()
