"""Configurations: Marian's (or BERT's) fields plus the attention layout, validated when built."""

import copy
import re

from huggingface_hub.dataclasses import strict
from transformers import MarianConfig

from .attention_heads import number_in, positive_int
from .layout import merge_layouts, normalize_layout
from .presets import get_preset


SIZE_FIELDS = (
    "vocab_size",
    "max_position_embeddings",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
)
# γ: mean source / target length; far outside this range the data or the computation is wrong.
MIN_LENGTH_RATIO, MAX_LENGTH_RATIO = 1e-3, 1e3

# The text-to-text pipelines a seq2seq model records (`pipeline_translation.py`): transformers 5 removed these
# tasks, but `pipeline()` still finds a task listed in `config.custom_pipelines`.
TEXT2TEXT_PIPELINES = {
    task: {"impl": f"pipeline_translation.{class_name}", "pt": ["AutoModelForSeq2SeqLM"]}
    for task, class_name in (
        ("translation", "TranslationPipeline"),
        ("summarization", "SummarizationPipeline"),
        ("text2text-generation", "Text2TextGenerationPipeline"),
    )
}


class CustomPipelines(dict):
    """`config.custom_pipelines`, where `translation_XX_to_YY` (the 4.x task names) finds the translation entry."""

    @staticmethod
    def recorded_task(task):
        return "translation" if isinstance(task, str) and re.fullmatch(r"translation_.+_to_.+", task) else task

    def __contains__(self, task):
        return super().__contains__(self.recorded_task(task))

    def __getitem__(self, task):
        return super().__getitem__(self.recorded_task(task))


@strict
class SimpleAttnMarianConfig(MarianConfig):
    r"""Configuration of a Marian-style encoder-decoder whose attention follows `attention_layout`.

    Every `MarianConfig` field is accepted, with its meaning and default; the model's size is usually set with
    `from_preset(name, d_model=..., ...)`. The attention families read `d_model`, the head counts and
    `attention_dropout` from here.

    Args:
        attention_layout (`dict`, *optional*):
            Which attention each site (`encoder_self`, `decoder_self`, `cross`), layer and head uses, and which
            feed-forward blocks exist (`encoder_ffn`, `decoder_ffn`); see `layout.py`. Stored expanded, one explicit
            spec per layer. Defaults to the preset's layout, or to `base` (all dot product).
        attention_preset (`str`, *optional*):
            The named configuration this layout came from (see `presets.py`), for the record; given without
            `attention_layout`, its layout is used.
        length_ratio (`float`, *optional*, defaults to `1.0`):
            γ, mean source length / mean target length over the training data (the training scripts compute it);
            centres hard-coded cross attention at floor(γ·i). In [0.001, 1000].
        loss_chunk_size (`int`, *optional*, defaults to `2048`):
            In training with labels, the loss is computed over this many target tokens at a time, together with its
            gradients (`fused_cross_entropy.py`): the (tokens, vocabulary) logits of the whole batch, the largest
            activation of a translation model, are never held at once, and `logits` is None in the output. Nothing
            is recomputed; the output layer's weight gradient is held from forward to backward instead. 0 computes
            the full logits as in evaluation. The loss is the same either way (up to rounding).
        shortlist_top_k (`int`, *optional*, defaults to `0`):
            Columns of the vocabulary shortlist's table (`vocab_shortlist.py`): the target tokens kept per source
            token. 0: no shortlist. Set with the table by `set_vocab_shortlist`; used by `generate(use_shortlist=True)`.
        shortlist_frequent (`int`, *optional*, defaults to `0`):
            Length of the shortlist's list of target tokens every sentence may produce (special and frequent tokens);
            needs `shortlist_top_k` >= 1.
        is_encoder_decoder (`bool`, *optional*, defaults to `True`):
            Whether the model is an encoder-decoder, as this one is; `generate` reads it.
        vocab_size (`int`, *optional*, defaults to `58101`):
            Size of the source vocabulary (and of the target one when the embeddings are shared).
        decoder_vocab_size (`int`, *optional*):
            Size of the target vocabulary, when `share_encoder_decoder_embeddings` is false. Defaults to
            `vocab_size`.
        max_position_embeddings (`int`, *optional*, defaults to `1024`):
            Rows of the sinusoidal position tables: the longest source or target the model takes.
        encoder_layers (`int`, *optional*, defaults to `12`):
            Number of encoder layers.
        encoder_ffn_dim (`int`, *optional*, defaults to `4096`):
            Inner size of the encoder's feed-forward blocks.
        encoder_attention_heads (`int`, *optional*, defaults to `16`):
            Heads of each encoder self-attention layer, unless the layout sets `num_heads`.
        decoder_layers (`int`, *optional*, defaults to `12`):
            Number of decoder layers.
        decoder_ffn_dim (`int`, *optional*, defaults to `4096`):
            Inner size of the decoder's feed-forward blocks.
        decoder_attention_heads (`int`, *optional*, defaults to `16`):
            Heads of each decoder self-attention and cross-attention layer, unless the layout sets `num_heads`.
        encoder_layerdrop (`float`, *optional*, defaults to `0.0`):
            Accepted as `MarianConfig` has it; these models do not drop layers.
        decoder_layerdrop (`float`, *optional*, defaults to `0.0`):
            Accepted as `MarianConfig` has it; these models do not drop layers.
        use_cache (`bool`, *optional*, defaults to `True`):
            Whether the decoder returns its cache of past attention states, which `generate` decodes with.
        activation_function (`str`, *optional*, defaults to `"gelu"`):
            Activation of the feed-forward blocks, a name of transformers' `ACT2FN` (`"gelu"`, `"relu"`, `"swish"`,
            ...).
        d_model (`int`, *optional*, defaults to `1024`):
            Width of the embeddings and hidden states; a layer's heads are `d_model / num_heads` wide unless the
            layout sets `head_dim`.
        dropout (`float`, *optional*, defaults to `0.1`):
            Dropout on the embeddings and on each sublayer's output before its residual sum.
        attention_dropout (`float`, *optional*, defaults to `0.0`):
            Dropout on the attention weights, in every family that computes weights (a recurrent group may set its
            own).
        activation_dropout (`float`, *optional*, defaults to `0.0`):
            Dropout after the activation inside the feed-forward blocks.
        init_std (`float`, *optional*, defaults to `0.02`):
            Standard deviation of the normal initialisation of the linear and embedding weights.
        decoder_start_token_id (`int`, *optional*, defaults to `58100`):
            The decoder's first input, ahead of the labels shifted right (Marian's is the pad token). Must index the
            vocabulary: set it from the tokenizer.
        scale_embedding (`bool`, *optional*, defaults to `False`):
            Whether token embeddings are multiplied by sqrt(`d_model`).
        pad_token_id (`int`, *optional*, defaults to `58100`):
            The padding token: the embeddings' padding index, and what the labels' -100 become in the decoder
            inputs. Must index the vocabulary: set it from the tokenizer.
        eos_token_id (`int`, *optional*, defaults to `0`):
            The end-of-sentence token, where `generate` stops. Must index the vocabulary.
        bos_token_id (`int`, *optional*):
            The beginning-of-sentence token; Marian has none.
        forced_eos_token_id (`int`, *optional*, defaults to `0`):
            The token `generate` forces last when it reaches `max_length` (its generation config takes it from
            here); None forces none.
        share_encoder_decoder_embeddings (`bool`, *optional*, defaults to `True`):
            Whether encoder and decoder share one embedding matrix (`shared`), over `vocab_size` tokens; otherwise
            the decoder has its own, over `decoder_vocab_size`.
        is_decoder (`bool`, *optional*, defaults to `False`):
            transformers' flag for a decoder used on its own; unused by this encoder-decoder.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Whether the output layer (`lm_head`) shares its weight with the decoder's token embeddings.
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
            transformers' feed-forward chunking; unused by this model, whose feed-forward blocks run unchunked.
        id2label (`dict[int, str]`, *optional*):
            Names of the labels of a classification head (or pass `num_labels`); unused by this model.
        label2id (`dict[str, int]`, *optional*):
            The inverse of `id2label`; unused by this model.
        problem_type (`str`, *optional*):
            The loss of a sequence classification head (`"regression"`, `"single_label_classification"`,
            `"multi_label_classification"`); unused by this model.
    """

    model_type = "simple_attn_marian"
    # What the weights and the attention maths depend on: a run resumed from a checkpoint must rebuild these as saved.
    architecture_fields = SIZE_FIELDS + (
        "decoder_vocab_size",
        "attention_layout",
        "activation_function",
        "scale_embedding",
        "share_encoder_decoder_embeddings",
        "tie_word_embeddings",
        "length_ratio",
    )

    attention_layout: dict | None = None
    attention_preset: str | None = None
    length_ratio: float | int = 1.0
    loss_chunk_size: int = 2048
    shortlist_top_k: int = 0
    shortlist_frequent: int = 0

    def __post_init__(self, **kwargs):
        for name in SIZE_FIELDS:
            positive_int(getattr(self, name), name)
        if self.decoder_vocab_size is not None:
            positive_int(self.decoder_vocab_size, "decoder_vocab_size")
        number_in(self.length_ratio, "length_ratio", MIN_LENGTH_RATIO, MAX_LENGTH_RATIO)
        if self.loss_chunk_size < 0:  # the dataclass has checked the type
            raise ValueError(
                f"loss_chunk_size: expected an integer >= 0 (target tokens per loss chunk, 0 for no chunking), "
                f"got {self.loss_chunk_size!r}"
            )
        for name in ("shortlist_top_k", "shortlist_frequent"):
            if getattr(self, name) < 0:  # the dataclass has checked the type
                raise ValueError(f"{name}: expected an integer >= 0 (0: no shortlist), got {getattr(self, name)!r}")
        if self.shortlist_frequent and not self.shortlist_top_k:
            raise ValueError(
                f"shortlist_frequent: {self.shortlist_frequent} frequent tokens need a shortlist table "
                "(shortlist_top_k >= 1), got shortlist_top_k=0"
            )
        if self.attention_layout is None and self.attention_preset is not None:
            self.attention_layout = get_preset(self.attention_preset, "seq2seq")["layout"]
        self.attention_layout = normalize_layout(
            self.attention_layout,
            stack_layers={"encoder": self.encoder_layers, "decoder": self.decoder_layers},
            site_heads={
                "encoder_self": self.encoder_attention_heads,
                "decoder_self": self.decoder_attention_heads,
                "cross": self.decoder_attention_heads,
            },
            d_model=self.d_model,
        )
        kwargs.setdefault("custom_pipelines", copy.deepcopy(TEXT2TEXT_PIPELINES))
        super().__post_init__(**kwargs)
        self.custom_pipelines = CustomPipelines(self.custom_pipelines)

    def to_dict(self) -> dict:
        output = super().to_dict()
        # transformers' pipeline() replaces the class names under custom_pipelines by the classes, in
        # place; write names back so a config that went through a pipeline still saves.
        for task in output.get("custom_pipelines", {}).values():
            task["pt"] = [cls if isinstance(cls, str) else cls.__name__ for cls in task.get("pt", ())]
        return output

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "SimpleAttnMarianConfig":
        """The preset's layout at any size: `from_preset("sh-x", d_model=256, encoder_layers=3)`.

        An `attention_layout` override replaces the preset's spec site by site.
        """
        layout = merge_layouts(get_preset(name, "seq2seq")["layout"], overrides.pop("attention_layout", None))
        return cls(attention_layout=layout, attention_preset=name, **overrides)
