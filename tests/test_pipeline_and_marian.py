"""transformers' MarianMTModel equivalence, and the translation pipeline in memory and from a folder."""

import json
import os
import subprocess
import sys
import textwrap

import torch
from transformers import MarianConfig, MarianMTModel, pipeline

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel, TranslationPipeline

from conftest import TINY_MARIAN

SENTENCES = ["the cat sat on the mat", "a big red car runs fast", "the dog is small"]


def marian_and_ours(tmp_path):
    torch.manual_seed(0)
    marian = MarianMTModel(MarianConfig(**TINY_MARIAN, init_std=0.3)).eval()
    marian.save_pretrained(tmp_path / "marian")
    ours = SimpleAttnMarianMTModel.from_pretrained(tmp_path / "marian").eval()
    return marian, ours


def test_marian_checkpoint_loads_into_base_with_the_same_logits_and_generate(tmp_path, tiny_tokenizer):
    marian, ours = marian_and_ours(tmp_path)
    assert isinstance(ours.config, SimpleAttnMarianConfig)
    assert ours.config.attention_layout == SimpleAttnMarianConfig(**TINY_MARIAN).attention_layout
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in marian.state_dict().items()}
    batch = tiny_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    target = tiny_tokenizer(text_target=SENTENCES[::-1], padding=True, return_tensors="pt")
    with torch.no_grad():
        kwargs = dict(**batch, labels=target["input_ids"])
        reference, candidate = marian(**kwargs), ours(**kwargs)
    assert (reference.logits - candidate.logits).abs().max() <= 1e-5
    assert abs(reference.loss.item() - candidate.loss.item()) <= 1e-5
    for generate_kwargs in ({"num_beams": 1}, {"num_beams": 4}, {"do_sample": True, "top_k": 5}):
        torch.manual_seed(1)
        expected = marian.generate(**batch, max_new_tokens=10, **generate_kwargs)
        torch.manual_seed(1)
        assert ours.generate(**batch, max_new_tokens=10, **generate_kwargs).tolist() == expected.tolist()


def expected_translations(model, tokenizer, **generate_kwargs):
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch, **generate_kwargs)
    return [{"translation_text": text} for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]


def tiny_model():
    torch.manual_seed(0)
    config = SimpleAttnMarianConfig.from_preset("sh-x", **TINY_MARIAN, init_std=0.3)
    return SimpleAttnMarianMTModel(config).eval()


def test_translation_pipeline_in_memory(tiny_tokenizer):
    model = tiny_model()
    translator = pipeline("translation", model=model, tokenizer=tiny_tokenizer, config=model.config,
                          pipeline_class=TranslationPipeline)
    expected = expected_translations(model, tiny_tokenizer, max_new_tokens=7, num_beams=3)
    assert TranslationPipeline(model=model, tokenizer=tiny_tokenizer)(SENTENCES, max_new_tokens=7, num_beams=3) == expected
    assert translator(SENTENCES, max_new_tokens=7, num_beams=3) == expected
    assert translator(SENTENCES, max_new_tokens=7, num_beams=3, batch_size=2) == expected
    assert translator(SENTENCES[0], max_new_tokens=7, num_beams=3) == [expected[0]]
    token_ids = translator(SENTENCES[0], max_new_tokens=7, num_beams=3, return_tensors=True)[0]["translation_token_ids"]
    assert tiny_tokenizer.decode(token_ids, skip_special_tokens=True) == expected[0]["translation_text"]
    two = translator(SENTENCES[0], max_new_tokens=7, num_beams=3, num_return_sequences=2)
    assert len(two) == 2 and two[0] == expected[0]
    # pipeline() rewrote config.custom_pipelines in place; the model must still save.
    saved = model.config.to_dict()["custom_pipelines"]
    assert saved == {"translation": {"impl": "pipeline_translation.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}}


def test_translation_pipeline_from_a_saved_folder(tmp_path, tiny_tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    translator = pipeline("translation", model=str(tmp_path / "model"), trust_remote_code=True)
    assert translator(SENTENCES, max_new_tokens=7) == expected_translations(model, tiny_tokenizer, max_new_tokens=7)


REMOTE_PIPELINE = textwrap.dedent(
    """
    import json, sys
    sys.modules["hf_simple_attn"] = None  # the package must not be importable here
    import torch
    from transformers import pipeline
    torch.set_num_threads(1)
    translator = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
    print(json.dumps({"module": type(translator).__module__,
                      "result": translator(json.loads(sys.argv[2]), max_new_tokens=7, batch_size=2)}))
    """
)


def test_translation_pipeline_without_the_package(tmp_path, tiny_tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_PIPELINE, str(tmp_path / "model"), json.dumps(SENTENCES)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    assert report["result"] == expected_translations(model, tiny_tokenizer, max_new_tokens=7)
