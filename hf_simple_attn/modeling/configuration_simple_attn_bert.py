"""Configuration of a BERT-style encoder whose self-attention follows an attention layout."""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig

from .attention_heads import positive_int
from .layout import merge_layouts, normalize_layout
from .presets import get_preset


SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)

# What the pooler reads: the first token ([CLS]) or the mean of the real tokens.
CLASSIFIER_POOLINGS = ("cls", "mean")


@strict
class SimpleAttnBertConfig(BertConfig):
    r"""Configuration of a BERT encoder whose attention follows `attention_layout`.

    Every `BertConfig` field is accepted with the same meaning (the model is an encoder only:
    `is_decoder` and `add_cross_attention` must stay false). Added fields:

    attention_layout (`dict`, *optional*):
        Which attention each layer and head of the encoder uses (site `encoder_self`, plus
        `encoder_ffn` to switch feed-forward blocks off; see `layout.py`); stored expanded, one
        explicit spec per layer. Defaults to the preset's layout, or to `base` (all dot product).
    attention_preset (`str`, *optional*):
        The named configuration this layout came from (see `presets.py`, kind `"encoder"`).
    classifier_pooling (`str`, *optional*, defaults to `"cls"`):
        What the pooler (and so the sequence classifier) reads: `"cls"` the first token, as BERT; `"mean"` the
        mean of the real tokens, as sentence-transformers' MiniLM was trained (and ModernBERT offers). With local
        attention the first token only sees `num_hidden_layers * k` positions on each side; the mean sees them all.

    The attention families read Marian's names (`d_model`, `attention_dropout`, ...); `attribute_map`
    points them at BERT's fields.
    """

    model_type = "simple_attn_bert"
    # What the weights and the attention maths depend on: a run resumed from a checkpoint must rebuild these as saved.
    architecture_fields = SIZE_FIELDS + (
        "attention_layout",
        "hidden_act",
        "layer_norm_eps",
        "classifier_pooling",
        "id2label",
    )
    attribute_map = {
        "d_model": "hidden_size",
        "attention_dropout": "attention_probs_dropout_prob",
        "encoder_layers": "num_hidden_layers",
        "encoder_attention_heads": "num_attention_heads",
    }

    attention_layout: dict | None = None
    attention_preset: str | None = None
    classifier_pooling: str = "cls"

    def __post_init__(self, **kwargs):
        if self.is_decoder or self.add_cross_attention:
            raise ValueError(
                "is_decoder / add_cross_attention: SimpleAttnBert is an encoder only; both must be false "
                "(use SimpleAttnMarianConfig for a decoder)"
            )
        for name in SIZE_FIELDS:
            positive_int(getattr(self, name), name)
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"classifier_pooling={self.classifier_pooling!r}: expected one of {', '.join(CLASSIFIER_POOLINGS)}"
            )
        if self.attention_layout is None and self.attention_preset is not None:
            self.attention_layout = get_preset(self.attention_preset, "encoder")["layout"]
        self.attention_layout = normalize_layout(
            self.attention_layout,
            stack_layers={"encoder": self.num_hidden_layers},
            site_heads={"encoder_self": self.num_attention_heads},
            d_model=self.hidden_size,
        )
        super().__post_init__(**kwargs)

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "SimpleAttnBertConfig":
        """The preset's layout at any size: `from_preset("band6", hidden_size=256, num_hidden_layers=4)`.

        An `attention_layout` override replaces the preset's spec site by site.
        """
        layout = merge_layouts(get_preset(name, "encoder")["layout"], overrides.pop("attention_layout", None))
        return cls(attention_layout=layout, attention_preset=name, **overrides)
