"""Why compiled decoding and eager decoding give different sentences, on trained checkpoints.

Each checkpoint translates the first `--sentences` test sentences of its corpus greedily, in batches of
`--batch-size`, in each dtype of `--dtypes`, three ways: eager with the dynamic cache (the reference), eager with the
static cache, and compiled (`generate(cache_implementation="static", compile_config=CompileConfig(fullgraph=True,
dynamic=False))`, inductor's default mode, the CPU counterpart of CUDA-graph decoding). Each way's logits at every
step are compared with the exact ones (the float64 model teacher-forced on the reference's tokens), over the steps
whose prefix is the reference's: `logit_error` is the largest absolute difference at a step (median and largest over
the steps). A compiled graph that computed something else than eager would show a larger error than eager's; rounding
shows the same. For each sentence that differs from the reference, its first differing step gives the exact gap
between the two picks: a rounding flip when the two ways' own errors at that step (eager's and this way's) add up to
at least the gap, so that rounding alone can reorder the two tokens; otherwise a defect.

    PYTHONPATH=. python benchmarks/compiled_agreement.py --checkpoints studies/runs/mt-distill-teacher/base--seed1
"""

import argparse
import copy
import os

import torch
from transformers import AutoTokenizer, CompileConfig

from hf_simple_attn import SimpleAttnMarianMTModel
from hf_simple_attn.recipes.translation_task import OFFLINE_CORPORA

import common
import summarize


RUNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "studies", "runs")
DEFAULT_CHECKPOINTS = [os.path.join(RUNS, "mt-distill-teacher", "base--seed1")] + [
    os.path.join(RUNS, "mt-distill-finetune", f"{preset}--seed1")
    for preset in ("hc-sa", "sh-x", "ran-d", "local-all", "hard-dec")
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", default=DEFAULT_CHECKPOINTS)
    parser.add_argument("--dataset-name", default="libreoffice_help", choices=sorted(OFFLINE_CORPORA))
    parser.add_argument("--dataset-config-name", default="de")
    parser.add_argument("--sentences", type=int, default=256, help="the first N test sentences")
    parser.add_argument("--batch-size", type=int, default=32, help="must divide --sentences (one compiled shape)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend (inductor: mode default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "compiled_agreement.json"))
    args = parser.parse_args(argv)
    if args.sentences % args.batch_size:
        parser.error(f"--batch-size {args.batch_size} must divide --sentences {args.sentences}")
    return args


def source_sentences(args) -> list[str]:
    builder, _ = OFFLINE_CORPORA[args.dataset_name]
    split = builder(args.dataset_config_name, None)["test"]
    return [pair["en"] for pair in split.select(range(args.sentences))["translation"]]


def compiled_options(backend: str) -> dict:
    """`generate` options of compiled static decoding (what bench_gpu.py measures, without CUDA graphs)."""
    mode = {"mode": "default"} if backend == "inductor" else {"mode": None}
    config = CompileConfig(fullgraph=True, dynamic=False, backend=backend, **mode)
    config._compile_all_devices = True  # transformers compiles `generate` on GPUs only unless told
    return {"cache_implementation": "static", "compile_config": config}


def decode(model, batch: dict, options: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy output ids (batch, 1 + steps) and each step's logits as float64 (batch, steps, vocab), up to the
    checkpoint's `max_length` (the static cache's size)."""
    with torch.inference_mode():
        output = model.generate(
            **batch,
            num_beams=1,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            **options,
        )
    return output.sequences, torch.stack(output.logits, dim=1).double()


def exact_logits(exact_model, batch: dict, reference: torch.Tensor) -> torch.Tensor:
    """The float64 model's logits (batch, steps, vocab) teacher-forced on the reference's tokens."""
    with torch.inference_mode():
        return exact_model(**batch, decoder_input_ids=reference[:, :-1]).logits


def shared_steps(sequences: torch.Tensor, reference: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """(batch, steps) True where a step's prefix is the reference's and the reference has not ended before it."""
    steps = min(sequences.shape[1], reference.shape[1]) - 1
    same_tokens = (sequences[:, :steps] == reference[:, :steps]).cumprod(dim=1).bool()
    running = reference[:, :steps] != pad_token_id  # padding after the end; the decoder start may be the pad token
    running[:, 0] = True
    return same_tokens & running


def padded(sequences: torch.Tensor, width: int, pad_token_id: int) -> torch.Tensor:
    return torch.nn.functional.pad(sequences, (0, width - sequences.shape[1]), value=pad_token_id)


class Variant:
    """One way of decoding within a dtype: its per-step logit errors and its first differing steps."""

    def __init__(self):
        self.errors, self.sentences, self.flips = [], 0, []

    def add(self, sequences, logits, exact, reference, reference_errors, pad_token_id: int) -> torch.Tensor:
        """One batch decoded this way; reference_errors: eager's logit errors (batch, steps), None for eager itself.
        Returns this way's logit errors."""
        shared = shared_steps(sequences, reference, pad_token_id)
        steps = shared.shape[1]
        errors = (logits[:, :steps] - exact[:, :steps]).abs().amax(dim=-1)  # (batch, steps)
        self.errors.append(errors[shared])
        reference_errors = errors if reference_errors is None else reference_errors
        self.sentences += sequences.shape[0]
        width = max(sequences.shape[1], reference.shape[1])
        outputs, expected = padded(sequences, width, pad_token_id), padded(reference, width, pad_token_id)
        for row in range(sequences.shape[0]):
            if torch.equal(outputs[row], expected[row]):
                continue
            step = int(shared[row].sum()) - 1  # the last step with the reference's prefix: its picks differ
            picks = expected[row, step + 1], outputs[row, step + 1]
            gap = (exact[row, step, picks[0]] - exact[row, step, picks[1]]).abs().item()
            own_errors = reference_errors[row, step].item() + errors[row, step].item()
            self.flips.append({"step": step, "gap": gap, "errors": own_errors, "rounding": gap <= own_errors})
        return errors

    def summary(self) -> dict:
        errors = torch.cat(self.errors)
        rounding = sum(flip["rounding"] for flip in self.flips)
        return {
            "logit_error": {"median": errors.median().item(), "max": errors.max().item(), "steps": errors.numel()},
            "identical": 1 - len(self.flips) / self.sentences,
            "differing": len(self.flips),
            "rounding_flips": rounding,
            "identical_but_rounding": 1 - (len(self.flips) - rounding) / self.sentences,
            "defects": [flip for flip in self.flips if not flip["rounding"]],
            "largest_flipped_gap": max((flip["gap"] for flip in self.flips), default=None),
        }


def measure_dtype(exact_model, model, batches: list[dict], args) -> dict:
    pad_token_id = model.generation_config.pad_token_id
    ways = {"static_eager": {"cache_implementation": "static"}, "compiled": compiled_options(args.backend)}
    variants = {name: Variant() for name in ("eager", *ways)}
    for batch in batches:
        reference, reference_logits = decode(model, batch, {})
        exact = exact_logits(exact_model, batch, reference)
        reference_errors = variants["eager"].add(reference, reference_logits, exact, reference, None, pad_token_id)
        for name, options in ways.items():
            sequences, logits = decode(model, batch, options)
            variants[name].add(sequences, logits, exact, reference, reference_errors, pad_token_id)
    return {name: variant.summary() for name, variant in variants.items()}


def measure_checkpoint(path: str, sources: list[str], args) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(path)
    exact_model = SimpleAttnMarianMTModel.from_pretrained(path).eval().double()
    batches = [
        tokenizer(sources[first : first + args.batch_size], return_tensors="pt", padding=True, truncation=True)
        for first in range(0, len(sources), args.batch_size)
    ]
    results = {"preset": exact_model.config.attention_preset, "dtypes": {}}
    for dtype_name in args.dtypes:
        torch._dynamo.reset()
        common.progress(f"{path} {dtype_name}")
        model = copy.deepcopy(exact_model).to(DTYPES[dtype_name])
        entry = results["dtypes"][dtype_name] = measure_dtype(exact_model, model, batches, args)
        compiled = entry["compiled"]
        common.progress(
            f"{path} {dtype_name}: compiled identical {compiled['identical']:.1%}, all but rounding flips "
            f"{compiled['identical_but_rounding']:.1%}; logit error median {compiled['logit_error']['median']:.2g} "
            f"(eager {entry['eager']['logit_error']['median']:.2g})"
        )
    return results


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    sources = source_sentences(args)
    checkpoints = {}
    for path in args.checkpoints:
        name = os.path.join(*os.path.normpath(path).split(os.sep)[-2:])  # study/run
        checkpoints[name] = measure_checkpoint(path, sources, args)
    data = common.result_header("compiled_agreement", args) | {"checkpoints": checkpoints}
    common.write_json(args.output, data)
    print("\n".join(summarize.compiled_agreement(data)))
    return data


if __name__ == "__main__":
    main()
