"""The named attention layouts the papers report, as data.

Each preset is a compact layout (see `layout.py`) plus a description and its source. Per-head
lists are cycled over the heads and layer selectors scale with depth, so every preset builds at
any size; at the papers' sizes it is exactly the papers' configuration.
"""

HC_SA_ENCODER = {"kind": "hard_coded", "offsets": [-1, 1]}
HC_SA_DECODER = {"kind": "hard_coded", "offsets": [-1, 0]}
HC_CROSS = {"kind": "hard_coded", "offsets": [-1, 0, 1]}
ONE_LEARNED_CROSS_HEAD = {"kind": "dot", "num_heads": 1}

HARD_CODED_PAPER = "You, Sun and Iyyer 2020, Hard-Coded Gaussian Attention for Neural Machine Translation"

SEQ2SEQ_PRESETS = {
    "base": {
        "description": "Standard Transformer: learned dot-product attention everywhere (BASE).",
        "source": "Vaswani et al. 2017",
        "layout": {},
    },
    "hc-sa": {
        "description": "Hard-coded Gaussian self-attention (encoder offsets -1/+1, decoder -1/0), learned cross attention.",
        "source": HARD_CODED_PAPER + ", HC-SA",
        "layout": {"encoder_self": HC_SA_ENCODER, "decoder_self": HC_SA_DECODER},
    },
    "hc-all": {
        "description": "HC-SA plus hard-coded cross attention centred at floor(γ·i) with offsets -1/0/+1.",
        "source": HARD_CODED_PAPER + ", HC-ALL",
        "layout": {"encoder_self": HC_SA_ENCODER, "decoder_self": HC_SA_DECODER, "cross": HC_CROSS},
    },
    "sh-x": {
        "description": "HC-SA with a single learned cross-attention head in the last decoder layer and no cross attention elsewhere.",
        "source": HARD_CODED_PAPER + ", SH-X",
        "layout": {
            "encoder_self": HC_SA_ENCODER,
            "decoder_self": HC_SA_DECODER,
            "cross": {"default": "none", "layers": {"last": ONE_LEARNED_CROSS_HEAD}},
        },
    },
    "sh-x-spread": {
        "description": "HC-SA with one learned cross-attention head in each of the last 4 decoder layers (Figure 7).",
        "source": HARD_CODED_PAPER + ", Figure 7 (single head across layers)",
        "layout": {
            "encoder_self": HC_SA_ENCODER,
            "decoder_self": HC_SA_DECODER,
            "cross": {"default": "none", "layers": {"last_4": ONE_LEARNED_CROSS_HEAD}},
        },
    },
    "base-no-sa": {
        "description": "BASE without any self-attention sublayer (BASE/-SA upper-bound experiment).",
        "source": HARD_CODED_PAPER + ", BASE/-SA",
        "layout": {"encoder_self": "none", "decoder_self": "none"},
    },
    "sh-x-no-sa": {
        "description": "SH-X without any self-attention sublayer (SH-X/-SA).",
        "source": HARD_CODED_PAPER + ", SH-X/-SA",
        "layout": {
            "encoder_self": "none",
            "decoder_self": "none",
            "cross": {"default": "none", "layers": {"last": ONE_LEARNED_CROSS_HEAD}},
        },
    },
    "base-no-ff": {
        "description": "BASE without feed-forward blocks (BASE/-FF).",
        "source": HARD_CODED_PAPER + ", BASE/-FF",
        "layout": {"encoder_ffn": False, "decoder_ffn": False},
    },
    "hc-sa-no-ff": {
        "description": "HC-SA without feed-forward blocks (HC-SA/-FF).",
        "source": HARD_CODED_PAPER + ", HC-SA/-FF",
        "layout": {
            "encoder_self": HC_SA_ENCODER,
            "decoder_self": HC_SA_DECODER,
            "encoder_ffn": False,
            "decoder_ffn": False,
        },
    },
    "hc-sa-conv": {
        "description": "HC-SA with each Gaussian truncated to a window of 3 (kernel [0.242, 0.399, 0.242]).",
        "source": HARD_CODED_PAPER + ", Table 5 (Conv)",
        "layout": {
            "encoder_self": {**HC_SA_ENCODER, "window": 3},
            "decoder_self": {**HC_SA_DECODER, "window": 3},
        },
    },
    "hc-sa-index": {
        "description": "HC-SA where each head copies exactly one value vector (a one-hot kernel).",
        "source": HARD_CODED_PAPER + ", Table 5 (Indexing)",
        "layout": {
            "encoder_self": {**HC_SA_ENCODER, "indexing": True},
            "decoder_self": {**HC_SA_DECODER, "indexing": True},
        },
    },
}

ENCODER_PRESETS = {
    "base": {
        "description": "Standard BERT encoder: learned dot-product attention in every head.",
        "source": "Devlin et al. 2019",
        "layout": {},
    },
}

PRESETS = {"seq2seq": SEQ2SEQ_PRESETS, "encoder": ENCODER_PRESETS}


def list_presets(model_kind: str = "seq2seq") -> list[str]:
    """Names of the presets for `"seq2seq"` (Marian-style) or `"encoder"` (BERT-style) models."""
    if model_kind not in PRESETS:
        raise ValueError(f"model_kind: expected one of {sorted(PRESETS)}, got {model_kind!r}")
    return list(PRESETS[model_kind])


def get_preset(name: str, model_kind: str = "seq2seq") -> dict:
    presets = PRESETS[model_kind]
    if name not in presets:
        raise ValueError(f"attention_preset: unknown {model_kind} preset {name!r}; valid presets: {list(presets)}")
    return presets[name]
