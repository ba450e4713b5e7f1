"""Deploy the `base` layout with CTranslate2: convert a checkpoint, then translate texts with it.

    from hf_simple_attn.deploy.ctranslate2_export import CTranslate2Translator, convert_to_ctranslate2

    convert_to_ctranslate2("runs/base-en-de", "runs/base-en-de-ct2", quantization="int8")
    CTranslate2Translator("runs/base-en-de-ct2").translate(["Click the OK button."], num_beams=4)

The `base` layout computes what transformers' `MarianMTModel` computes, with the same parameter names and shapes,
so the checkpoint becomes a real `MarianMTModel` (checked to give the same logits), which CTranslate2's own
`MarianMTModel` loader turns into a CTranslate2 model, with one change (`PadStartMarianLoader`): CTranslate2's
loader is written for checkpoints converted from Marian (C++), whose decoder starts from a zero vector, so it starts
from zero and drops `<pad>` from the vocabulary. transformers' `MarianMTModel` starts from `<pad>`'s embedding, and
training with a tied output layer moves that row away from zero (in our trained `base` checkpoint, CTranslate2's
stock loader translated 0.4% of the test sentences as the model does). CTranslate2 has no architecture for the other
layouts (hard-coded, recurrent, local, ... heads): those export to ONNX with
`hf_simple_attn.deploy.export.export_onnx`.

Our checkpoints carry a `tokenizers` tokenizer (`tokenizer.json`), not Marian's sentencepiece models. CTranslate2
works on tokens, so the tokenizer and the generation config are copied into the converted folder, and
`CTranslate2Translator` tokenizes with the tokenizer, feeds CTranslate2 the tokens and decodes what comes back.
Greedy output is `generate(num_beams=1, do_sample=False)`'s; beam search follows CTranslate2's own rules (length
normalisation, stopping), so beams may differ slightly.

A checkpoint's vocabulary shortlist becomes CTranslate2's vocabulary map (`vmap.txt`, `shortlist_vmap`): each source
token's candidates, and the frequent and special tokens for every sentence. `translate(..., use_shortlist=True)`
passes CTranslate2 `use_vmap=True`; CTranslate2 also always allows `<unk>`, which our shortlist allows only when it
lists it. (CTranslate2 4.8.5 can fail with an index out of range on a call with fewer candidates than an earlier
call of the same translator whose hypotheses stopped early; seen on tiny vocabularies.)

This module is not part of the code shipped with saved checkpoints; it needs `ctranslate2` (`pip install
ctranslate2`, or the package's `deploy` extra).
"""

import os
import tempfile

import ctranslate2
import torch
from ctranslate2.converters import Converter
from ctranslate2.converters.transformers import BartLoader, MarianMTLoader
from transformers import AutoTokenizer, GenerationConfig, MarianConfig, MarianMTModel

from ..modeling.configuration_simple_attn import SIZE_FIELDS, SimpleAttnMarianConfig
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel


# The MarianConfig fields a SimpleAttnMarianConfig carries with the same meaning: its sizes (heads, layers,
# feed-forward, vocabulary, positions of the sinusoidal table), activation, embedding scale and sharing, special ids.
MARIAN_FIELDS = (
    *SIZE_FIELDS,
    "decoder_vocab_size",
    "activation_function",
    "scale_embedding",
    "share_encoder_decoder_embeddings",
    "tie_word_embeddings",
    "pad_token_id",
    "eos_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "forced_eos_token_id",
    "init_std",
)
# The sizes the layout is expanded for.
LAYOUT_SIZES = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads")
ONNX_ALTERNATIVE = "export it to ONNX instead with hf_simple_attn.deploy.export.export_onnx"


def check_base_layout(config: SimpleAttnMarianConfig, name: str) -> None:
    """Refuse a layout other than `base` (dot-product attention and a feed-forward block everywhere)."""
    sizes = {key: getattr(config, key) for key in LAYOUT_SIZES}
    if config.attention_layout != SimpleAttnMarianConfig.from_preset("base", **sizes).attention_layout:
        raise ValueError(
            f"{name}: CTranslate2 conversion needs the `base` layout (MarianMTModel's computation); this checkpoint "
            f"has another layout (preset {config.attention_preset!r}): {ONNX_ALTERNATIVE}"
        )


def marian_config(config: SimpleAttnMarianConfig) -> MarianConfig:
    """The transformers MarianConfig of a `base`-layout config."""
    return MarianConfig(**{key: getattr(config, key) for key in MARIAN_FIELDS}, architectures=["MarianMTModel"])


@torch.no_grad()
def to_marian(model: SimpleAttnMarianMTModel) -> MarianMTModel:
    """The same weights in transformers' MarianMTModel, checked to give the same logits on a probe batch (a
    vocabulary shortlist has no place there: `convert_to_ctranslate2` writes it as CTranslate2's vocabulary map)."""
    marian = MarianMTModel(marian_config(model.config)).eval()
    weights = {name: tensor for name, tensor in model.state_dict().items() if not name.startswith("shortlist.")}
    marian.load_state_dict(weights)
    marian.generation_config = GenerationConfig.from_dict(model.generation_config.to_dict())
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(2, model.config.vocab_size - 1, (2, 7), generator=generator)
    target = torch.randint(2, model.config.vocab_size - 1, (2, 5), generator=generator)
    target[:, 0] = model.config.decoder_start_token_id
    expected = model.eval()(input_ids=source, decoder_input_ids=target).logits
    logits = marian(input_ids=source, decoder_input_ids=target).logits
    if not torch.allclose(logits, expected, atol=1e-4, rtol=1e-4):
        raise RuntimeError(f"MarianMTModel differs from the checkpoint by {(logits - expected).abs().max():.2e}")
    return marian


class PadStartMarianLoader(MarianMTLoader):
    """CTranslate2's `MarianMTModel` loader for a decoder that starts from `<pad>`'s embedding, as transformers'
    does: `<pad>` stays in the vocabulary and the output layer, and is the decoder start token."""

    def _remove_pad_weights(self, spec):
        """Keep `<pad>`'s rows: it starts the decoder and stays a possible output, as in `generate`."""

    def set_decoder(self, spec, decoder):
        super().set_decoder(spec, decoder)
        spec.start_from_zero_embedding = False

    def get_vocabulary(self, model, tokenizer):
        return BartLoader.get_vocabulary(self, model, tokenizer)  # MarianMTLoader's drops <pad>

    def set_config(self, config, model, tokenizer):
        super().set_config(config, model, tokenizer)
        config.decoder_start_token = tokenizer.convert_ids_to_tokens(model.config.decoder_start_token_id)


class MarianConverter(Converter):
    """CTranslate2's converter for a `MarianMTModel` in memory; every file of `files_dir` (the tokenizer, the
    generation config) is copied next to the converted model."""

    def __init__(self, marian: MarianMTModel, files_dir: str):
        self.marian, self.files_dir = marian, files_dir

    def _load(self):
        spec = PadStartMarianLoader()(self.marian, AutoTokenizer.from_pretrained(self.files_dir))
        for name in sorted(os.listdir(self.files_dir)):
            spec.register_file(os.path.join(self.files_dir, name))
        return spec


def convert_to_ctranslate2(model_dir, out_dir, quantization: str | None = None, force: bool = False) -> str:
    """Convert a `base`-layout checkpoint folder into a CTranslate2 model folder `out_dir`, tokenizer included, and
    its vocabulary shortlist, when it has one, as CTranslate2's vocabulary map.

    `quantization` is CTranslate2's weight type (`int8`, `int8_float32`, `float16`, ...; None keeps float32);
    `force` overwrites an existing `out_dir`. Returns `out_dir`.
    """
    model = SimpleAttnMarianMTModel.from_pretrained(model_dir)
    check_base_layout(model.config, str(model_dir))
    marian = to_marian(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as files_dir, tempfile.TemporaryDirectory() as vmap_dir:
        tokenizer.save_pretrained(files_dir)
        marian.generation_config.save_pretrained(files_dir)
        vmap = None
        if model.shortlist is not None:
            vmap = os.path.join(vmap_dir, "vmap.txt")
            with open(vmap, "w", encoding="utf-8") as file:
                file.write(shortlist_vmap(model.shortlist, tokenizer))
        converter = MarianConverter(marian, files_dir)
        return converter.convert(str(out_dir), vmap=vmap, quantization=quantization, force=force)


def shortlist_vmap(shortlist, tokenizer) -> str:
    """CTranslate2's vocabulary map of a `VocabShortlist`: `source token<TAB>target tokens` for each source token with
    candidates, and first, under the empty source, the tokens every sentence may produce (frequent and special)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(shortlist.candidates))))
    spaced = [token for token in tokens if token is None or any(char.isspace() for char in token)]
    if spaced:
        raise ValueError(f"shortlist: CTranslate2's vocabulary map cannot hold the tokens {spaced[:5]} (whitespace)")
    always = [*shortlist.frequent.tolist(), *shortlist.special_ids]
    lines = ["\t" + " ".join(tokens[index] for index in always if index >= 0)]
    for source_id, row in enumerate(shortlist.candidates.tolist()):
        targets = [tokens[index] for index in row if index >= 0]
        if targets:
            lines.append(f"{tokens[source_id]}\t{' '.join(targets)}")
    return "\n".join(lines) + "\n"


class CTranslate2Translator:
    """A converted folder's model with its tokenizer: texts in, translations out, like `generate` + `batch_decode`.

    `intra_threads` is the number of CPU threads of one translation (0: CTranslate2's default).
    """

    def __init__(self, out_dir, device: str = "cpu", intra_threads: int = 0):
        self.translator = ctranslate2.Translator(str(out_dir), device=device, intra_threads=intra_threads)
        self.tokenizer = AutoTokenizer.from_pretrained(out_dir)
        self.generation_config = GenerationConfig.from_pretrained(out_dir)

    def generate_ids(
        self, texts: list[str], num_beams: int = 1, max_length: int | None = None, use_shortlist: bool = False
    ) -> list[list[int]]:
        """The target ids of each translation: `generate`'s output less the decoder start token, the final </s>
        and the padding after it. `max_length` counts the decoder start token, as in `generate` (default: the
        checkpoint's generation config); `use_shortlist` decodes over the vocabulary map of the checkpoint's
        shortlist."""
        config = self.generation_config
        max_length = max_length or config.max_length
        if max_length is None:
            raise ValueError("max_length: the checkpoint's generation config sets none; pass one")
        # generate's last position is a forced </s> when the checkpoint asks for one: one content token fewer.
        steps = max_length - 1 - (config.forced_eos_token_id is not None)
        encoded = self.tokenizer(texts, truncation=True)["input_ids"]
        results = self.translator.translate_batch(
            [self.tokenizer.convert_ids_to_tokens(ids) for ids in encoded],
            beam_size=num_beams,
            length_penalty=1.0 if config.length_penalty is None else config.length_penalty,  # generate's default
            max_decoding_length=steps,
            min_decoding_length=0,  # generate may stop at once; CTranslate2's default asks for one token
            use_vmap=use_shortlist,
        )
        return [self.tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]

    def translate(
        self, texts: list[str], num_beams: int = 1, max_length: int | None = None, use_shortlist: bool = False
    ) -> list[str]:
        """The translations of `texts`, decoded without special tokens."""
        ids = self.generate_ids(texts, num_beams, max_length, use_shortlist)
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)


__all__ = [
    "CTranslate2Translator",
    "MarianConverter",
    "PadStartMarianLoader",
    "check_base_layout",
    "convert_to_ctranslate2",
    "marian_config",
    "shortlist_vmap",
    "to_marian",
]
