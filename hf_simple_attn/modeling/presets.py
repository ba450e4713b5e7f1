"""The named attention layouts the papers report, as data.

Each preset is a compact layout (see `layout.py`) plus a description and its source. Per-head
lists are cycled over the heads and layer selectors scale with depth, so every preset builds at
any size; at the papers' sizes it is exactly the papers' configuration.
"""

from .attention_local import ALL_SEVEN_MASKS
from .attention_registry import ATTENTION_FAMILIES


HC_SA_ENCODER = {"kind": "hard_coded", "offsets": [-1, 1]}
HC_SA_DECODER = {"kind": "hard_coded", "offsets": [-1, 0]}
HC_CROSS = {"kind": "hard_coded", "offsets": [-1, 0, 1]}
ONE_LEARNED_CROSS_HEAD = {"kind": "dot", "num_heads": 1}

LOCAL_ALL_MASKS = {"kind": "local", "masks": ALL_SEVEN_MASKS}
LOCAL_ONE_QUERY_KEY_SET = {"kind": "local", "masks": ALL_SEVEN_MASKS, "query_key_sets": 1}
BAND6 = {"kind": "local", "masks": "band-6"}
GMM_CROSS = {"kind": "gaussian_mixture"}
RAN_HEADS = {"kind": "recurrent"}
SYNTHESIZER_HEADS = {"kind": "random_synthesizer"}

HARD_CODED_PAPER = ATTENTION_FAMILIES["hard_coded"].paper
LOCAL_PAPER = ATTENTION_FAMILIES["local"].paper
RAN_PAPER = ATTENTION_FAMILIES["recurrent"].paper
GMM_PAPER = ATTENTION_FAMILIES["gaussian_mixture"].paper
HARD_RETRIEVAL_PAPER = ATTENTION_FAMILIES["hard_retrieval"].paper

SEQ2SEQ_PRESETS = {
    "base": {
        "description": "Standard Transformer: learned dot-product attention everywhere (BASE).",
        "source": ATTENTION_FAMILIES["dot"].paper,
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
    # Recurrent attention (RAN) and its Random Synthesizer baseline.
    "ran-e": {
        "description": "Recurrent attention (RAN) in the encoder self-attention: learned initial logits A0 refined layer by layer by one shared transition LN(tanh(W·A+b)) + A; decoder as BASE.",
        "source": RAN_PAPER + ", RAN-E",
        "layout": {"encoder_self": RAN_HEADS},
    },
    "ran-d": {
        "description": "Recurrent attention (RAN) in the decoder self-attention (causal); encoder as BASE.",
        "source": RAN_PAPER + ", RAN-D",
        "layout": {"decoder_self": RAN_HEADS},
    },
    "ran-all": {
        "description": "Recurrent attention in encoder and decoder self-attention, one A0 and one transition per stack; learned cross attention.",
        "source": RAN_PAPER + ", RAN-ALL",
        "layout": {"encoder_self": RAN_HEADS, "decoder_self": RAN_HEADS},
    },
    "ran-all-fixed": {
        "description": "RAN-ALL with the initial attention logits A0 fixed at their random initialisation (only the transition is trained).",
        "source": RAN_PAPER + ", Table 3 (fixed)",
        "layout": {
            "encoder_self": {**RAN_HEADS, "freeze_initial": True},
            "decoder_self": {**RAN_HEADS, "freeze_initial": True},
        },
    },
    "ran-all-no-ln-res": {
        "description": "RAN-ALL without LayerNorm and residual in the transition: A_l = tanh(W·A_{l-1} + b).",
        "source": RAN_PAPER + ", Table 3 (w/o LN&RES)",
        "layout": {
            "encoder_self": {**RAN_HEADS, "layer_norm_residual": False},
            "decoder_self": {**RAN_HEADS, "layer_norm_residual": False},
        },
    },
    "syn-r": {
        "description": "Random Synthesizer: each encoder and decoder self-attention layer learns its own input-independent attention logits (heads × M × M); learned cross attention.",
        "source": ATTENTION_FAMILIES["random_synthesizer"].paper,
        "layout": {"encoder_self": SYNTHESIZER_HEADS, "decoder_self": SYNTHESIZER_HEADS},
    },
    # Local masks (encoder self-attention; the paper's configurations b-l at 8 heads, 6 layers).
    "local-2heads": {
        "description": "Every encoder layer: a quarter of the heads local (band-1, band-2 at 8 heads), the rest global.",
        "source": LOCAL_PAPER + ", config (b) 2LocHeads All6",
        "layout": {
            "encoder_self": {
                "kind": "local",
                "masks": ["band-1", "global", "global", "global", "band-2", "global", "global", "global"],
            }
        },
    },
    "local-4heads": {
        "description": "Every encoder layer: half the heads local (band-1, band-2, band-1, band-2 at 8 heads), half global.",
        "source": LOCAL_PAPER + ", config (c) 4LocHeads All6",
        "layout": {"encoder_self": {"kind": "local", "masks": ["band-1", "global", "band-2", "global"]}},
    },
    "local-first3": {
        "description": "First half of the encoder layers: all heads local with all 7 masks (identity twice); the rest global.",
        "source": LOCAL_PAPER + ", config (d) 8LocHeads First3",
        "layout": {"encoder_self": {"layers": {"first_half": LOCAL_ALL_MASKS}}},
    },
    "local-last3": {
        "description": "Last half of the encoder layers: all heads local with all 7 masks (identity twice); the rest global.",
        "source": LOCAL_PAPER + ", config (e) 8LocHeads Last3",
        "layout": {"encoder_self": {"layers": {"last_half": LOCAL_ALL_MASKS}}},
    },
    "local-all": {
        "description": "Every encoder head local, all 7 masks (identity twice) in every layer.",
        "source": LOCAL_PAPER + ", config (f) 8LocHeads All6",
        "layout": {"encoder_self": LOCAL_ALL_MASKS},
    },
    "local-4tied": {
        "description": "All encoder heads local; each contiguous pair of heads shares one W_q/W_k set (masks identity, band-2).",
        "source": LOCAL_PAPER + ", config (g) 4LocHeads 4TiedLoc All6",
        "layout": {"encoder_self": {"kind": "local", "masks": ["identity", "band-2"], "heads_per_query_key_set": 2}},
    },
    "local-2tied": {
        "description": "All encoder heads local; each half of the heads shares one W_q/W_k set (masks identity, band-2, prev-1, next-1).",
        "source": LOCAL_PAPER + ", config (h) 2LocHeads 6TiedLoc All6",
        "layout": {
            "encoder_self": {"kind": "local", "masks": ["identity", "band-2", "prev-1", "next-1"], "query_key_sets": 2}
        },
    },
    "local-1tied": {
        "description": "All encoder heads local with all 7 masks; one W_q/W_k set per layer shared by all its heads.",
        "source": LOCAL_PAPER + ", config (i) 1LocHead 7TiedLoc All6",
        "layout": {"encoder_self": LOCAL_ONE_QUERY_KEY_SET},
    },
    "local-1tied-first3": {
        "description": "As local-1tied in the first half of the encoder layers; the other layers global.",
        "source": LOCAL_PAPER + ", config (j) 1LocHead 7TiedLoc First3",
        "layout": {"encoder_self": {"layers": {"first_half": LOCAL_ONE_QUERY_KEY_SET}}},
    },
    "local-half-tied": {
        "description": "First half of the encoder layers: all heads local, one W_q/W_k set shared by all their heads and layers; the rest global.",
        "source": LOCAL_PAPER + ", config (k) Half Tied",
        "layout": {"encoder_self": {"layers": {"first_half": LOCAL_ONE_QUERY_KEY_SET}, "tie_query_key": "first_half"}},
    },
    "local-fully-tied": {
        "description": "All encoder heads local with all 7 masks; one W_q/W_k set shared by every head of every layer.",
        "source": LOCAL_PAPER + ", config (l) Fully Tied",
        "layout": {"encoder_self": {"default": LOCAL_ONE_QUERY_KEY_SET, "tie_query_key": "all"}},
    },
    # Gaussian-mixture cross attention.
    "gmm": {
        "description": "Gaussian mixture cross attention (K = 4, approximate normalisation) gated with dot product in every decoder layer.",
        "source": GMM_PAPER + ", Our Method (Table 2)",
        "layout": {"cross": GMM_CROSS},
    },
    "gmm-norm": {
        "description": "GMM with strict normalisation: σ = J·sigmoid(σ̂), β divided by its sum over the source.",
        "source": GMM_PAPER + ", Our Method+Norm. (Tables 1-2)",
        "layout": {"cross": {**GMM_CROSS, "normalization": "strict"}},
    },
    "gmm-synthesis": {
        "description": "Graves' synthesis network in place of the mixture: unnormalised, means advancing monotonically over the target.",
        "source": GMM_PAPER + ", Synthesis Network (Tables 1-2), after Graves 2013",
        "layout": {"cross": {**GMM_CROSS, "normalization": "none"}},
    },
    "gmm-average": {
        "description": "GMM fused with dot-product attention by a plain average instead of the gate.",
        "source": GMM_PAPER + ", Table 4 (Average Gating)",
        "layout": {"cross": {**GMM_CROSS, "fusion": "average"}},
    },
    "gmm-only": {
        "description": "Gaussian mixture attention alone as cross attention (no dot-product term).",
        "source": GMM_PAPER + ", Table 4 (Gaussian Mixture Attention)",
        "layout": {"cross": {**GMM_CROSS, "fusion": "gmm_only"}},
    },
    "gmm-top2": {
        "description": "GMM cross attention in the top third of the decoder layers (top 2 of 6), dot product elsewhere.",
        "source": GMM_PAPER + ", Table 5 (Top 2 layers)",
        "layout": {"cross": {"default": "dot", "layers": {"top_third": GMM_CROSS}}},
    },
    "gmm-middle2": {
        "description": "GMM cross attention in the middle third of the decoder layers (middle 2 of 6), dot product elsewhere.",
        "source": GMM_PAPER + ", Table 5 (Middle 2 layers)",
        "layout": {"cross": {"default": "dot", "layers": {"middle_third": GMM_CROSS}}},
    },
    "gmm-bottom2": {
        "description": "GMM cross attention in the bottom third of the decoder layers (bottom 2 of 6), dot product elsewhere.",
        "source": GMM_PAPER + ", Table 5 (Bottom 2 layers)",
        "layout": {"cross": {"default": "dot", "layers": {"bottom_third": GMM_CROSS}}},
    },
    # Hard retrieval.
    "hard-cross": {
        "description": "Hard retrieval cross attention: each head copies one encoder state (sampled in training, argmax at inference).",
        "source": HARD_RETRIEVAL_PAPER + ", Table 3 (Dec Cross-Attn)",
        "layout": {"cross": "hard_retrieval"},
    },
    "hard-dec": {
        "description": "Hard retrieval attention in decoder self and cross attention (the paper's setting, 1.43x decoding speed).",
        "source": HARD_RETRIEVAL_PAPER + ", Tables 1 and 3 (Dec Cross- and Self-Attn)",
        "layout": {"decoder_self": "hard_retrieval", "cross": "hard_retrieval"},
    },
    "hard-all": {
        "description": "Hard retrieval attention at every site, encoder included (costs BLEU in the paper).",
        "source": HARD_RETRIEVAL_PAPER + ", Table 3 (Enc Self- and Dec Cross- and Self-Attn)",
        "layout": {"encoder_self": "hard_retrieval", "decoder_self": "hard_retrieval", "cross": "hard_retrieval"},
    },
}

ENCODER_PRESETS = {
    "base": {
        "description": "Standard BERT encoder: learned dot-product attention in every head.",
        "source": "Devlin et al. 2019",
        "layout": {},
    },
    "band2": {
        "description": "Every head of every layer local with a band-2 mask (|i - j| <= 2); W_q/W_k untied.",
        "source": LOCAL_PAPER + ", Table 4 (All Band2 Untied)",
        "layout": {"encoder_self": {"kind": "local", "masks": "band-2"}},
    },
    "band6": {
        "description": "Every head of every layer local with a band-6 mask (|i - j| <= 6); W_q/W_k untied.",
        "source": LOCAL_PAPER + ", Table 4 (All Band6 Untied)",
        "layout": {"encoder_self": BAND6},
    },
    "band6-alltied": {
        "description": "band6 with W_q/W_k shared across all layers (values and output projections stay per layer).",
        "source": LOCAL_PAPER + ", Table 4 (All Band6 AllTied)",
        "layout": {"encoder_self": {"default": BAND6, "tie_query_key": "all"}},
    },
    "band6-132tied": {
        "description": "band6 with W_q/W_k shared across all layers but the last (132 tied heads at 12 x 12).",
        "source": LOCAL_PAPER + ", Table 4 (All Band6 132Tied)",
        "layout": {"encoder_self": {"default": BAND6, "tie_query_key": "all_but_last"}},
    },
    "band6-120tied": {
        "description": "band6 with W_q/W_k shared across all layers but the last two (120 tied heads at 12 x 12).",
        "source": LOCAL_PAPER + ", Table 4 (All Band6 120Tied)",
        "layout": {"encoder_self": {"default": BAND6, "tie_query_key": "all_but_last_2"}},
    },
}

# Seq2seq presets whose encoder part is an encoder layout of its own: the encoder catalogue takes
# their `encoder_self` / `encoder_ffn` under the same name.
ENCODER_CAPABLE_SEQ2SEQ = (
    "hc-sa",
    "hc-sa-conv",
    "hc-sa-index",
    "hc-sa-no-ff",
    "ran-e",
    "ran-all-fixed",
    "ran-all-no-ln-res",
    "syn-r",
    "local-2heads",
    "local-4heads",
    "local-first3",
    "local-last3",
    "local-all",
    "local-4tied",
    "local-2tied",
    "local-1tied",
    "local-1tied-first3",
    "local-half-tied",
    "local-fully-tied",
    "hard-all",
)
for _name in ENCODER_CAPABLE_SEQ2SEQ:
    _preset = SEQ2SEQ_PRESETS[_name]
    ENCODER_PRESETS[_name] = {
        "description": _preset["description"],
        "source": _preset["source"],
        "layout": {site: spec for site, spec in _preset["layout"].items() if site in ("encoder_self", "encoder_ffn")},
    }

PRESETS = {"seq2seq": SEQ2SEQ_PRESETS, "encoder": ENCODER_PRESETS}


def presets_of(model_kind: str) -> dict:
    if not isinstance(model_kind, str) or model_kind not in PRESETS:
        raise ValueError(f"model_kind: expected one of {sorted(PRESETS)}, got {model_kind!r}")
    return PRESETS[model_kind]


def list_presets(model_kind: str = "seq2seq") -> list[str]:
    """Names of the presets for `"seq2seq"` (Marian-style) or `"encoder"` (BERT-style) models."""
    return list(presets_of(model_kind))


def get_preset(name: str, model_kind: str = "seq2seq") -> dict:
    presets = presets_of(model_kind)
    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"attention_preset: unknown {model_kind} preset {name!r}; valid presets: {list(presets)}")
    return presets[name]
