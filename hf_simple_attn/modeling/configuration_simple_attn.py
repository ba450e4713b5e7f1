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

    Every `MarianConfig` field is accepted with the same meaning. Added fields:

    attention_layout (`dict`, *optional*):
        Which attention each site, layer and head uses (see `layout.py`); stored expanded, one
        explicit spec per layer. Defaults to the preset's layout, or to `base` (all dot product).
    attention_preset (`str`, *optional*):
        The named configuration this layout came from (see `presets.py`), for the record.
    length_ratio (`float`, *optional*, defaults to 1.0):
        γ, mean source length / mean target length over the training data; centres hard-coded
        cross attention at floor(γ·i).
    loss_chunk_size (`int`, *optional*, defaults to 2048):
        In training with labels, the loss is computed over this many target tokens at a time, together with its
        gradients (`fused_cross_entropy.py`): the (tokens, vocabulary) logits of the whole batch, the largest
        activation of a translation model, are never held at once, and `logits` is None in the output. Nothing
        is recomputed; the output layer's weight gradient is held from forward to backward instead. 0 computes
        the full logits as in evaluation. The loss is the same either way (up to rounding).
    shortlist_top_k (`int`, *optional*, defaults to 0):
        Columns of the vocabulary shortlist's table (`vocab_shortlist.py`): the target tokens kept per source
        token. 0: no shortlist. Set with the table by `set_vocab_shortlist`; used by `generate(use_shortlist=True)`.
    shortlist_frequent (`int`, *optional*, defaults to 0):
        Length of the shortlist's list of target tokens every sentence may produce (special and frequent tokens).
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
