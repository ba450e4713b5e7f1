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

- Training step, seq2seq: forward with labels and backward, train mode, dropout as configured, from unset
  gradients as a training loop leaves them (`zero_grad(set_to_none=True)`; counted from gradients kept from an
  earlier step, every parameter tensor would add one accumulation); no optimizer step (a fused optimizer's kernels
  hardly grow with the number of parameter tensors). Encoders: forward and backward of the sum of the last
  hidden state (no pooler).
- Decoding step (seq2seq): eval mode, no gradients, as `generate` runs it: the encoder once, a decoder prefill
  of `--prefill-tokens` tokens that fills the cache, then one counted step of one new token
  (`model(encoder_outputs=..., attention_mask=..., decoder_input_ids=last_token, cache=cache, use_cache=True)`).
- Static decoding step (seq2seq): the same in a static cache (`StaticCache` halves of `prefill + 1` and the source's
  positions), eager: the step that `generate(cache_implementation="static", compile_config=...)` compiles and, on a
  GPU with `mode="reduce-overhead"`, replays as a CUDA graph, whose replay still runs one kernel per fused group.

Batch: `--batch-size` sentences of `--source-length` (+ `--target-length`) tokens, with an attention_mask;
the last sentence is `--padding` tokens shorter (mask 0, labels -100), as in a tokenizer's padded batch, so
that the padding paths run as in training. One size for all models (`--size`, default `paper-depth`: the
papers' 6 + 6 layers and 8 heads at d_model 64, feed-forward 128, vocabulary 1,000; encoders have 6 layers).

    PYTHONPATH=. python benchmarks/count_ops.py                      # every preset, about 30 s on one CPU core
    PYTHONPATH=. python benchmarks/count_ops.py --presets base hc-sa --size tiny --output /tmp/count_ops.json

A proxy for GPU kernel launches: with `--autocast --batch-size 128 --source-length 48 --target-length 48
--padding 0` (bench_gpu.py's step; the loss then runs in chunks as there). Counted from the warm-up's gradients (one
accumulation more per parameter tensor, as this script counted until it unset them), the training-step counts came
within 3 % of the CUDA kernels torch.profiler counted in bench_gpu's step (with its fused AdamW) on an H100
(MarianMTModel 1,606 operators / 1,555 kernels, base 2,202 / 2,196, hc-sa 1,978 / 1,957, with the loss in chunks of
256 then). A GPU step also launches kernels that no operator here stands for one to one (SDPA's and the embedding's
backward launch several, the optimizer its own), so the profiler's counts (`profile_gpu.py`) decide on a GPU.

Each operator is also counted for the module whose forward made it (`ModuleNames`), so that the modules where a
model's counts differ from base's are named.
"""

import argparse
import collections
import contextlib
import os
import re

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig, BertModel, EncoderDecoderCache, MarianConfig, MarianMTModel, StaticCache

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.presets import list_presets
from hf_simple_attn.recipes.sizes import SIZES, bert_size_fields, marian_size_fields

import common
import summarize


# The papers' layer and head counts at a small width (counts depend on layers and heads, hardly on widths).
COUNT_SIZES = {"paper-depth": dict(d_model=64, layers=6, heads=8, ffn_dim=128, vocab_size=1000), **SIZES}
KINDS = {"seq2seq": common.MARIAN, "encoder": common.BERT}  # model kind -> transformers' model of that kind
STEPS = ("training_step", "decoding_step", "static_decoding_step")
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
NO_OPERATORS = {"forward": 0, "backward": 0}  # a module's count in a pass where it ran none


class ModuleNames:
    """Which module's forward made each operator, forward and backward: the innermost module running (forward) or the
    one whose forward recorded the autograd node being run (backward), by its name in `named_modules` with layer
    indices left out (`model.decoder.layers.encoder_attn.heads.groups`), so that a layer's share sums over layers.

    Each module's forward hooks name the autograd nodes made since the last hook: its pre-hook those of its inputs
    (the enclosing module's work), its post-hook those of its outputs not named by an inner module. Modules in
    `unhooked` get no hooks, and their operators count as the enclosing module's: our models' output embeddings
    must stay without hooks, or the models compute their loss from full logits rather than in chunks."""

    TOP = "(the model)"  # operators of the model's own forward, outside its submodules (the loss, masks)
    ACCUMULATION = "(gradient accumulation)"

    def __init__(self, model, unhooked=()):
        self.names = {module: re.sub(r"\.\d+(?=\.|$)", "", name) or self.TOP for name, module in model.named_modules()}
        self.unhooked, self.running, self.handles = unhooked, [self.TOP], []

    def __enter__(self):
        self.handles = [
            handle
            for module in self.names
            if not any(module is skipped for skipped in self.unhooked)
            for handle in (
                module.register_forward_pre_hook(self.enter, with_kwargs=True),
                module.register_forward_hook(self.leave, with_kwargs=True),
            )
        ]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def current(self) -> tuple[str, str]:
        """(module name, "forward" or "backward") of the operator being dispatched."""
        if torch._C._current_graph_task_id() == -1:
            return self.running[-1], "forward"
        node = torch._C._current_autograd_node()
        return (self.ACCUMULATION if node is None else node.metadata.get("module", self.ACCUMULATION)), "backward"

    def enter(self, module, args, kwargs) -> None:
        self.name_nodes((args, kwargs), self.running[-1])
        self.running.append(self.names[module])

    def leave(self, module, args, kwargs, outputs) -> None:
        self.name_nodes(outputs, self.running.pop())

    @staticmethod
    def name_nodes(tensors, name: str) -> None:
        """Name the autograd nodes behind `tensors` that no module has named yet (the graph from there back)."""
        pending = [t.grad_fn for t in pytree.tree_leaves(tensors) if isinstance(t, torch.Tensor)]
        while pending:
            node = pending.pop()
            if node is None or "module" in node.metadata:
                continue
            node.metadata["module"] = name
            pending.extend(next_node for next_node, _ in node.next_functions)


class OperatorCounter(TorchDispatchMode):
    """Counts the ATen operators run under it (below autograd: forward and backward, composite operators
    decomposed), by name (`aten.mm`) and, given the model's `ModuleNames`, by module and pass; views
    (`OpOverload.is_view`) and `UNCOUNTED` are left out."""

    def __init__(self, modules: ModuleNames | None = None):
        super().__init__()
        self.counts = collections.Counter()
        self.modules, self.module_counts = modules, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket not in UNCOUNTED:
            self.counts[str(func.overloadpacket)] += 1
            if self.modules is not None:
                self.module_counts[self.modules.current()] += 1
        return func(*args, **(kwargs or {}))

    def by_module(self) -> dict:
        """{module: {"forward": n, "backward": n}}, most operators first."""
        modules = {}
        for (module, direction), count in sorted(self.module_counts.items(), key=lambda item: -item[1]):
            modules.setdefault(module, dict(NO_OPERATORS))[direction] = count
        return modules


def count_operators(function, inputs=tuple, modules: ModuleNames | None = None) -> dict:
    """The operators of one call `function(*inputs())`, after one uncounted call (`inputs` runs uncounted):
    their total and their count per name, and per module and pass when given the model's `modules`."""
    function(*inputs())
    arguments = inputs()
    with modules or contextlib.nullcontext(), OperatorCounter(modules) as counter:
        function(*arguments)
    counts = {"total": counter.counts.total(), "operators": dict(counter.counts.most_common())}
    if modules is not None:
        counts["modules"] = counter.by_module()
    return counts


def module_names(model) -> ModuleNames:
    """`ModuleNames` of one of the models `build` makes: all but the output embeddings hooked."""
    return ModuleNames(model, unhooked=(model.get_output_embeddings(),))


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
    under bf16 autocast when `autocast`. The gradients start unset, as after a training loop's
    `zero_grad(set_to_none=True)`: the backward assigns each one rather than adding it to the last step's."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if model.config.is_encoder_decoder:
            loss = model(**batch).loss
        else:
            loss = model(**batch).last_hidden_state.sum()
    loss.backward()


def decoding_step(model, batch: dict, prefill_tokens: int, static: bool = False) -> dict:
    """The operators of one cached decoding step of one new token, after the encoder and a decoder prefill of
    `prefill_tokens` tokens (uncounted), as `generate` runs it; with `static`, in a user-built static cache
    (`EncoderDecoderCache(StaticCache(...), StaticCache(...))`, as `cache_implementation="static"` builds it), whose
    step is the one a compiled `generate` replays as a CUDA graph."""
    generator = torch.Generator().manual_seed(1)
    start = torch.full((batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id)
    prefix = torch.randint(2, model.config.vocab_size - 1, (start.shape[0], prefill_tokens - 1), generator=generator)
    decoder_input_ids = torch.cat([start, prefix], dim=1)

    def prefill():
        encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        cache = None
        if static:
            cache = EncoderDecoderCache(
                StaticCache(config=model.config, max_cache_len=prefill_tokens + 1),
                StaticCache(config=model.config, max_cache_len=batch["input_ids"].shape[1]),
            )
        output = model(
            encoder_outputs=encoder_outputs,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            cache=cache,
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
        return count_operators(step, prefill, module_names(model))


def count_model(kind: str, name: str, size: dict, args) -> dict:
    """Parameters and operator counts of one model (its error instead, when it fails)."""
    try:
        model = build(kind, name, size, args.seed)
        batch = make_batch(model, args)
        entry = {"parameters": model.num_parameters()}
        model.train()
        entry["training_step"] = count_operators(
            lambda: training_step(model, batch, args.autocast), modules=module_names(model)
        )
        if kind == "seq2seq":
            model.eval()
            entry["decoding_step"] = decoding_step(model, batch, args.prefill_tokens)
            entry["static_decoding_step"] = decoding_step(model, batch, args.prefill_tokens, static=True)
    except Exception as error:  # one broken preset should not hide the others' counts
        common.progress(f"{kind} {name}: {type(error).__name__}: {error}")
        return {"error": f"{type(error).__name__}: {error}"}
    steps = ", ".join(f"{step} {entry[step]['total']}" for step in STEPS if step in entry)
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


def module_differences(modules: dict, reference: dict) -> list[dict]:
    """The modules whose operators (forward + backward) differ most from the reference's, largest difference first."""
    rows = []
    for name in set(modules) | set(reference):
        count, base = modules.get(name, NO_OPERATORS), reference.get(name, NO_OPERATORS)
        difference = {direction: count[direction] - base[direction] for direction in NO_OPERATORS}
        if any(difference.values()):
            rows.append({"module": name, **count, "difference": difference})
    return sorted(rows, key=lambda row: (-abs(sum(row["difference"].values())), row["module"]))[:TOP_DIFFERENCES]


def compare(models: dict, reference: str) -> None:
    """Add each model's ratio to `reference` and its largest operator differences (and, against base, module
    differences), for each step."""
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
            for step in STEPS
            if step in entry
        }
        if reference == "base":  # transformers' models name their modules otherwise
            for step, comparison in entry["vs_base"].items():
                comparison["module_differences"] = module_differences(
                    entry[step]["modules"], models["base"][step]["modules"]
                )


def model_names(kind: str, presets: list[str] | None) -> list[str]:
    """transformers' model, `base`, then the asked-for presets that `kind` has (all of them by default)."""
    available = list_presets(kind)
    chosen = available if presets is None else [name for name in presets if name in available]
    return list(dict.fromkeys([KINDS[kind], "base", *chosen]))


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
        for entry in models.values():  # each model's modules are kept as their differences from base's
            for step in STEPS:
                entry.get(step, {}).pop("modules", None)
        data[kind] = models
    print("\n".join(summarize.count_ops(data)))
    common.write_json(args.output, data)
    return data


if __name__ == "__main__":
    main()
