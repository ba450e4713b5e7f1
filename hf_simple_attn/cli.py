"""`hf-simple-attn`: browse the preset catalogue, inspect layouts and analyse trained checkpoints.

hf-simple-attn presets                    # every named configuration, with its source
hf-simple-attn describe sh-x --size opus-mt   # layout table and parameter count
hf-simple-attn describe band6                 # an encoder (BERT) preset, at bert-base size
hf-simple-attn analyze runs/hc-sa --test_file test.jsonl   # attention entropy, locality, ... (analysis.json, PNGs)
hf-simple-attn export runs/hc-sa runs/hc-sa-onnx --format onnx  # any layout: ONNX encoder + decoder-with-past
hf-simple-attn export runs/hc-sa runs/hc-sa-onnx-int8 --format onnx --quantization int8
hf-simple-attn export runs/base runs/base-ct2 --format ctranslate2 --quantization int8   # the base layout only
hf-simple-attn shortlist runs/hc-sa --dataset_name embedded --top_k 50 --frequent 100  # vocabulary shortlist
hf-simple-attn push runs/hc-sa you/hc-sa-en-de [--private] [--revision BRANCH]  # the files --push_to_hub pushes
hf-simple-attn convert Helsinki-NLP/opus-mt-en-de --preset hc-sa opus-hc-sa  # a pretrained checkpoint, new layout
"""

import argparse
import json
import os
import re
import sys
import tempfile

from . import __version__
from .modeling.presets import PRESETS
from .recipes.sizes import bert_size, marian_size


# Exit status of a process stopped by SIGPIPE (128 + 13), as `yes | head -1` leaves it.
BROKEN_PIPE_STATUS = 141
# The sizes `describe` offers per kind of model (hf_simple_attn.recipes.sizes), and their config fields.
KIND_SIZES = {
    "seq2seq": {name: marian_size(name) for name in ("opus-mt", "small")},
    "encoder": {name: bert_size(name) for name in ("bert-base", "small")},
}
DEFAULT_SIZES = {"seq2seq": "opus-mt", "encoder": "bert-base"}  # the papers' sizes
# A Hub repository id: NAME or NAMESPACE/NAME, of letters, digits, '-', '_' and '.'.
HUB_REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")


def print_presets(model_kind: str) -> None:
    for kind in [model_kind] if model_kind else list(PRESETS):
        print(f"{kind} presets:")
        for name, preset in PRESETS[kind].items():
            print(f"  {name:<22} {preset['description']}\n  {'':<22} [{preset['source']}]")


def describe(preset: str, model_kind: str, size: str) -> None:
    """Print the parameter count and layout table of a seq2seq (Marian) or encoder (BERT) preset."""
    import torch

    from . import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
    from .recipes.layout_table import layout_table
    from .recipes.model_card import ATTENTION_PARAMETER

    config_class, model_class = {
        "seq2seq": (SimpleAttnMarianConfig, SimpleAttnMarianMTModel),
        "encoder": (SimpleAttnBertConfig, SimpleAttnBertModel),
    }[model_kind]
    config = config_class.from_preset(preset, **KIND_SIZES[model_kind][size])
    with torch.device("meta"):
        model = model_class(config)
    total = sum(p.numel() for p in model.parameters())
    attention = sum(p.numel() for n, p in model.named_parameters() if ATTENTION_PARAMETER.search(n))
    print(f"{preset} ({model_kind}) at size {size}: {total:,} parameters, of which attention {attention:,}\n")
    print(layout_table(config))


def analyze(args: argparse.Namespace) -> None:
    from .studies.analysis import analyze_checkpoint

    output_dir = args.output_dir or f"{args.run_dir}/analysis"
    analysis = analyze_checkpoint(
        args.run_dir,
        args.test_file,
        output_dir,
        args.max_sentences,
        args.base_run_dir,
        args.source_lang,
        args.target_lang,
    )
    plots = ", ".join(analysis["plots"])
    print(f"{analysis['sentences']} sentences analysed: {output_dir}/analysis.json; plots: {plots}")


def export(args: argparse.Namespace) -> None:
    """A deployable copy of a checkpoint, by its config's `model_type`: an encoder (BERT) checkpoint as one ONNX
    graph, any other as a seq2seq (Marian) one, ONNX encoder and decoder-with-past graphs or CTranslate2; a model the
    format cannot hold is refused with the alternative."""
    from .modeling.configuration_simple_attn_bert import SimpleAttnBertConfig

    config_file = os.path.join(args.run_dir, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"{args.run_dir}: no config.json; expected a checkpoint folder written by save_pretrained")
    with open(config_file) as file:
        is_encoder = json.load(file).get("model_type") == SimpleAttnBertConfig.model_type
    if args.format == "ctranslate2":
        if is_encoder:
            raise ValueError(
                f"{args.run_dir}: CTranslate2 conversion is for seq2seq checkpoints; export this encoder (BERT) "
                f"checkpoint to ONNX instead: hf-simple-attn export {args.run_dir} OUT_DIR --format onnx "
                "(hf_simple_attn.deploy.export_bert.export_bert_onnx)"
            )
        from .deploy.ctranslate2_export import convert_to_ctranslate2

        convert_to_ctranslate2(args.run_dir, args.out_dir, quantization=args.quantization)
    else:
        if is_encoder:
            from .deploy.export_bert import export_bert_onnx as export_graphs
        else:
            from .deploy.export import export_onnx as export_graphs
        if args.quantization == "int8":
            from .deploy.quantize import quantize_onnx_int8

            with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.out_dir))) as float_dir:
                quantize_onnx_int8(export_graphs(args.run_dir, float_dir), args.out_dir)
        else:
            export_graphs(args.run_dir, args.out_dir)
    print(f"{args.format} model written to {args.out_dir}")


# The data options of `shortlist`, as `training/run_translation.py` names them (DataTrainingArguments).
SHORTLIST_DATA_OPTIONS = {
    "dataset_name": (str, "the training data: an offline corpus (embedded, libreoffice_help, ...) or a Hub dataset"),
    "dataset_config_name": (str, "its configuration (for the offline corpora, the target language)"),
    "train_file": (str, "or local training data (json/jsonl/csv/tsv)"),
    "validation_file": (str, "validation data, for the coverage report"),
    "source_lang": (str, "source language (default for the offline corpora: en)"),
    "target_lang": (str, "target language"),
    "data_cache_dir": (str, "where the offline corpora are built"),
    "max_train_samples": (int, "only the first N training pairs"),
    "max_source_length": (int, "as in training (default 128)"),
    "max_target_length": (int, "as in training (default 128)"),
    "source_prefix": (str, "as in training"),
}
# Former names of these options, still accepted.
SHORTLIST_OPTION_ALIASES = {"data_cache_dir": ["--corpus_cache_dir"]}


def shortlist(args: argparse.Namespace) -> None:
    """Build a vocabulary shortlist from the training data and add it to the checkpoint; report its coverage."""
    from .deploy.shortlist import shortlist_from_data
    from .recipes.translation_task import DataTrainingArguments

    data_options = {name: getattr(args, name) for name in SHORTLIST_DATA_OPTIONS if getattr(args, name) is not None}
    report = shortlist_from_data(
        args.run_dir, DataTrainingArguments(**data_options), args.top_k, args.frequent, args.iterations
    )
    print(
        f"shortlist added to {args.run_dir}: the top {report['top_k']} target tokens of each source token, and "
        f"{report['always_allowed']} always allowed (special + {report['frequent']} frequent), from "
        f"{report['training_pairs']:,} training pairs"
    )
    if "validation" in report:
        coverage = report["validation"]
        print(
            f"validation coverage: {coverage['coverage']:.2%} of the reference tokens "
            f"({coverage['sentences_covered']:.1%} of the sentences fully); "
            f"{coverage['candidates_per_sentence']:.0f} candidates per sentence, "
            f"{coverage['candidates_per_batch']:.0f} per batch of {coverage['batch_size']} "
            f"({coverage['vocabulary_share_per_batch']:.1%} of the vocabulary)"
        )
    print("decode with it: generate(..., use_shortlist=True), or set generation_config.use_shortlist = True")


def push(args: argparse.Namespace) -> None:
    """Push a trained run folder to the Hub as the training scripts' `--push_to_hub` does (`push_checkpoint`)."""
    from .recipes.hub import push_checkpoint

    if not os.path.isfile(os.path.join(args.run_dir, "config.json")):
        raise ValueError(
            f"RUN_DIR: {args.run_dir} holds no config.json; expected a run folder written by a training script"
        )
    if not HUB_REPO_ID.match(args.repo_id):
        raise ValueError(f"REPO_ID: expected a Hub repository id, NAME or NAMESPACE/NAME, got {args.repo_id!r}")
    try:
        url = push_checkpoint(args.run_dir, args.repo_id, private=args.private, revision=args.revision)
    except RuntimeError as error:  # the Hub refused or could not be reached: exit status 1, the reason on stderr
        sys.exit(f"hf-simple-attn push: error: {error}")
    print(f"pushed {args.run_dir} to {args.repo_id}: {url}")


def convert(args: argparse.Namespace) -> None:
    """A pretrained Marian or BERT checkpoint (or one of the package's) in another attention layout, saved with its
    tokenizer and a card that names the source and what was copied, newly initialised and dropped."""
    from .recipes.arguments import parse_attention_layout
    from .recipes.convert import OWN_CLASSES, save_converted_checkpoint

    if args.model_class not in (None, *OWN_CLASSES):
        raise ValueError(f"--model_class: expected one of {sorted(OWN_CLASSES)}, got {args.model_class!r}")
    info = save_converted_checkpoint(
        args.model,
        args.output_dir,
        preset=args.preset,
        attention_layout=parse_attention_layout(args.attention_layout),
        model_class=OWN_CLASSES.get(args.model_class),
        tokenizer_name=args.tokenizer_name,
        overwrite_output_dir=args.overwrite_output_dir,
    )
    counts = ", ".join(f"{len(names)} {kind}" for kind, names in info.items())
    print(f"converted {args.model} to {args.output_dir} (tensors: {counts}; see its README.md)")


def build_parser() -> argparse.ArgumentParser:
    """The `hf-simple-attn` parser, every subcommand and option (the docs' CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="hf-simple-attn", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the named attention configurations")
    presets.add_argument(
        "--kind", choices=sorted(PRESETS), default=None, help="only the seq2seq (Marian) or encoder (BERT) presets"
    )
    show = commands.add_parser("describe", help="layout table and parameter count of a preset")
    show.add_argument(
        "preset",
        choices=list(dict.fromkeys(name for kind in PRESETS.values() for name in kind)),
        help="a preset of either kind, as `presets` lists them",
    )
    show.add_argument(
        "--model_kind",
        choices=sorted(PRESETS),
        default=None,
        help="for a preset of both kinds (default: seq2seq if it has the preset, else encoder)",
    )
    show.add_argument(
        "--size",
        choices=sorted({name for sizes in KIND_SIZES.values() for name in sizes}),
        default=None,
        help="seq2seq: opus-mt (default), small; encoder: bert-base (default), small",
    )
    checkpoint = commands.add_parser(
        "analyze", help="attention entropy, locality, GMM gates, retrieval agreement, BLEU by length of a checkpoint"
    )
    checkpoint.add_argument("run_dir", help="a translation checkpoint saved with its tokenizer (run_translation.py)")
    checkpoint.add_argument(
        "--test_file",
        required=True,
        help='a data file as run_translation.py reads one: json/jsonl {"translation": {"en": ..., "de": ...}} rows, '
        "or csv/tsv with a column per language",
    )
    checkpoint.add_argument(
        "--source_lang", default="en", help="the source language's key (or column) in the test file"
    )
    checkpoint.add_argument(
        "--target_lang", default="de", help="the target language's key (or column) in the test file"
    )
    checkpoint.add_argument("--output_dir", default=None, help="for analysis.json and the PNGs (RUN_DIR/analysis)")
    checkpoint.add_argument("--max_sentences", type=int, default=100, help="test pairs the attention is analysed on")
    checkpoint.add_argument(
        "--base_run_dir", default=None, help="a `base` checkpoint, same tokenizer: agreement of hard retrieval heads"
    )
    deploy = commands.add_parser(
        "export",
        help="a deployable copy of a checkpoint: ONNX graphs (any layout, seq2seq or encoder) or CTranslate2 "
        "(seq2seq, base layout)",
    )
    deploy.add_argument(
        "run_dir", help="a checkpoint folder (with its tokenizer): seq2seq (Marian), or encoder (BERT; ONNX only)"
    )
    deploy.add_argument("out_dir", help="the folder written (for ctranslate2 or int8: one that does not exist yet)")
    deploy.add_argument(
        "--format", choices=["onnx", "ctranslate2"], required=True, help="ONNX Runtime graphs or a CTranslate2 model"
    )
    deploy.add_argument(
        "--quantization",
        choices=["int8"],
        default=None,
        help="int8 weights (CTranslate2's; for onnx, ONNX Runtime's dynamic quantisation)",
    )
    lexical = commands.add_parser(
        "shortlist", help="build a vocabulary shortlist from the training data and add it to a checkpoint"
    )
    lexical.add_argument("run_dir", help="a translation checkpoint saved with its tokenizer (changed in place)")
    for name, (value_type, help_text) in SHORTLIST_DATA_OPTIONS.items():
        aliases = SHORTLIST_OPTION_ALIASES.get(name, [])
        lexical.add_argument(f"--{name}", *aliases, type=value_type, default=None, help=help_text)
    lexical.add_argument("--top_k", type=int, default=50, help="target tokens kept per source token")
    lexical.add_argument("--frequent", type=int, default=100, help="most frequent target tokens, always allowed")
    lexical.add_argument("--iterations", type=int, default=5, help="EM iterations of IBM Model 1")
    upload = commands.add_parser(
        "push",
        help="push a trained run folder (model, code, tokenizer, card, results) to the Hub, as --push_to_hub does",
    )
    upload.add_argument("run_dir", help="a run's --output_dir; checkpoint-* folders and training state stay local")
    upload.add_argument("repo_id", help="the Hub repository, NAMESPACE/NAME (or NAME: the token's user)")
    upload.add_argument("--private", action="store_true", help="create the repository as private (if it is new)")
    upload.add_argument("--revision", default=None, help="the branch to commit to, created if missing (default main)")
    conversion = commands.add_parser(
        "convert",
        help="a pretrained Marian or BERT checkpoint (or one of ours) in another attention layout, saved with its "
        "tokenizer and a model card",
    )
    conversion.add_argument("model", help="a Hub name or a local folder: Marian, BERT or an hf_simple_attn checkpoint")
    conversion.add_argument("output_dir", help="where the converted checkpoint is saved (a new or empty folder)")
    conversion.add_argument(
        "--preset", default=None, help="the attention preset (`hf-simple-attn presets`; default: base)"
    )
    conversion.add_argument(
        "--attention_layout", default=None, help="a layout as JSON or a .json file; with --preset, replaces its sites"
    )
    conversion.add_argument(
        "--model_class",
        default=None,
        help="the class to convert to, e.g. SimpleAttnBertForSequenceClassification (default: the source's "
        "counterpart, from its config's architectures)",
    )
    conversion.add_argument("--tokenizer_name", default=None, help="the tokenizer to save, if not the model's")
    conversion.add_argument(
        "--overwrite_output_dir", action="store_true", help="write into a non-empty OUTPUT_DIR (same names replaced)"
    )
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "describe":
        model_kind = args.model_kind or ("seq2seq" if args.preset in PRESETS["seq2seq"] else "encoder")
        if args.preset not in PRESETS[model_kind]:
            parser.error(f"describe: {args.preset!r} is not among the {model_kind} presets")
        if args.size not in (None, *KIND_SIZES[model_kind]):
            parser.error(f"describe: --size of {model_kind} presets: {', '.join(KIND_SIZES[model_kind])}")
    try:
        if args.command == "presets":
            print_presets(args.kind)
        elif args.command == "describe":
            describe(args.preset, model_kind, args.size or DEFAULT_SIZES[model_kind])
        else:
            # The commands that read a checkpoint or data: bad input is a command-line error, not a traceback.
            try:
                runners = {
                    "export": export,
                    "shortlist": shortlist,
                    "analyze": analyze,
                    "push": push,
                    "convert": convert,
                }
                runners[args.command](args)
            except (ValueError, FileExistsError) as error:
                parser.exit(2, f"hf-simple-attn {args.command}: error: {error}\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly; point stdout at devnull so the final flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(BROKEN_PIPE_STATUS)


if __name__ == "__main__":
    main()
