"""Operators per training step and per cached decoding step of every preset, against `base` and transformers' models.

Each operator is a dispatch through PyTorch and, on a GPU, mostly one kernel launch: where launches and
Python overhead set the pace (small widths, decoding), a step's time follows its operator count (on an H100
at Transformer-base size, measured with torch.profiler: base 1,535 kernel launches per training step, gmm 2,787).
Counting needs no GPU and no timing: it is exact and the same on every machine.

Counted: every ATen operator that reaches the dispatcher below autograd (forward and backward, after
composite operators such as `linear` have decomposed into the ones that run), by a `TorchDispatchMode`;
views (`OpOverload.is_view`: reshapes, transposes, slices, which launch nothing), `aten.detach` and
`aten._unsafe_view` (the reshape `matmul` returns: a view in all but autograd's bookkeeping) are not counted,
copies (`aten._to_copy`, `aten.clone`) are. Each count follows one uncounted run of the same call,
so that tables a model memoises (hard-coded attention's) count as in steady training and decoding, not
their one-time build.

- Training step, seq2seq: forward with labels and backward, train mode, dropout as configured (no optimizer
  step: the same per parameter for every model). Encoders: forward and backward of the sum of the last
  hidden state (no pooler).
- Decoding step (seq2seq): eval mode, no gradients, as `generate` runs it: the encoder once, a decoder prefill
  of `--prefill-tokens` tokens that fills the cache, then one counted step of one new token
  (`model(encoder_outputs=..., attention_mask=..., decoder_input_ids=last_token, cache=cache, use_cache=True)`).

Batch: `--batch-size` sentences of `--source-length` (+ `--target-length`) tokens, with an attention_mask;
the last sentence is `--padding` tokens shorter (mask 0, labels -100), as in a tokenizer's padded batch, so
that the padding paths run as in training. One size for all models (`--size`, default `paper-depth`: the
papers' 6 + 6 layers and 8 heads at d_model 64, feed-forward 128, vocabulary 1,000; encoders have 6 layers).

    PYTHONPATH=. python benchmarks/count_ops.py                      # every preset, about 30 s on one CPU core
    PYTHONPATH=. python benchmarks/count_ops.py --presets base hc-sa --size tiny --output /tmp/count_ops.json

A proxy for GPU kernel launches: with `--autocast --batch-size 128 --source-length 48 --target-length 48
--padding 0` (bench_gpu.py's step; the loss then runs in chunks as there), the training-step counts came within 3 %
of the CUDA kernels torch.profiler counted in that step on an H100 (MarianMTModel 1,606 operators / 1,555 kernels,
base 2,202 / 2,196, hc-sa 1,978 / 1,957, with the loss in chunks of 256 then).
"""

import argparse
import collections
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig, BertModel, MarianConfig, MarianMTModel

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.presets import list_presets
from hf_simple_attn.recipes.sizes import SIZES, bert_size_fields, marian_size_fields

import common
import summarize


# The papers' layer and head counts at a small width (counts depend on layers and heads, hardly on widths).
COUNT_SIZES = {"paper-depth": dict(d_model=64, layers=6, heads=8, ffn_dim=128, vocab_size=1000), **SIZES}
KINDS = {"seq2seq": common.MARIAN, "encoder": common.BERT}  # model kind -> transformers' model of that kind
# The targets, operators per step relative to `base` (at most).
TRAINING_TARGETS = {
    "hc-sa": 1.0,
    "sh-x": 1.0,
    "ran-d": 1.0,
    "ran-all": 1.0,
    "syn-r": 1.0,
    "local-all": 1.0,
    "gmm": 1.25,
    "hard-dec": 1.25,
}
DECODING_TARGETS = {"hard-dec": 1.0}
TOP_DIFFERENCES = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--presets",
        nargs="+",
        default=None,
        help="presets to count, each in the kinds (seq2seq, encoder) that have it; `base` is always counted "
        "(default: every preset of both kinds)",
    )
    parser.add_argument("--size", default="paper-depth", choices=list(COUNT_SIZES))
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=16)
    parser.add_argument("--target-length", type=int, default=16)
    parser.add_argument("--padding", type=int, default=2, help="padding tokens of the batch's last sentence")
    parser.add_argument("--prefill-tokens", type=int, default=4, help="decoder tokens in the cache before the step")
    parser.add_argument(
        "--autocast",
        action="store_true",
        help="training steps under bf16 autocast, as bench_gpu.py trains (the casts count as operators)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "count_ops.json"))
    return parser.parse_args(argv)


# Operators that launch nothing although `OpOverload.is_view` is False: `detach`, and `_unsafe_view`, the reshape
# `matmul` and `linear` return (a view of its input's storage, marked a new tensor for autograd's sake).
UNCOUNTED = (torch.ops.aten.detach, torch.ops.aten._unsafe_view)


class OperatorCounter(TorchDispatchMode):
    """Counts the ATen operators run under it (below autograd: forward and backward, composite operators
    decomposed), by name (`aten.mm`); views (`OpOverload.is_view`) and `UNCOUNTED` are left out."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket not in UNCOUNTED:
            self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def count_operators(function, inputs=tuple) -> dict:
    """The operators of one call `function(*inputs())`, after one uncounted call (`inputs` runs uncounted):
    their total and their count per name."""
    function(*inputs())
    arguments = inputs()
    with OperatorCounter() as counter:
        function(*arguments)
    return {"total": counter.counts.total(), "operators": dict(counter.counts.most_common())}


def build(kind: str, name: str, size: dict, seed: int):
    """transformers' model of `kind` (named `MarianMTModel` or `BertModel`) or our model with preset `name`."""
    torch.manual_seed(seed)
    if kind == "seq2seq":
        vocab_size = size["vocab_size"]
        # As common.marian_kwargs: `<pad>` (also the decoder start) last, `</s>` 0.
        kwargs = marian_size_fields(size["d_model"], size["layers"], size["layers"], size["heads"], size["ffn_dim"])
        kwargs |= dict(
            vocab_size=vocab_size,
            pad_token_id=vocab_size - 1,
            decoder_start_token_id=vocab_size - 1,
            max_position_embeddings=512,
            eos_token_id=0,
            forced_eos_token_id=None,
        )
        if name == common.MARIAN:
            return MarianMTModel(MarianConfig(**kwargs))
        return SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset(name, **kwargs))
    kwargs = bert_size_fields(size["d_model"], size["layers"], size["heads"], size["ffn_dim"])
    kwargs |= dict(vocab_size=size["vocab_size"], max_position_embeddings=512)
    if name == common.BERT:
        return BertModel(BertConfig(**kwargs), add_pooling_layer=False)
    return SimpleAttnBertModel(SimpleAttnBertConfig.from_preset(name, **kwargs), add_pooling_layer=False)


def make_batch(model, args) -> dict:
    """Random sources (and labels for seq2seq models); the last sentence `args.padding` tokens shorter."""
    generator = torch.Generator().manual_seed(args.seed)
    vocab_size, pad_token_id = model.config.vocab_size, model.config.pad_token_id
    shape = (args.batch_size, args.source_length)
    input_ids = torch.randint(2, vocab_size - 1, shape, generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if args.padding:
        input_ids[-1, -args.padding :] = pad_token_id
        attention_mask[-1, -args.padding :] = 0
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if model.config.is_encoder_decoder:
        labels = torch.randint(2, vocab_size - 1, (args.batch_size, args.target_length), generator=generator)
        if args.padding:
            labels[-1, -args.padding :] = -100
        batch["labels"] = labels
    return batch


def training_step(model, batch: dict, autocast: bool = False) -> None:
    """Forward and backward: the loss with labels (seq2seq), the sum of the last hidden state (encoders); the forward
    under bf16 autocast when `autocast`."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if model.config.is_encoder_decoder:
            loss = model(**batch).loss
        else:
            loss = model(**batch).last_hidden_state.sum()
    loss.backward()


def decoding_step(model, batch: dict, prefill_tokens: int) -> dict:
    """The operators of one cached decoding step of one new token, after the encoder and a decoder prefill of
    `prefill_tokens` tokens (uncounted), as `generate` runs it."""
    generator = torch.Generator().manual_seed(1)
    start = torch.full((batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id)
    prefix = torch.randint(2, model.config.vocab_size - 1, (start.shape[0], prefill_tokens - 1), generator=generator)
    decoder_input_ids = torch.cat([start, prefix], dim=1)

    def prefill():
        encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        output = model(
            encoder_outputs=encoder_outputs,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            use_cache=True,
        )
        return encoder_outputs, output.cache, output.logits[:, -1:].argmax(-1)

    def step(encoder_outputs, cache, last_token):
        model(
            encoder_outputs=encoder_outputs,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=last_token,
            cache=cache,
            use_cache=True,
        )

    with torch.no_grad():
        return count_operators(step, prefill)


def count_model(kind: str, name: str, size: dict, args) -> dict:
    """Parameters and operator counts of one model (its error instead, when it fails)."""
    try:
        model = build(kind, name, size, args.seed)
        batch = make_batch(model, args)
        entry = {"parameters": model.num_parameters()}
        model.train()
        entry["training_step"] = count_operators(lambda: training_step(model, batch, args.autocast))
        if kind == "seq2seq":
            model.eval()
            entry["decoding_step"] = decoding_step(model, batch, args.prefill_tokens)
    except Exception as error:  # one broken preset should not hide the others' counts
        common.progress(f"{kind} {name}: {type(error).__name__}: {error}")
        return {"error": f"{type(error).__name__}: {error}"}
    steps = ", ".join(f"{step} {entry[step]['total']}" for step in ("training_step", "decoding_step") if step in entry)
    common.progress(f"{kind} {name}: {steps}")
    return entry


def differences(operators: dict, reference: dict) -> list[dict]:
    """The operators whose counts differ most from the reference's, largest difference first."""
    names = set(operators) | set(reference)
    rows = [
        {"operator": name, "count": operators.get(name, 0), "reference": reference.get(name, 0)}
        for name in names
        if operators.get(name, 0) != reference.get(name, 0)
    ]
    for row in rows:
        row["difference"] = row["count"] - row["reference"]
    return sorted(rows, key=lambda row: (-abs(row["difference"]), row["operator"]))[:TOP_DIFFERENCES]


def compare(models: dict, reference: str) -> None:
    """Add each model's ratio to `reference` and its largest operator differences, for each step."""
    if "error" in models.get(reference, {"error": None}):
        return
    for entry in models.values():
        if "error" in entry:
            continue
        entry[f"vs_{reference}"] = {
            step: {
                "ratio": entry[step]["total"] / models[reference][step]["total"],
                "differences": differences(entry[step]["operators"], models[reference][step]["operators"]),
            }
            for step in ("training_step", "decoding_step")
            if step in entry
        }


def model_names(kind: str, presets: list[str] | None) -> list[str]:
    """transformers' model, `base`, then the asked-for presets that `kind` has (all of them by default)."""
    available = list_presets(kind)
    chosen = available if presets is None else [name for name in presets if name in available]
    return list(dict.fromkeys([KINDS[kind], "base", *chosen]))


def check_targets(seq2seq: dict) -> list[dict]:
    """The issue's targets: operators per step at most `target` times base's (base: MarianMTModel's)."""
    checks = []

    def check(name: str, step: str, reference: str, target: float) -> None:
        comparison = seq2seq.get(name, {}).get(f"vs_{reference}", {}).get(step)
        if comparison is not None:
            label = f"{name} operators per {step.replace('_', ' ')} vs {reference}, at most"
            checks.append(
                {
                    "check": label,
                    "target": target,
                    "measured": comparison["ratio"],
                    "reached": comparison["ratio"] <= target,
                }
            )

    for name, target in TRAINING_TARGETS.items():
        check(name, "training_step", "base", target)
    check("base", "training_step", common.MARIAN, 1.0)
    for name, target in DECODING_TARGETS.items():
        check(name, "decoding_step", "base", target)
    return checks


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    unknown = set(args.presets or []) - set(list_presets("seq2seq")) - set(list_presets("encoder"))
    if unknown:
        raise SystemExit(f"unknown presets: {sorted(unknown)}")
    size = COUNT_SIZES[args.size]
    data = {**common.result_header("count_ops", args), "size_fields": size, "method": OperatorCounter.__doc__}
    for kind, reference in KINDS.items():
        models = {name: count_model(kind, name, size, args) for name in model_names(kind, args.presets)}
        for name in ("base", reference):
            compare(models, name)
        data[kind] = models
    data["targets"] = check_targets(data["seq2seq"])
    print("\n".join(summarize.count_ops(data)))
    for check in data["targets"]:
        print(
            f"{check['check']} {check['target']}x: {check['measured']:.3f}x {'reached' if check['reached'] else 'NOT reached'}"
        )
    common.write_json(args.output, data)
    return data


if __name__ == "__main__":
    main()
