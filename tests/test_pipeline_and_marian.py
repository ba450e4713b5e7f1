"""transformers' MarianMTModel equivalence, and the translation pipeline in memory and from a folder."""

import json
import textwrap

import pytest
import torch
from transformers import MarianConfig, MarianMTModel, pipeline
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel, TranslationPipeline

from conftest import TINY_MARIAN, assert_same_maths, build_tokenizer, model_reductions, run_without_package


SENTENCES = ["the cat sat on the mat", "a big red car runs fast", "the dog is small"]
# Every task a saved seq2seq model records in custom_pipelines (plus a 4.x-style translation task name).
TASK_OUTPUTS = {
    "translation": "translation_text",
    "translation_en_to_de": "translation_text",
    "summarization": "summary_text",
    "text2text-generation": "generated_text",
}


def marian_and_ours(tmp_path):
    torch.manual_seed(0)
    marian = MarianMTModel(MarianConfig(**TINY_MARIAN, init_std=0.3)).eval()
    marian.save_pretrained(tmp_path / "marian")
    ours = SimpleAttnMarianMTModel.from_pretrained(tmp_path / "marian").eval()
    return marian, ours


@pytest.mark.numerics
def test_marian_checkpoint_loads_into_base_with_the_same_logits_and_generate(tmp_path, tiny_tokenizer):
    marian, ours = marian_and_ours(tmp_path)
    assert isinstance(ours.config, SimpleAttnMarianConfig)
    assert ours.config.attention_layout == SimpleAttnMarianConfig(**TINY_MARIAN).attention_layout
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in marian.state_dict().items()}
    batch = tiny_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    target = tiny_tokenizer(text_target=SENTENCES[::-1], padding=True, return_tensors="pt")
    marian, ours = marian.double(), ours.double()
    with torch.no_grad():
        kwargs = dict(**batch, labels=target["input_ids"])
        reference, candidate = marian(**kwargs), ours(**kwargs)
    assert_same_maths(candidate.logits, reference.logits, **model_reductions(ours.config))
    assert_same_maths(candidate.loss, reference.loss, **model_reductions(ours.config))
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
    translator = pipeline(
        "translation", model=model, tokenizer=tiny_tokenizer, config=model.config, pipeline_class=TranslationPipeline
    )
    expected = expected_translations(model, tiny_tokenizer, max_new_tokens=7, num_beams=3)
    assert (
        TranslationPipeline(model=model, tokenizer=tiny_tokenizer)(SENTENCES, max_new_tokens=7, num_beams=3)
        == expected
    )
    assert translator(SENTENCES, max_new_tokens=7, num_beams=3) == expected
    assert translator(SENTENCES, max_new_tokens=7, num_beams=3, batch_size=2) == expected
    assert translator(SENTENCES[0], max_new_tokens=7, num_beams=3) == [expected[0]]
    token_ids = translator(SENTENCES[0], max_new_tokens=7, num_beams=3, return_tensors=True)[0][
        "translation_token_ids"
    ]
    assert tiny_tokenizer.decode(token_ids, skip_special_tokens=True) == expected[0]["translation_text"]
    two = translator(SENTENCES[0], max_new_tokens=7, num_beams=3, num_return_sequences=2)
    assert len(two) == 2 and two[0] == expected[0]
    # pipeline() rewrote config.custom_pipelines in place; the model must still save.
    saved = model.config.to_dict()["custom_pipelines"]
    assert saved == {
        task: {"impl": f"pipeline_translation.{name}", "pt": ["AutoModelForSeq2SeqLM"]}
        for task, name in (
            ("translation", "TranslationPipeline"),
            ("summarization", "SummarizationPipeline"),
            ("text2text-generation", "Text2TextGenerationPipeline"),
        )
    }


def test_translation_task_names_and_languages(tiny_tokenizer):
    model = tiny_model()
    expected = expected_translations(model, tiny_tokenizer, max_new_tokens=7)
    translator = pipeline(
        "translation_en_to_de",
        model=model,
        tokenizer=tiny_tokenizer,
        config=model.config,
        pipeline_class=TranslationPipeline,
    )
    assert translator(SENTENCES, max_new_tokens=7) == expected
    # The model records no languages: src_lang / tgt_lang cannot be honoured, so they are refused.
    for kwargs in ({"src_lang": "en"}, {"tgt_lang": "fr"}):
        with pytest.raises(ValueError, match="translates one fixed direction and does not record its languages"):
            translator(SENTENCES, max_new_tokens=7, **kwargs)
    # A tokenizer that records them (as MarianTokenizer does): matching languages pass, others are refused.
    tokenizer = build_tokenizer()
    tokenizer.source_lang, tokenizer.target_lang = "en", "de"
    translator = TranslationPipeline(model=model, tokenizer=tokenizer, task="translation_en_to_de", src_lang="en")
    assert translator(SENTENCES, max_new_tokens=7, tgt_lang="de") == expected
    with pytest.raises(ValueError, match="tgt_lang='fr': this model translates one fixed direction, en to de"):
        translator(SENTENCES, max_new_tokens=7, tgt_lang="fr")
    with pytest.raises(ValueError, match="task 'translation_en_to_fr' \\(target language 'fr'\\).* en to de"):
        TranslationPipeline(model=model, tokenizer=tokenizer, task="translation_en_to_fr")


def test_max_new_tokens_with_a_max_length_in_the_generation_config_does_not_warn(tiny_tokenizer):
    model = tiny_model()
    model.generation_config.max_length = 12  # as the training scripts set it
    translator = TranslationPipeline(model=model, tokenizer=tiny_tokenizer)
    with CaptureLogger(logging.get_logger("transformers.generation.utils")) as captured:
        result = translator(SENTENCES, max_new_tokens=7)
    assert "max_length" not in captured.out
    assert result == expected_translations(model, tiny_tokenizer, max_new_tokens=7)
    assert translator(SENTENCES) == expected_translations(model, tiny_tokenizer, max_length=12)


def test_text2text_pipelines_from_a_saved_folder(tmp_path, tiny_tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    expected = expected_translations(model, tiny_tokenizer, max_new_tokens=7)
    for task, key in TASK_OUTPUTS.items():
        generator = pipeline(task, model=str(tmp_path / "model"), trust_remote_code=True)
        assert generator(SENTENCES, max_new_tokens=7) == [{key: row["translation_text"]} for row in expected], task
    # transformers 5 runs a task it removed only from the model's custom_pipelines, and those only with
    # trust_remote_code, even where this package is installed.
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        pipeline("translation", model=str(tmp_path / "model"))


REMOTE_PIPELINE = textwrap.dedent(
    """
    import json, sys
    sys.modules["hf_simple_attn"] = None  # the package must not be importable here
    import torch
    from transformers import pipeline
    torch.set_num_threads(1)
    report = {}
    for task in json.loads(sys.argv[3]):
        generator = pipeline(task, model=sys.argv[1], trust_remote_code=True)
        report[task] = {"module": type(generator).__module__,
                        "result": generator(json.loads(sys.argv[2]), max_new_tokens=7, batch_size=2)}
    print(json.dumps(report))
    """
)


def test_translation_pipeline_without_the_package(tmp_path, tiny_tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    report = run_without_package(
        ["-c", REMOTE_PIPELINE, str(tmp_path / "model"), json.dumps(SENTENCES), json.dumps(list(TASK_OUTPUTS))],
        tmp_path,
    )
    expected = expected_translations(model, tiny_tokenizer, max_new_tokens=7)
    for task, key in TASK_OUTPUTS.items():
        assert report[task]["module"].startswith("transformers_modules."), task
        assert report[task]["result"] == [{key: row["translation_text"]} for row in expected], task
