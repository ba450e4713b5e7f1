"""`hf-simple-attn`: browse the preset catalogue, inspect layouts and analyse trained checkpoints.

    hf-simple-attn presets                    # every named configuration, with its source
    hf-simple-attn describe sh-x --size opus-mt   # layout table and parameter count
    hf-simple-attn analyze runs/hc-sa --test_file test.jsonl   # attention entropy, locality, ... (analysis.json, PNGs)
"""

import argparse

from .modeling.presets import PRESETS

SIZES = {
    "opus-mt": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                    decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=58101,
                    pad_token_id=58100, decoder_start_token_id=58100),
    "small": dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, vocab_size=8000,
                  pad_token_id=7999, decoder_start_token_id=7999),
}


def print_presets(model_kind: str) -> None:
    for kind in [model_kind] if model_kind else list(PRESETS):
        print(f"{kind} presets:")
        for name, preset in PRESETS[kind].items():
            print(f"  {name:<22} {preset['description']}\n  {'':<22} [{preset['source']}]")


def describe(preset: str, size: str) -> None:
    import torch

    from . import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
    from .analysis import layout_table

    config = SimpleAttnMarianConfig.from_preset(preset, **SIZES[size])
    with torch.device("meta"):
        model = SimpleAttnMarianMTModel(config)
    total = sum(p.numel() for p in model.parameters())
    attention = sum(p.numel() for n, p in model.named_parameters() if "attn" in n)
    print(f"{preset} at size {size}: {total:,} parameters, of which attention {attention:,}\n")
    print(layout_table(config))


def analyze(args: argparse.Namespace) -> None:
    from .study_analysis import analyze_checkpoint

    output_dir = args.output_dir or f"{args.run_dir}/analysis"
    analysis = analyze_checkpoint(
        args.run_dir, args.test_file, output_dir, args.max_sentences, args.base_run_dir, args.source_lang,
        args.target_lang,
    )
    plots = ", ".join(analysis["plots"])
    print(f"{analysis['sentences']} sentences analysed: {output_dir}/analysis.json; plots: {plots}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="hf-simple-attn", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the named attention configurations")
    presets.add_argument("--kind", choices=sorted(PRESETS), default=None)
    show = commands.add_parser("describe", help="layout table and parameter count of a seq2seq preset")
    show.add_argument("preset", choices=list(PRESETS["seq2seq"]))
    show.add_argument("--size", choices=sorted(SIZES), default="opus-mt")
    checkpoint = commands.add_parser(
        "analyze", help="attention entropy, locality, GMM gates, retrieval agreement, BLEU by length of a checkpoint"
    )
    checkpoint.add_argument("run_dir", help="a translation checkpoint saved with its tokenizer (run_translation.py)")
    checkpoint.add_argument("--test_file", required=True, help='jsonl: {"translation": {"en": ..., "de": ...}} lines')
    checkpoint.add_argument("--source_lang", default="en")
    checkpoint.add_argument("--target_lang", default="de")
    checkpoint.add_argument("--output_dir", default=None, help="for analysis.json and the PNGs (RUN_DIR/analysis)")
    checkpoint.add_argument("--max_sentences", type=int, default=100, help="test pairs the attention is analysed on")
    checkpoint.add_argument(
        "--base_run_dir", default=None, help="a `base` checkpoint, same tokenizer: agreement of hard retrieval heads"
    )
    args = parser.parse_args(argv)
    if args.command == "presets":
        print_presets(args.kind)
    elif args.command == "describe":
        describe(args.preset, args.size)
    else:
        analyze(args)


if __name__ == "__main__":
    main()
