"""`hf-simple-attn`: browse the preset catalogue and inspect layouts.

    hf-simple-attn presets                    # every named configuration, with its source
    hf-simple-attn describe sh-x --size opus-mt   # layout table and parameter count
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="hf-simple-attn", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the named attention configurations")
    presets.add_argument("--kind", choices=sorted(PRESETS), default=None)
    show = commands.add_parser("describe", help="layout table and parameter count of a seq2seq preset")
    show.add_argument("preset", choices=list(PRESETS["seq2seq"]))
    show.add_argument("--size", choices=sorted(SIZES), default="opus-mt")
    args = parser.parse_args(argv)
    if args.command == "presets":
        print_presets(args.kind)
    else:
        describe(args.preset, args.size)


if __name__ == "__main__":
    main()
