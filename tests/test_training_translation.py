"""The translation training scripts end to end on tiny models, and the shared training helpers.

The scripts run in-process through their `main(argv)` on a toy en-de corpus written as jsonl
files; every run is a few optimizer steps of a d_model-16 model.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from accelerate.utils import is_compiled_module
from safetensors.torch import load_file
from transformers import AutoTokenizer, MarianConfig, MarianMTModel, Seq2SeqTrainingArguments, pipeline

import hf_simple_attn
from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnMarianConfig
from hf_simple_attn.recipes.arguments import (
    AttentionArguments,
    ModelArguments,
    ModelSizeArguments,
    check_checkpoint_fits,
    parse_attention_layout,
)
from hf_simple_attn.recipes.model_setup import build_seq2seq_model, compute_length_ratio
from hf_simple_attn.recipes.tokenization import train_bert_tokenizer, train_tokenizer

from conftest import HUB_TOKEN, assert_hub_token_kept_out, assert_saved_as_trained, record_calls


TRAINING_DIR = Path(__file__).resolve().parent.parent / "training"
sys.path.insert(0, str(TRAINING_DIR))

import run_translation  # noqa: E402
import run_translation_no_trainer  # noqa: E402


LEXICON = {
    "the": "die",
    "cat": "katze",
    "dog": "hund",
    "house": "haus",
    "tree": "baum",
    "car": "auto",
    "red": "rot",
    "blue": "blau",
    "big": "groß",
    "small": "klein",
    "runs": "läuft",
    "sits": "sitzt",
    "on": "auf",
    "and": "und",
}
TINY_MODEL = [
    "--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "2", "--attention_heads", "2", "--ffn_dim", "32",
    "--vocab_size", "80", "--max_position_embeddings", "64", "--max_source_length", "16", "--max_target_length", "16",
    "--val_max_target_length", "8",
]  # fmt: skip


def toy_pairs(count: int, seed: int) -> list[dict]:
    """Word-by-word English-German sentences of 2-6 words."""
    generator = torch.Generator().manual_seed(seed)
    english = list(LEXICON)
    rows = []
    for _ in range(count):
        length = int(torch.randint(2, 7, (1,), generator=generator))
        words = [english[int(i)] for i in torch.randint(len(english), (length,), generator=generator)]
        rows.append({"translation": {"en": " ".join(words), "de": " ".join(LEXICON[w] for w in words)}})
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, count, seed in (("train", 64, 0), ("validation", 6, 1), ("test", 5, 2)):
        files[split] = folder / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(row) + "\n" for row in toy_pairs(count, seed)), encoding="utf-8")
    return files


def data_args(corpus, *splits) -> list[str]:
    flags = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}
    args = ["--source_lang", "en", "--target_lang", "de"]
    for split in splits:
        args += [flags[split], str(corpus[split])]
    return args


TRAINER_ARGS = [
    "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "4", "--learning_rate", "3e-3",
    "--use_cpu", "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "2", "--seed", "7",
]  # fmt: skip
LOOP_ARGS = [
    "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "4", "--learning_rate", "3e-3",
    "--logging_steps", "2", "--seed", "7",
]  # fmt: skip


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def trained_run(corpus, tmp_path_factory) -> Path:
    """hc-all (hard-coded cross attention, so γ matters) trained 4 steps, evaluated and predicted with beams."""
    output_dir = tmp_path_factory.mktemp("runs") / "hc-all"
    run_translation.main(
        data_args(corpus, "train", "validation", "test")
        + TINY_MODEL
        + TRAINER_ARGS
        + ["--attention_preset", "hc-all", "--do_train", "--do_eval", "--do_predict", "--predict_with_generate"]
        + ["--num_beams", "2", "--max_steps", "4", "--save_steps", "2", "--output_dir", str(output_dir)]
    )
    return output_dir


def test_trainer_script_writes_bleu_chrf_and_predictions(trained_run, corpus):
    eval_results = read_json(trained_run / "eval_results.json")
    predict_results = read_json(trained_run / "predict_results.json")
    assert eval_results["eval_samples"] == 6 and predict_results["predict_samples"] == 5
    for results, prefix in ((eval_results, "eval"), (predict_results, "predict")):
        assert 0.0 <= results[f"{prefix}_bleu"] <= 100.0 and 0.0 <= results[f"{prefix}_chrf"] <= 100.0
        assert results[f"{prefix}_bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
        assert results[f"{prefix}_chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0")
    # The scores are those of the written predictions against the test references.
    predictions = (trained_run / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    references = [json.loads(line)["translation"]["de"] for line in corpus["test"].read_text().splitlines()]
    assert len(predictions) == 5
    assert predict_results["predict_bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(predictions, [references]).score, abs=1e-3
    )
    assert predict_results["predict_chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(predictions, [references]).score, abs=1e-3
    )


def test_trainer_script_saves_layout_gamma_tokenizer_and_generation_settings(trained_run, corpus):
    config = read_json(trained_run / "config.json")
    assert config["attention_preset"] == "hc-all"
    assert config["attention_layout"]["cross"][0]["groups"][0]["kind"] == "hard_coded"
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"]) == (16, 1, 2)
    tokenizer = AutoTokenizer.from_pretrained(trained_run)
    assert (tokenizer.eos_token_id, tokenizer.unk_token_id, tokenizer.pad_token_id) == (0, 1, len(tokenizer) - 1)
    assert (
        config["vocab_size"] == len(tokenizer)
        and config["pad_token_id"] == config["decoder_start_token_id"] == len(tokenizer) - 1
    )
    train_rows = [json.loads(line)["translation"] for line in corpus["train"].read_text().splitlines()]
    gamma = compute_length_ratio([row["en"] for row in train_rows], [row["de"] for row in train_rows], tokenizer)
    assert config["length_ratio"] == pytest.approx(gamma)
    generation = read_json(trained_run / "generation_config.json")
    assert (generation["num_beams"], generation["max_length"]) == (2, 8)
    assert (trained_run / "modeling_simple_attn_marian.py").is_file() and (trained_run / "README.md").is_file()


def test_trained_checkpoint_translates_through_the_pipeline(trained_run):
    translator = pipeline("translation", model=str(trained_run), trust_remote_code=True)
    outputs = translator(["the cat sits", "a red car on the tree"], max_length=8)
    assert [sorted(output) for output in outputs] == [["translation_text"], ["translation_text"]]
    assert all(isinstance(output["translation_text"], str) for output in outputs)


def test_trainer_resume_from_checkpoint_matches_uninterrupted_run(trained_run, corpus, tmp_path):
    """Restarting from checkpoint-2 of the 4-step run gives exactly its final weights (data order, dropout)."""
    resumed = tmp_path / "resumed"
    shutil.copytree(trained_run / "checkpoint-2", resumed / "checkpoint-2")
    run_translation.main(
        data_args(corpus, "train")
        + TINY_MODEL
        + TRAINER_ARGS
        + ["--attention_preset", "hc-all", "--do_train", "--max_steps", "4", "--save_steps", "2"]
        + ["--output_dir", str(resumed), "--resume_from_checkpoint", str(resumed / "checkpoint-2")]
    )
    assert read_json(resumed / "trainer_state.json")["global_step"] == 4
    expected, actual = load_file(trained_run / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)


def test_rerun_resumes_from_the_newest_complete_checkpoint(corpus, tmp_path, caplog):
    """A checkpoint cut off mid-save (no trainer_state.json) is skipped with a warning; the run resumes
    from the one before it and finishes."""
    output_dir = tmp_path / "interrupted"
    arguments = data_args(corpus, "train") + TINY_MODEL + TRAINER_ARGS + ["--do_train", "--save_steps", "1"]
    arguments += ["--output_dir", str(output_dir)]
    run_translation.main(arguments + ["--max_steps", "2"])
    (output_dir / "checkpoint-2" / "trainer_state.json").unlink()

    caplog.clear()
    run_translation.main(arguments + ["--max_steps", "3"])
    messages = [record.getMessage() for record in caplog.records if record.name.startswith("hf_simple_attn")]
    assert f"Skipping {output_dir / 'checkpoint-2'}: it has no trainer_state.json (a save cut off mid-way)" in messages
    resumed_at = f"Checkpoint detected, resuming at {output_dir / 'checkpoint-1'};"
    assert any(message.startswith(resumed_at) for message in messages)
    assert read_json(output_dir / "trainer_state.json")["global_step"] == 3
    for step in (2, 3):  # checkpoint-2 saved again, complete this time
        assert read_json(output_dir / f"checkpoint-{step}" / "trainer_state.json")["global_step"] == step


def test_a_rerun_that_builds_another_model_stops_before_touching_the_checkpoint(corpus, tmp_path):
    """Rerun in the same --output_dir with another layout or size: it must not resume the checkpoint into that
    model (`hard-dec` has `base`'s parameters, so its weights would load silently into other attention)."""
    output_dir = tmp_path / "run"
    arguments = data_args(corpus, "train") + TINY_MODEL + TRAINER_ARGS + ["--do_train", "--save_steps", "1"]
    arguments += ["--output_dir", str(output_dir)]
    run_translation.main(arguments + ["--max_steps", "2"])
    saved = {path.name: path.read_bytes() for path in (output_dir / "checkpoint-2").iterdir()}

    with pytest.raises(ValueError) as failure:
        run_translation.main(arguments + ["--max_steps", "3", "--attention_preset", "hard-dec"])
    assert str(failure.value) == (
        f"Cannot resume {output_dir / 'checkpoint-2'}: it was trained as another model than this run builds; "
        "attention_layout (checkpoint: no preset, this run: preset 'hard-dec'; first difference: cross layer 0). "
        "Resume with the options it was trained with, or give a new --output_dir to start afresh."
    )
    with pytest.raises(ValueError, match=r"; d_model \(checkpoint: 16, this run: 32\);"):
        run_translation.main(arguments + ["--max_steps", "3", "--d_model", "32"])
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert {path.name: path.read_bytes() for path in (output_dir / "checkpoint-2").iterdir()} == saved


def test_a_resumed_or_continued_model_keeps_the_length_ratio_it_was_trained_with(corpus, tmp_path):
    """γ places hard-coded cross attention's centres: a resume, or a saved model trained further
    (`--model_name_or_path`), must not re-estimate it from other training data, and an explicit other
    `--length_ratio` is refused on resume like another layout."""
    output_dir = tmp_path / "run"
    common = TINY_MODEL + TRAINER_ARGS + ["--do_train", "--save_steps", "1", "--attention_preset", "hc-all"]
    common += ["--output_dir", str(output_dir)]
    run_translation.main(data_args(corpus, "train") + common + ["--max_steps", "2"])
    trained_ratio = read_json(output_dir / "checkpoint-2" / "config.json")["length_ratio"]

    rows = [json.loads(line) for line in corpus["train"].read_text(encoding="utf-8").splitlines()]
    doubled = tmp_path / "doubled.jsonl"  # sources twice as long: γ of this data is about twice the trained one
    doubled.write_text(
        "".join(
            json.dumps(
                {
                    "translation": {
                        "en": f"{row['translation']['en']} {row['translation']['en']}",
                        "de": row["translation"]["de"],
                    }
                }
            )
            + "\n"
            for row in rows
        ),
        encoding="utf-8",
    )
    doubled_args = ["--source_lang", "en", "--target_lang", "de", "--train_file", str(doubled)]
    run_translation.main(doubled_args + common + ["--max_steps", "3"])
    assert read_json(output_dir / "checkpoint-3" / "config.json")["length_ratio"] == trained_ratio
    assert read_json(output_dir / "config.json")["length_ratio"] == trained_ratio

    with pytest.raises(ValueError, match=rf"; length_ratio \(checkpoint: {trained_ratio!r}, this run: 2\.5\)\. "):
        run_translation.main(doubled_args + common + ["--max_steps", "4", "--length_ratio", "2.5"])
    assert not (output_dir / "checkpoint-4").exists()

    continued = tmp_path / "continued"
    continued_args = ["--model_name_or_path", str(output_dir), "--output_dir", str(continued), "--max_steps", "1"]
    run_translation.main(doubled_args + TRAINER_ARGS + ["--do_train"] + continued_args)
    assert read_json(continued / "config.json")["length_ratio"] == trained_ratio
    run_translation.main(
        doubled_args
        + TRAINER_ARGS
        + ["--do_train", "--length_ratio", "2.5"]
        + continued_args[:2]
        + ["--output_dir", str(tmp_path / "given"), "--max_steps", "1"]
    )
    assert read_json(tmp_path / "given" / "config.json")["length_ratio"] == 2.5


def test_a_run_never_trains_afresh_over_a_trained_model_in_its_output_dir(corpus, tmp_path):
    """A finished run without checkpoints left (or another model saved there): training again into the folder would
    overwrite the model at its final save, so both scripts stop before training and nothing in it changes."""
    trainer_dir, loop_dir = tmp_path / "trainer", tmp_path / "loop"
    common = data_args(corpus, "train", "validation") + TINY_MODEL
    trainer_args = common + TRAINER_ARGS + ["--do_train", "--max_steps", "1", "--save_strategy", "no"]
    loop_args = common + LOOP_ARGS + ["--max_train_steps", "1"]
    run_translation.main(trainer_args + ["--output_dir", str(trainer_dir)])
    run_translation_no_trainer.main(loop_args + ["--output_dir", str(loop_dir)])
    for folder, main, arguments in (
        (trainer_dir, run_translation.main, trainer_args),
        (loop_dir, run_translation_no_trainer.main, loop_args),
    ):
        saved = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
        with pytest.raises(ValueError) as failure:
            main(arguments + ["--output_dir", str(folder)])
        assert str(failure.value) == (
            f"--output_dir {folder} holds a trained model (config.json, model.safetensors) and no checkpoint to "
            "resume: training afresh would overwrite it. Give a new --output_dir (to train this model further, pass "
            "its folder as --model_name_or_path), or remove the folder to start over."
        )
        assert {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()} == saved


def test_a_checkpoint_of_another_model_type_is_refused_and_one_without_a_config_is_not_checked(tmp_path):
    encoder = SimpleAttnBertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    encoder.save_pretrained(tmp_path / "encoder")
    translator = SimpleAttnMarianConfig.from_preset("base", d_model=16, encoder_attention_heads=2)
    with pytest.raises(
        ValueError, match=r"; model_type \(checkpoint: 'simple_attn_bert', this run: 'simple_attn_marian'\)\."
    ):
        check_checkpoint_fits(str(tmp_path / "encoder"), translator)
    (tmp_path / "accelerate-state").mkdir()
    check_checkpoint_fits(str(tmp_path / "accelerate-state"), translator)
    check_checkpoint_fits(None, translator)
    relabelled = SimpleAttnBertConfig.from_dict({**encoder.to_dict(), "id2label": {0: "yes", 1: "no"}})
    with pytest.raises(
        ValueError, match=r"id2label \(checkpoint: \{0: 'LABEL_0', 1: 'LABEL_1'\}, this run: \{0: 'yes'"
    ):
        check_checkpoint_fits(str(tmp_path / "encoder"), relabelled)


def test_accelerate_loop_trains_scores_saves_and_resumes_exactly(corpus, tmp_path):
    common = data_args(corpus, "train", "validation", "test") + TINY_MODEL + LOOP_ARGS + ["--attention_preset", "sh-x"]
    first = tmp_path / "loop"
    results = run_translation_no_trainer.main(
        common
        + ["--max_train_steps", "4", "--checkpointing_steps", "2", "--do_predict", "--num_beams", "2"]
        + ["--output_dir", str(first)]
    )
    assert results["train_steps"] == 4
    for split, prefix, count in (("eval", "eval", 6), ("predict", "predict", 5)):
        written = read_json(first / f"{split}_results.json")
        assert written[f"{prefix}_samples"] == count
        assert 0.0 <= written[f"{prefix}_bleu"] <= 100.0 and written[f"{prefix}_bleu_signature"].startswith("nrefs:1")
    assert read_json(first / "config.json")["attention_preset"] == "sh-x"
    assert "| validation | BLEU |" in (first / "README.md").read_text(encoding="utf-8")
    assert (first / "step_2" / "tokenizer.json").is_file()

    resumed = tmp_path / "loop-resumed"
    run_translation_no_trainer.main(
        common
        + ["--max_train_steps", "4", "--resume_from_checkpoint", str(first / "step_2"), "--output_dir", str(resumed)]
    )
    expected, actual = load_file(first / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
    assert read_json(first / "step_2" / "config.json")["attention_preset"] == "sh-x"
    with pytest.raises(ValueError, match=r"attention_layout \(checkpoint: preset 'sh-x', this run: preset 'base';"):
        run_translation_no_trainer.main(
            common
            + [
                "--attention_preset",
                "base",
                "--max_train_steps",
                "4",
                "--resume_from_checkpoint",
                str(first / "step_2"),
            ]
            + ["--output_dir", str(tmp_path / "loop-other-layout")]
        )


def translation_inputs(folder: Path) -> dict:
    """Two padded sentence pairs, tokenized by the tokenizer saved in `folder`."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources, targets = ["the cat sits on the tree", "a red car"], ["die katze sitzt auf dem baum", "ein rotes auto"]
    return dict(tokenizer(sources, text_target=targets, padding=True, return_tensors="pt"))


def test_trainer_script_trains_compiled_and_saves_the_plain_model(corpus, tmp_path, monkeypatch, dynamo_counters):
    """--torch_compile with its default backend, inductor: the Trainer trains the compiled model (one graph, padded to
    one shape so that it compiles once) and evaluates by generating. The final model and checkpoint-1 are the plain
    model's: the saved model gives the trained one's outputs, and an uncompiled run resumes checkpoint-1 to the
    compiled run's weights (up to rounding: without dropout, whose random numbers inductor draws its own way)."""
    trainers = record_calls(monkeypatch, run_translation, "make_trainer")
    arguments = data_args(corpus, "train", "validation") + TINY_MODEL + TRAINER_ARGS
    arguments += ["--attention_preset", "hc-sa", "--dropout", "0", "--pad_to_max_length", "true"]
    arguments += ["--do_train", "--max_steps", "2", "--save_steps", "1"]
    compiled = tmp_path / "compiled"
    metrics = run_translation.main(
        arguments + ["--torch_compile", "--do_eval", "--predict_with_generate", "--output_dir", str(compiled)]
    )
    trainer = trainers[0].result
    assert trainer.args.torch_compile_backend == "inductor" and is_compiled_module(trainer.model_wrapped)
    assert dynamo_counters["stats"]["unique_graphs"] == 1 and not dynamo_counters["graph_break"]
    assert 0.0 <= metrics["eval_bleu"] <= 100.0 and metrics["eval_gen_len"] > 0
    assert_saved_as_trained(trainer.model, compiled, translation_inputs(compiled))

    resumed = tmp_path / "resumed"
    shutil.copytree(compiled / "checkpoint-1", resumed / "checkpoint-1")
    run_translation.main(arguments + ["--output_dir", str(resumed)])
    assert read_json(resumed / "trainer_state.json")["global_step"] == 2
    expected, actual = load_file(compiled / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=name)


def test_accelerate_loop_resumes_compiled_from_an_uncompiled_state(corpus, tmp_path, monkeypatch, dynamo_counters):
    """--torch_compile_backend aot_eager (which turns --torch_compile on; dynamo and AOTAutograd with eager kernels,
    so the numbers are eager ones): a compiled run resumes the state an uncompiled run saved at step 1 and ends with
    that run's weights, generating to evaluate. Its own states hold the plain model's names as the uncompiled run's
    do, its final model gives the trained model's outputs, and the card names the model's class."""
    common = data_args(corpus, "train", "validation") + TINY_MODEL + LOOP_ARGS
    common += ["--attention_preset", "ran-all", "--pad_to_max_length", "true"]
    common += ["--max_train_steps", "3", "--checkpointing_steps", "1"]
    uncompiled = tmp_path / "uncompiled"
    run_translation_no_trainer.main(common + ["--output_dir", str(uncompiled)])

    trainings = record_calls(monkeypatch, run_translation_no_trainer, "train")
    compiled = tmp_path / "compiled"
    results = run_translation_no_trainer.main(
        common
        + ["--torch_compile_backend", "aot_eager", "--resume_from_checkpoint", str(uncompiled / "step_1")]
        + ["--output_dir", str(compiled)]
    )
    model = trainings[0].args[2]
    assert is_compiled_module(model)
    assert dynamo_counters["stats"]["unique_graphs"] == 1 and not dynamo_counters["graph_break"]
    assert results["train_steps"] == 3 and 0.0 <= results["eval_bleu"] <= 100.0
    expected, actual = load_file(uncompiled / "model.safetensors"), load_file(compiled / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=name)
    assert (
        load_file(compiled / "step_3" / "model.safetensors").keys()
        == load_file(uncompiled / "step_3" / "model.safetensors").keys()
    )
    assert_saved_as_trained(model._orig_mod, compiled, translation_inputs(compiled))
    assert "Architecture: `SimpleAttnMarianMTModel`" in (compiled / "README.md").read_text(encoding="utf-8")


def test_accelerate_loop_compile_options_mean_what_the_trainers_do(tmp_path):
    """--torch_compile, --torch_compile_backend and --torch_compile_mode read as TrainingArguments' (a backend or a mode
    turns compilation on; inductor by default), and each run's Accelerator compiles as its own options say, whatever
    the run before it in the process did (Accelerate's state is shared by the process)."""
    names = ("torch_compile", "torch_compile_backend", "torch_compile_mode")
    runs = [
        {},
        {"torch_compile": True},
        {"torch_compile_backend": "aot_eager"},
        {"torch_compile_mode": "max-autotune"},
        {},  # uncompiled after compiled ones: Accelerate's shared state must not keep their settings
    ]
    trainer_options = [Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, **run) for run in runs]
    for run, trainer_args in zip(runs, trainer_options):
        args = run_translation_no_trainer.LoopArguments(output_dir=str(tmp_path), **run)
        assert [getattr(args, name) for name in names] == [getattr(trainer_args, name) for name in names]
        plugin = run_translation_no_trainer.start_accelerator(args).state.dynamo_plugin
        assert (plugin.backend.value.lower(), plugin.mode) == (
            args.torch_compile_backend or "no",
            args.torch_compile_mode or "default",
        )


def test_hub_token_stays_out_of_saved_and_uploaded_files(corpus, tmp_path, fake_hub):
    output_dir = tmp_path / "pushed"
    run_translation.main(
        data_args(corpus, "train")
        + TINY_MODEL
        + TRAINER_ARGS
        + ["--do_train", "--max_steps", "2", "--save_steps", "1", "--output_dir", str(output_dir)]
        + ["--push_to_hub", "--hub_model_id", "someone/tiny-en-de", "--hub_token", HUB_TOKEN]
    )
    assert (output_dir / "checkpoint-2" / "training_args.bin").is_file()
    assert_hub_token_kept_out(output_dir, fake_hub)


def test_accelerate_loop_keeps_the_hub_token_out_of_saved_and_uploaded_files(corpus, tmp_path, fake_hub):
    output_dir = tmp_path / "loop-pushed"
    run_translation_no_trainer.main(
        data_args(corpus, "train", "validation")
        + TINY_MODEL
        + LOOP_ARGS
        + ["--max_train_steps", "1", "--checkpointing_steps", "1", "--output_dir", str(output_dir)]
        + ["--push_to_hub", "--hub_model_id", "someone/tiny-en-de", "--hub_token", HUB_TOKEN]
    )
    assert (output_dir / "step_1").is_dir()
    assert_hub_token_kept_out(output_dir, fake_hub)


def test_embedded_corpus_by_name(tmp_path):
    metrics = run_translation.main(
        ["--dataset_name", "embedded", "--max_train_samples", "32", "--max_eval_samples", "4"]
        + TINY_MODEL
        + TRAINER_ARGS
        + [
            "--do_train",
            "--do_eval",
            "--max_steps",
            "1",
            "--save_strategy",
            "no",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert metrics["train_samples"] == 32 and metrics["eval_samples"] == 4 and "eval_loss" in metrics
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "hf_simple_attn.data:embedded" in card and "- de" in card


def test_offline_corpus_options_are_checked():
    arguments = run_translation.DataTrainingArguments(dataset_name="libreoffice_help", dataset_config_name="fr")
    assert (arguments.source_lang, arguments.target_lang) == ("en", "fr")
    reverse = run_translation.DataTrainingArguments(dataset_name="embedded", source_lang="de")
    assert (reverse.source_lang, reverse.target_lang) == ("de", "en")
    with pytest.raises(ValueError, match=r"--dataset_config_name: bible_en_es offers target languages \('es',\)"):
        run_translation.DataTrainingArguments(dataset_name="bible_en_es", dataset_config_name="de")
    with pytest.raises(ValueError, match="--source_lang/--target_lang"):
        run_translation.DataTrainingArguments(dataset_name="embedded", source_lang="en", target_lang="fr")
    with pytest.raises(ValueError, match="source language and the target language"):
        run_translation.DataTrainingArguments(dataset_name="wmt16", dataset_config_name="de-en")
    with pytest.raises(ValueError, match="--train_file: expected a file ending in"):
        run_translation.DataTrainingArguments(train_file="pairs.txt", source_lang="en", target_lang="de")


@pytest.mark.parametrize("extension, separator", [("tsv", "\t"), ("csv", ",")])
def test_language_columns_become_translation_rows(tmp_path, extension, separator):
    path = tmp_path / f"train.{extension}"
    path.write_text(f"en{separator}de\nthe cat{separator}die katze\nred car{separator}rotes auto\n", encoding="utf-8")
    arguments = run_translation.DataTrainingArguments(train_file=str(path), source_lang="en", target_lang="de")
    raw = run_translation.load_raw_datasets(arguments, ModelArguments(cache_dir=str(tmp_path / "cache")))
    assert raw["train"]["translation"] == [{"en": "the cat", "de": "die katze"}, {"en": "red car", "de": "rotes auto"}]


def test_train_tokenizer_uses_marian_ids_and_round_trips(tmp_path):
    texts = ["Click OK to close the dialog.", "Klicken Sie auf OK, um den Dialog zu schließen."] * 5
    tokenizer = train_tokenizer(texts, vocab_size=60, model_max_length=32)
    assert len(tokenizer) <= 60
    assert tokenizer.convert_ids_to_tokens([0, 1, len(tokenizer) - 1]) == ["</s>", "<unk>", "<pad>"]
    encoded = tokenizer(["Click OK"], text_target=["Klicken Sie"])
    assert encoded["input_ids"][0][-1] == 0 and encoded["labels"][0][-1] == 0
    assert tokenizer.decode(tokenizer(texts[1])["input_ids"], skip_special_tokens=True) == texts[1]
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert (
        reloaded(texts)["input_ids"] == tokenizer(texts)["input_ids"] and reloaded.pad_token_id == len(tokenizer) - 1
    )


def test_train_bert_tokenizer_uses_berts_special_tokens_and_round_trips(tmp_path):
    texts = ["The film is great.", "A dull, lifeless film."] * 5
    tokenizer = train_bert_tokenizer(texts, vocab_size=60, model_max_length=16)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pair = tokenizer("The film", "is great")
    assert tokenizer.convert_ids_to_tokens(pair["input_ids"])[0] == "[CLS]"
    assert pair["input_ids"].count(tokenizer.sep_token_id) == 2 and pair["token_type_ids"][-1] == 1
    assert tokenizer.decode(tokenizer(texts[0])["input_ids"], skip_special_tokens=True) == "the film is great."
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(texts)["input_ids"] == tokenizer(texts)["input_ids"]


def test_length_ratio_counts_tokens_with_eos():
    tokenizer = train_tokenizer(["a b c d"] * 5, vocab_size=30)
    assert len(tokenizer("a b c")["input_ids"]) == 4  # each word one token, plus </s>
    # sources: (3 + 1) + (1 + 1) = 6 tokens; targets: (2 + 1) + (4 + 1) = 8 tokens; γ = 6 / 8
    assert compute_length_ratio(["a b c", "a"], ["a b", "a b c d"], tokenizer) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="as many sources as targets"):
        compute_length_ratio(["a"], [], tokenizer)


def test_parse_attention_layout(tmp_path):
    layout = {"cross": {"default": "none", "layers": {"last": {"kind": "dot", "num_heads": 1}}}}
    assert parse_attention_layout(json.dumps(layout)) == layout
    path = tmp_path / "layout.json"
    path.write_text(json.dumps(layout), encoding="utf-8")
    assert parse_attention_layout(str(path)) == layout
    assert parse_attention_layout(None) is None
    with pytest.raises(ValueError, match="--attention_layout: invalid JSON"):
        parse_attention_layout("{cross: dot}")
    with pytest.raises(ValueError, match="--attention_layout: expected a JSON object or the path"):
        parse_attention_layout("missing.json")


def test_build_seq2seq_model_converts_or_continues_pretrained_checkpoints(tmp_path):
    tokenizer = train_tokenizer([row["translation"]["en"] for row in toy_pairs(20, 3)], vocab_size=40)
    vocab = len(tokenizer)
    marian = MarianMTModel(
        MarianConfig(
            vocab_size=vocab, d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
            pad_token_id=vocab - 1, decoder_start_token_id=vocab - 1, eos_token_id=0, forced_eos_token_id=0,
        )
    )  # fmt: skip
    marian.save_pretrained(tmp_path / "marian")
    model_args, size_args = ModelArguments(model_name_or_path=str(tmp_path / "marian")), ModelSizeArguments()
    converted = build_seq2seq_model(
        model_args, AttentionArguments(attention_preset="sh-x"), size_args, tokenizer, 1.25
    )
    assert isinstance(converted, hf_simple_attn.SimpleAttnMarianMTModel)
    assert (converted.config.attention_preset, converted.config.length_ratio, converted.config.d_model) == (
        "sh-x",
        1.25,
        16,
    )
    # Value projections keep their pretrained weights; the layout dropped the query/key projections of hard-coded heads.
    torch.testing.assert_close(
        converted.model.encoder.layers[0].self_attn.v_proj.weight,
        marian.model.encoder.layers[0].self_attn.v_proj.weight,
    )
    converted.save_pretrained(tmp_path / "ours")
    continued = build_seq2seq_model(
        ModelArguments(model_name_or_path=str(tmp_path / "ours")), AttentionArguments(), size_args, tokenizer, None
    )
    assert continued.config.attention_preset == "sh-x" and continued.config.length_ratio == 1.25
    torch.testing.assert_close(continued.lm_head.weight, converted.lm_head.weight)
    with pytest.raises(ValueError, match="--attention_preset: unknown seq2seq preset 'nope'"):
        build_seq2seq_model(model_args, AttentionArguments(attention_preset="nope"), size_args, tokenizer, None)


def test_group_by_length_resume_after_an_epoch_boundary_gives_the_same_weights(corpus, tmp_path):
    """64 pairs in batches of 16: 4 steps an epoch. Resuming at step 6 (inside the second epoch) must see the
    batches and dropout of the uninterrupted 10-step run and end with bit-identical weights."""
    arguments = (
        data_args(corpus, "train") + TINY_MODEL + TRAINER_ARGS
        + ["--attention_preset", "base", "--do_train", "--max_steps", "10", "--save_steps", "2", "--dropout", "0.1"]
        + ["--train_sampling_strategy", "group_by_length"]
    )  # fmt: skip
    uninterrupted = tmp_path / "uninterrupted"
    run_translation.main(arguments + ["--output_dir", str(uninterrupted)])
    resumed = tmp_path / "resumed"
    shutil.copytree(uninterrupted / "checkpoint-6", resumed / "checkpoint-6")
    run_translation.main(arguments + ["--output_dir", str(resumed)])  # picks up checkpoint-6 by itself
    assert read_json(resumed / "trainer_state.json")["global_step"] == 10
    # Resumed, not trained again from the start (which would also give these weights, from the same seed).
    assert sorted(path.name for path in resumed.glob("checkpoint-*")) == [
        "checkpoint-10",
        "checkpoint-6",
        "checkpoint-8",
    ]
    expected, actual = load_file(uninterrupted / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=0, msg=name)
