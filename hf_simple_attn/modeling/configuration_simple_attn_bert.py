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

    Every `BertConfig` field is accepted, with its meaning and default; the model's size is usually set with
    `from_preset(name, hidden_size=..., ...)`. The model is an encoder only: `is_decoder` and `add_cross_attention`
    must stay false. The attention families read Marian's names (`d_model`, `attention_dropout`, ...);
    `attribute_map` points them at BERT's fields.

    Args:
        attention_layout (`dict`, *optional*):
            Which attention each layer and head of the encoder uses (site `encoder_self`, plus `encoder_ffn` to
            switch feed-forward blocks off; see `layout.py`). Stored expanded, one explicit spec per layer. Defaults
            to the preset's layout, or to `base` (all dot product).
        attention_preset (`str`, *optional*):
            The named configuration this layout came from (see `presets.py`, kind `"encoder"`), for the record;
            given without `attention_layout`, its layout is used.
        classifier_pooling (`str`, *optional*, defaults to `"cls"`):
            What the pooler (and so the sequence classifier) reads: `"cls"` the first token, as BERT; `"mean"` the
            mean of the real tokens, as sentence-transformers' MiniLM was trained (and ModernBERT offers). With local
            attention the first token only sees `num_hidden_layers * k` positions on each side; the mean sees them all.
        vocab_size (`int`, *optional*, defaults to `30522`):
            Size of the vocabulary.
        hidden_size (`int`, *optional*, defaults to `768`):
            Width of the embeddings and hidden states; a layer's heads are `hidden_size / num_heads` wide unless the
            layout sets `head_dim`.
        num_hidden_layers (`int`, *optional*, defaults to `12`):
            Number of encoder layers.
        num_attention_heads (`int`, *optional*, defaults to `12`):
            Heads of each self-attention layer, unless the layout sets `num_heads`.
        intermediate_size (`int`, *optional*, defaults to `3072`):
            Inner size of the feed-forward blocks.
        hidden_act (`str`, *optional*, defaults to `"gelu"`):
            Activation of the feed-forward blocks, a name of transformers' `ACT2FN`.
        hidden_dropout_prob (`float`, *optional*, defaults to `0.1`):
            Dropout on the embeddings and on each block's output before its residual sum; also the classifiers'
            dropout unless `classifier_dropout` is set.
        attention_probs_dropout_prob (`float`, *optional*, defaults to `0.1`):
            Dropout on the attention weights, in every family that computes weights (a recurrent group may set its
            own); the families read it as `attention_dropout`.
        max_position_embeddings (`int`, *optional*, defaults to `512`):
            Rows of the learned position embeddings: the longest input the model takes.
        type_vocab_size (`int`, *optional*, defaults to `2`):
            Number of token types (segments) that `token_type_ids` may take.
        initializer_range (`float`, *optional*, defaults to `0.02`):
            Standard deviation of the normal initialisation of the linear and embedding weights.
        layer_norm_eps (`float`, *optional*, defaults to `1e-12`):
            The epsilon of the layer normalisations.
        pad_token_id (`int`, *optional*, defaults to `0`):
            The padding token, the word embeddings' padding index.
        use_cache (`bool`, *optional*, defaults to `True`):
            transformers' flag for decoders' caches; unused by this encoder.
        classifier_dropout (`float`, *optional*):
            Dropout before the sequence and token classification heads. Defaults to `hidden_dropout_prob`.
        is_decoder (`bool`, *optional*, defaults to `False`):
            Must stay false: the model is an encoder only (`SimpleAttnMarianConfig` builds a decoder).
        add_cross_attention (`bool`, *optional*, defaults to `False`):
            Must stay false: the model has no cross attention.
        bos_token_id (`int`, *optional*):
            The beginning-of-sentence token; unused by this encoder.
        eos_token_id (`int`, *optional*):
            The end-of-sentence token; unused by this encoder.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Whether the masked-language-modelling head's output layer shares its weight with the word embeddings.
        transformers_version (`str`, *optional*):
            The transformers version that wrote the configuration, recorded by `save_pretrained`.
        architectures (`list[str]`, *optional*):
            The model classes saved with this configuration, recorded by `save_pretrained`.
        output_hidden_states (`bool`, *optional*, defaults to `False`):
            Whether the models return the hidden states of every layer (unless a call says otherwise).
        return_dict (`bool`, *optional*, defaults to `True`):
            Whether the models return a `ModelOutput` rather than a tuple.
        dtype (`str`, *optional*):
            The dtype of the saved weights (e.g. `"float32"`), recorded by `save_pretrained`;
            `from_pretrained(..., dtype="auto")` loads in it.
        chunk_size_feed_forward (`int`, *optional*, defaults to `0`):
            Positions the feed-forward blocks process at a time, to save memory; 0 processes all at once.
        is_encoder_decoder (`bool`, *optional*, defaults to `False`):
            Whether the model is an encoder-decoder; this one is not.
        id2label (`dict[int, str]`, *optional*):
            Names of the classification heads' labels, by index (or pass `num_labels`); saved with the model.
        label2id (`dict[str, int]`, *optional*):
            The inverse of `id2label`.
        problem_type (`str`, *optional*):
            The loss of the sequence classification head: `"regression"` (mean squared error),
            `"single_label_classification"` (cross entropy) or `"multi_label_classification"` (binary cross entropy
            per label). Defaults to what the labels' dtype and `num_labels` suggest.
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
