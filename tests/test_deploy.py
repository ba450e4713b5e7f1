"""Deployment: CTranslate2 for the `base` layout (same greedy output, same scores) and dynamic int8 quantisation."""

import importlib.util

import pytest
import torch

from hf_simple_attn.deploy.quantize import DynamicQuantizedLinear, quantize_dynamic_int8

from conftest import TINY_MARIAN, assert_same_maths, make_model, model_reductions


pytestmark = pytest.mark.numerics


needs_ctranslate2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 missing")
TEXTS = ["the cat sat on the mat", "a big red car runs fast", "dog", "the small house is green and blue tree", "tree"]
PAD = TINY_MARIAN["pad_token_id"]


def saved(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def content_ids(row: torch.Tensor) -> list[int]:
    """A `generate` output row less the decoder start token, the </s> (id 0) and what follows."""
    ids = row[1:].tolist()
    return ids[: ids.index(0)] if 0 in ids else ids


@pytest.fixture(scope="module")
def converted(tmp_path_factory, tiny_tokenizer):
    """A tiny random `base` model, saved and converted. Like a trained one, its <pad> embedding (the decoder start)
    is not zero; its final_logits_bias is not zero either, as a Marian checkpoint's may be."""
    from hf_simple_attn.deploy.ctranslate2_export import CTranslate2Translator, convert_to_ctranslate2

    model = make_model("base")
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 1.0, generator=generator)
        model.model.shared.weight[PAD].normal_(0, 0.3, generator=generator)
    folder = tmp_path_factory.mktemp("deploy")
    convert_to_ctranslate2(saved(model, tiny_tokenizer, folder / "model"), folder / "ct2")
    return model, CTranslate2Translator(folder / "ct2", intra_threads=1)


@needs_ctranslate2
@pytest.mark.parametrize("max_length", [4, 12])
def test_ctranslate2_greedy_equals_generate(converted, tiny_tokenizer, max_length):
    model, translator = converted
    batch = tiny_tokenizer(TEXTS, return_tensors="pt", padding=True)
    output = model.generate(**batch, num_beams=1, do_sample=False, max_length=max_length)
    expected = [content_ids(row) for row in output]
    assert len({tuple(ids) for ids in expected}) > 1  # the sentences translate differently
    assert translator.generate_ids(TEXTS, num_beams=1, max_length=max_length) == expected
    assert translator.translate(TEXTS, max_length=max_length) == tiny_tokenizer.batch_decode(
        output, skip_special_tokens=True
    )
    assert len(translator.translate(TEXTS, num_beams=3, max_length=max_length)) == len(TEXTS)


@needs_ctranslate2
def test_ctranslate2_scores_equal_log_probabilities(converted, tiny_tokenizer):
    """Teacher-forced log-probabilities of every target token: the whole network, not just the argmax."""
    model, translator = converted
    targets = ["dog runs", "the mat is red and big"]
    sources = [tiny_tokenizer.convert_ids_to_tokens(ids) for ids in tiny_tokenizer(TEXTS[:2])["input_ids"]]
    results = translator.translator.score_batch(sources, [text.split() for text in targets])
    batch = tiny_tokenizer(TEXTS[:2], text_target=targets, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, batch["labels"][..., None])[..., 0]
    for row, result in enumerate(results):
        length = len(result.log_probs)  # the words and </s>
        # CTranslate2 computes in float32 only
        assert_same_maths(torch.tensor(result.log_probs), log_probs[row, :length], **model_reductions(model.config))


@needs_ctranslate2
def test_ctranslate2_int8_translates(tmp_path, tiny_tokenizer):
    from hf_simple_attn.deploy.ctranslate2_export import CTranslate2Translator, convert_to_ctranslate2

    folder = saved(make_model("base"), tiny_tokenizer, tmp_path / "model")
    convert_to_ctranslate2(folder, tmp_path / "ct2", quantization="int8")
    assert len(CTranslate2Translator(tmp_path / "ct2").translate(TEXTS, max_length=8)) == len(TEXTS)


@needs_ctranslate2
def test_the_shortlist_becomes_ctranslate2_vocabulary_map(tmp_path, tiny_tokenizer):
    """A checkpoint's shortlist converts to `vmap.txt`; CTranslate2 then decodes over the batch's candidates (and
    `<unk>`, which it always allows) as `generate(use_shortlist=True)` does."""
    from hf_simple_attn.deploy.ctranslate2_export import CTranslate2Translator, convert_to_ctranslate2

    model = make_model("base")
    vocab_size = model.config.vocab_size
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 1.0, generator=generator)
    candidates = torch.randint(2, vocab_size - 1, (vocab_size, 2), generator=generator)
    candidates[5, 1] = -1
    model.set_vocab_shortlist(candidates, torch.tensor([2, 3]))
    convert_to_ctranslate2(saved(model, tiny_tokenizer, tmp_path / "model"), tmp_path / "ct2")
    lines = (tmp_path / "ct2" / "vmap.txt").read_text().splitlines()
    tokens = tiny_tokenizer.convert_ids_to_tokens
    special = sorted({PAD, 0})
    assert lines[0] == "\t" + " ".join(tokens([2, 3, *special]))
    assert lines[6] == f"{tokens(5)}\t{tokens(int(candidates[5, 0]))}"
    assert len(lines) == vocab_size + 1
    batch = tiny_tokenizer(TEXTS, return_tensors="pt", padding=True)
    output = model.generate(**batch, num_beams=1, do_sample=False, max_length=10, use_shortlist=True)
    assert output[:, 1:].ne(model.generate(**batch, num_beams=1, do_sample=False, max_length=10)[:, 1:]).any()
    # CTranslate2 takes the union of one call's sentences, as `generate` does.
    translator = CTranslate2Translator(tmp_path / "ct2", intra_threads=1)
    assert translator.generate_ids(TEXTS, max_length=10, use_shortlist=True) == [content_ids(row) for row in output]


@needs_ctranslate2
def test_ctranslate2_refuses_other_layouts(tmp_path, tiny_tokenizer):
    from hf_simple_attn.deploy.ctranslate2_export import convert_to_ctranslate2

    folder = saved(make_model("hc-sa"), tiny_tokenizer, tmp_path / "model")
    with pytest.raises(
        ValueError, match=r"`base` layout.*preset 'hc-sa'.*hf_simple_attn\.deploy\.export\.export_onnx"
    ):
        convert_to_ctranslate2(folder, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


@pytest.mark.parametrize("preset", ["base", "hc-sa", "ran-all", "gmm", "local-4heads", "hard-all"])
def test_int8_model_generates_close_to_fp32(preset, tiny_tokenizer):
    model = make_model(preset, init_std=0.02)
    quantized = quantize_dynamic_int8(model)
    linears = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    assert linears and all(isinstance(quantized.get_submodule(name), DynamicQuantizedLinear) for name in linears)
    assert not any(type(module) is torch.nn.Linear for module in quantized.modules())
    assert type(model.lm_head) is torch.nn.Linear  # the original is untouched

    batch = tiny_tokenizer(TEXTS, text_target=TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected, logits = model(**batch).logits, quantized(**batch).logits
    assert (logits - expected).abs().max() <= 0.05 * expected.abs().max()
    output = quantized.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_length=8)
    assert output.shape[0] == len(TEXTS) and 1 < output.shape[1] <= 8


def test_int8_model_with_a_shortlist_keeps_the_output_layer_in_float32(tiny_tokenizer):
    model = make_model("sh-x", init_std=0.02)
    vocab_size = model.config.vocab_size
    model.set_vocab_shortlist(torch.arange(vocab_size)[:, None].expand(vocab_size, 3) % vocab_size, torch.arange(4))
    quantized = quantize_dynamic_int8(model)
    assert type(quantized.lm_head) is torch.nn.Linear
    assert isinstance(quantized.model.decoder.layers[0].fc1, DynamicQuantizedLinear)
    batch = tiny_tokenizer(TEXTS, return_tensors="pt", padding=True)
    output = quantized.generate(**batch, max_length=8, use_shortlist=True)
    allowed = model.shortlist.candidate_mask(batch["input_ids"], batch["attention_mask"]).any(dim=0)
    assert allowed[output[:, 1:]].all()
