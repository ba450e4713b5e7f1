"""`hf-simple-attn convert` (a pretrained checkpoint saved in another layout, with its tokenizer and card) and
sequence-level distillation (`--distill_from`: the teacher's translations cached, reused, resumed, checked)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from test_study import write_spec
from test_training_translation import LOOP_ARGS, TINY_MODEL, TRAINER_ARGS, run_translation, run_translation_no_trainer
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    MarianConfig,
    MarianMTModel,
    T5Config,
    T5ForConditionalGeneration,
)

from hf_simple_attn import SimpleAttnBertForSequenceClassification, SimpleAttnMarianMTModel
from hf_simple_attn.cli import main as cli
from hf_simple_attn.deploy import distill
from hf_simple_attn.deploy.distill import DistillationArguments, distill_training_split, distill_translations
from hf_simple_attn.recipes.arguments import ModelArguments
from hf_simple_attn.recipes.model_card import attention_kinds
from hf_simple_attn.recipes.translation_task import DataTrainingArguments
from hf_simple_attn.studies.runner import Run, check_script_options, command_for, load_study

from conftest import TINY_BERT, TINY_MARIAN, WORDS, build_bert_tokenizer, build_tokenizer, record_calls


# One preset of each family that replaces dot-product attention somewhere.
FAMILY_PRESETS = {
    "hard_coded": "hc-sa",
    "recurrent": "ran-all",
    "local": "local-all",
    "gaussian_mixture": "gmm",
    "hard_retrieval": "hard-dec",
}
CONVERTED_LINE = re.compile(r"tensors: (\d+) copied, (\d+) new, (\d+) mismatched, (\d+) dropped")


def save_marian(folder: Path, **config_fields) -> Path:
    """A tiny MarianMTModel (random, seeded) with the word-level Marian-layout tokenizer, saved in `folder`."""
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(**{**TINY_MARIAN, **config_fields})).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory) -> Path:
    return save_marian(tmp_path_factory.mktemp("marian"), source_lang="en", target_lang="de")


def card_counts(card_text: str) -> tuple[int, ...]:
    """(copied, new, mismatched, dropped) as the card's Conversion table states them."""
    rows = ("copied from the source", "newly initialised", "of which the source has one of another shape", "dropped")
    return tuple(int(re.search(rf"\| {row}[^|]* \| (\d+) \|", card_text).group(1)) for row in rows)


# --- convert -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILY_PRESETS))
def test_convert_saves_a_checkpoint_that_loads_with_the_auto_classes_and_generates(
    family, marian_folder, tmp_path, capsys
):
    preset = FAMILY_PRESETS[family]
    output_dir = tmp_path / preset
    cli(["convert", str(marian_folder), "--preset", preset, str(output_dir)])
    counts = tuple(int(count) for count in CONVERTED_LINE.search(capsys.readouterr().out).groups())

    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    assert type(model) is SimpleAttnMarianMTModel and model.config.attention_preset == preset
    assert family in attention_kinds(model.config)
    source = MarianMTModel.from_pretrained(marian_folder)
    torch.testing.assert_close(model.model.shared.weight, source.model.shared.weight, rtol=0, atol=0)
    assert (output_dir / "modeling_simple_attn_marian.py").is_file()  # the code travels for trust_remote_code
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(marian_folder).get_vocab()
    batch = tokenizer(["the cat sat on the mat", "a dog"], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=2, max_new_tokens=5)
    assert generated.shape[0] == 2 and (generated[:, 0] == TINY_MARIAN["decoder_start_token_id"]).all()

    card = ModelCard.load(output_dir / "README.md")
    assert card.data.base_model == str(marian_folder) and card.data.language == ["en", "de"]
    assert f"converted from\n`{marian_folder}` and not trained since" in card.text
    assert "(`MarianMTModel`)" in card.text and card_counts(card.text) == counts
    assert "None since the conversion" in card.text and "Not trained since the conversion" in card.text


def test_card_names_the_newly_initialised_and_dropped_groups(marian_folder, tmp_path, capsys):
    cli(["convert", str(marian_folder), "--preset", "ran-all", str(tmp_path / "ran-all")])
    assert "94 copied, 10 new, 0 mismatched, 20 dropped" in capsys.readouterr().out
    text = (tmp_path / "ran-all" / "README.md").read_text(encoding="utf-8")
    new = text.split("Newly initialised, by module")[1].split("Dropped from the source")[0]
    # The recurrent state: A0 and the shared transition of each stack; the self-attention query/key projections go.
    assert "- `model.encoder.attention_state.encoder_self_recurrent.transition.linear` (2)" in new
    assert "- `model.decoder.attention_state.decoder_self_recurrent` (1)" in new
    dropped = text.split("Dropped from the source, by module:")[1].split("##")[0]
    assert "- `model.encoder.layers.*.self_attn.q_proj` (4)" in dropped
    assert "- `model.decoder.layers.*.self_attn.k_proj` (6)" in dropped


def test_convert_a_bert_checkpoint_to_an_encoder_preset(tmp_path, capsys):
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(**TINY_BERT)).save_pretrained(tmp_path / "bert")
    build_bert_tokenizer().save_pretrained(tmp_path / "bert")
    output_dir = tmp_path / "band2"
    cli(["convert", str(tmp_path / "bert"), "--preset", "band2", str(output_dir)])
    assert "58 copied, 0 new, 0 mismatched, 0 dropped" in capsys.readouterr().out
    model = AutoModelForMaskedLM.from_pretrained(output_dir)
    assert model.config.attention_preset == "band2"
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.pipeline_tag == "fill-mask" and 'pipeline("fill-mask"' in card.text

    options = ["--preset", "band2", "--model_class", "SimpleAttnBertForSequenceClassification"]
    cli(["convert", str(tmp_path / "bert"), str(tmp_path / "classifier"), *options])
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "classifier")
    assert type(classifier) is SimpleAttnBertForSequenceClassification
    text = (tmp_path / "classifier" / "README.md").read_text(encoding="utf-8")
    new, dropped = text.split("Newly initialised, by module")[1].split("Dropped from the source, by module:")
    assert "- `classifier` (2)" in new and "- `cls.predictions.transform.dense` (2)" in dropped
    inputs = AutoTokenizer.from_pretrained(tmp_path / "classifier")(["a good film"], return_tensors="pt")
    assert classifier(**inputs).logits.shape == (1, 2)


def test_convert_refuses_an_unknown_preset_another_model_type_and_a_used_folder(marian_folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_status:
        cli(["convert", str(marian_folder), "--preset", "band6", str(tmp_path / "out")])
    assert exit_status.value.code == 2
    assert "unknown seq2seq preset 'band6'; valid presets: ['base', 'hc-sa'," in capsys.readouterr().err

    T5ForConditionalGeneration(
        T5Config(vocab_size=40, d_model=8, d_ff=8, num_layers=1, num_heads=1, d_kv=8)
    ).save_pretrained(tmp_path / "t5")
    with pytest.raises(SystemExit):
        cli(["convert", str(tmp_path / "t5"), "--preset", "hc-sa", str(tmp_path / "out")])
    assert (
        "a 't5' checkpoint cannot be converted; conversion takes Marian (marian), BERT (bert)"
        in capsys.readouterr().err
    )

    kept = tmp_path / "used" / "notes.txt"
    kept.parent.mkdir()
    kept.write_text("mine")
    with pytest.raises(SystemExit):
        cli(["convert", str(marian_folder), "--preset", "hc-sa", str(kept.parent)])
    assert "exists and is not empty" in capsys.readouterr().err and sorted(kept.parent.iterdir()) == [kept]
    cli(["convert", str(marian_folder), "--preset", "hc-sa", str(kept.parent), "--overwrite_output_dir"])
    assert kept.read_text() == "mine" and (kept.parent / "model.safetensors").is_file()


# --- distillation --------------------------------------------------------------------------------------------------


SOURCES = [" ".join(WORDS[(3 * index) % len(WORDS) :][: 1 + index % 6]) for index in range(18)]


def settings(cache_dir: Path, teacher: Path, **distill_fields) -> tuple[DistillationArguments, DataTrainingArguments]:
    distill_args = DistillationArguments(
        **{
            "distill_from": str(teacher),
            "distill_num_beams": 2,
            "distill_batch_size": 3,
            "distill_shard_size": 6,
            "distill_cache_dir": str(cache_dir),
            "distill_engine": "pytorch",
            **distill_fields,
        }
    )
    data_args = DataTrainingArguments(
        dataset_name="toy", source_lang="en", target_lang="de", max_source_length=16, max_target_length=6
    )
    return distill_args, data_args


def translations_in(cache_dir: Path, teacher: Path, **distill_fields) -> tuple[list[str], Path]:
    distill_args, data_args = settings(cache_dir, teacher, **distill_fields)
    tokenizer, config = AutoTokenizer.from_pretrained(teacher), MarianConfig.from_pretrained(teacher)
    return distill_translations(
        SOURCES, tokenizer, config, distill_args, data_args, {"cache_dir": None, "token": None}
    )


def test_distilled_translations_are_cached_and_reused(marian_folder, tmp_path, monkeypatch):
    loads = record_calls(monkeypatch, distill, "load_teacher")
    translations, folder = translations_in(tmp_path, marian_folder)
    assert len(loads) == 1 and len(translations) == len(SOURCES)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["complete"] and manifest["engines"] == ["pytorch"] and manifest["data"]["examples"] == 18
    assert manifest["teacher"]["path"] == str(marian_folder.resolve()) and manifest["generation"]["num_beams"] == 2
    assert len(list(folder.glob("shard-*.jsonl"))) == 3

    again, same_folder = translations_in(tmp_path, marian_folder)
    assert (again, same_folder, len(loads)) == (translations, folder, 1)  # read back: the teacher is not loaded
    _, other_folder = translations_in(tmp_path, marian_folder, distill_num_beams=3)
    assert other_folder != folder and len(loads) == 2  # other settings: other translations


def test_a_resumed_distillation_gives_the_uninterrupted_translations(marian_folder, tmp_path, monkeypatch):
    uninterrupted, _ = translations_in(tmp_path / "uninterrupted", marian_folder)

    class Interrupted(Exception):
        pass

    batches = record_calls(monkeypatch, distill, "translate_batch")
    original = distill.translate_batch

    def killed_in_the_fifth_batch(*args):
        if len(batches) == 4:
            raise Interrupted
        return original(*args)

    monkeypatch.setattr(distill, "translate_batch", killed_in_the_fifth_batch)
    with pytest.raises(Interrupted):
        translations_in(tmp_path / "resumed", marian_folder)
    [folder] = [path for path in (tmp_path / "resumed").iterdir() if path.is_dir()]
    assert [path.name for path in sorted(folder.glob("shard-*"))] == ["shard-000000000.jsonl", "shard-000000006.jsonl"]

    monkeypatch.setattr(distill, "translate_batch", original)
    batches = record_calls(monkeypatch, distill, "translate_batch")
    resumed, _ = translations_in(tmp_path / "resumed", marian_folder)
    assert resumed == uninterrupted and len(batches) == 2  # the third shard only


def test_translations_come_back_in_dataset_order_from_batches_longest_first(marian_folder, tmp_path, monkeypatch):
    batches = []

    def spelled_out(model, tokenizer, texts, data_args, num_beams):
        batches.append(texts)
        return [text.upper() for text in texts]

    monkeypatch.setattr(distill, "translate_batch", spelled_out)
    translations, _ = translations_in(tmp_path, marian_folder)
    assert translations == [source.upper() for source in SOURCES]
    lengths = [len(source.split()) for batch in batches for source in batch]
    assert lengths == sorted(lengths, reverse=True) and {len(batch) for batch in batches} == {3}


def test_a_teacher_of_other_languages_or_another_vocabulary_is_refused(tmp_path, monkeypatch):
    loads = record_calls(monkeypatch, distill, "load_teacher")
    train = [{"translation": {"en": source, "de": source}} for source in SOURCES]
    french = save_marian(tmp_path / "en-fr", source_lang="en", target_lang="fr")
    distill_args, data_args = settings(tmp_path / "cache", french)
    with pytest.raises(ValueError, match=r"the teacher translates en to fr \(its config or tokenizer\); this run "):
        distill_training_split(train, distill_args, data_args, ModelArguments())

    german = save_marian(
        tmp_path / "en-de", source_lang="en_US", target_lang="DE"
    )  # same languages, written otherwise
    build_bert_tokenizer().save_pretrained(tmp_path / "student-tokenizer")
    distill_args, data_args = settings(tmp_path / "cache", german)
    student = ModelArguments(tokenizer_name=str(tmp_path / "student-tokenizer"))
    with pytest.raises(ValueError, match=r"its tokenizer's vocabulary \(40 entries\) is not the student's \(.*50 "):
        distill_training_split(train, distill_args, data_args, student)
    assert loads == []  # refused before the teacher is loaded


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None,
    reason="needs onnxruntime and onnxscript (the `export` extra)",
)
def test_the_onnx_engine_translates_a_marian_teacher_as_pytorch_does(tmp_path, monkeypatch):
    """A Marian teacher exported as the `base` layout (one layer each side: the export is most of the time)."""
    teacher = save_marian(tmp_path / "teacher", encoder_layers=1, decoder_layers=1)
    pytorch, _ = translations_in(tmp_path / "pytorch", teacher)
    loads = record_calls(monkeypatch, distill, "load_teacher")
    onnx, folder = translations_in(tmp_path / "onnx", teacher, distill_engine="onnx")
    assert onnx == pytorch and type(loads[0].result[0]).__name__ == "OnnxSeq2SeqModel"
    assert json.loads((folder / "manifest.json").read_text())["engines"] == ["onnx"]


def test_auto_engine_rule():
    choose = distill.choose_engine
    many = distill.ONNX_MIN_SENTENCES
    assert choose("auto", "t", "marian", many, on_gpu=True) == "pytorch"
    assert choose("auto", "t", "marian", many - 1, on_gpu=False) == "pytorch"
    assert choose("auto", "t", "t5", many, on_gpu=False) == "pytorch"
    assert choose("pytorch", "t", "marian", many, on_gpu=False) == "pytorch"
    with pytest.raises(
        ValueError, match="--distill_engine onnx: the ONNX engine exports marian and simple_attn_marian"
    ):
        choose("onnx", "t", "t5", many, on_gpu=False)
    onnx_installed = all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnxscript"))
    assert choose("auto", "t", "simple_attn_marian", many, on_gpu=False) == ("onnx" if onnx_installed else "pytorch")


def write_corpus(folder: Path) -> dict[str, Path]:
    """Training pairs of SOURCES and references the teacher does not give, and a validation split."""
    files = {}
    for split, sources in (("train", SOURCES), ("validation", SOURCES[:4])):
        rows = [{"translation": {"en": source, "de": f"referenz {index}"}} for index, source in enumerate(sources)]
        files[split] = folder / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return files


def test_both_scripts_train_on_the_teachers_translations_and_share_them(marian_folder, tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path)
    common = TINY_MODEL + [
        "--source_lang", "en", "--target_lang", "de", "--train_file", str(corpus["train"]),
        "--validation_file", str(corpus["validation"]), "--distill_from", str(marian_folder),
        "--distill_cache_dir", str(tmp_path / "cache"), "--distill_num_beams", "2", "--distill_engine", "pytorch",
    ]  # fmt: skip
    tokenized = record_calls(monkeypatch, run_translation, "tokenize_splits")
    run_translation.main(
        common + TRAINER_ARGS + ["--do_train", "--do_eval", "--max_steps", "1", "--output_dir", str(tmp_path / "run")]
    )
    [folder] = [path for path in (tmp_path / "cache").iterdir() if path.is_dir()]
    teacher_translations = [text for _, text in sorted(distill.read_shards(folder))]
    raw_splits = tokenized[0].args[0]
    assert [pair["de"] for pair in raw_splits["train"]["translation"]] == teacher_translations
    assert [pair["en"] for pair in raw_splits["train"]["translation"]] == SOURCES
    assert [pair["de"] for pair in raw_splits["validation"]["translation"]] == [f"referenz {i}" for i in range(4)]
    assert f"| training targets | translations by `{marian_folder}`" in (tmp_path / "run" / "README.md").read_text()

    loads = record_calls(monkeypatch, distill, "load_teacher")
    run_translation_no_trainer.main(
        common + LOOP_ARGS + ["--max_train_steps", "1", "--predict_with_generate", "false"]
        + ["--output_dir", str(tmp_path / "loop")]
    )  # fmt: skip
    assert loads == []  # the same options: the other script's translations, read back
    assert "| training targets | translations by" in (tmp_path / "loop" / "README.md").read_text()


def test_a_study_distils_from_a_converted_checkpoint(tmp_path):
    """What a study spec needs: the options in `arguments`, paths relative to the repository root (or absolute)."""
    study = load_study(
        write_spec(
            tmp_path,
            arguments={
                "dataset_name": "embedded",
                "model_name_or_path": "runs/opus-mt-en-de-base",
                "distill_from": "runs/opus-mt-en-de-big",
                "distill_num_beams": 5,
                "max_steps": 10,
            },
        )
    )
    check_script_options(study)
    command = command_for(study, Run("hc-sa", 1))
    assert command[command.index("--distill_from") + 1] == "runs/opus-mt-en-de-big"
    assert command[command.index("--distill_num_beams") + 1] == "5"
