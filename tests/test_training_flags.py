"""Options the training scripts share with transformers' example scripts, each doing what it does there:
`--config_name`, `--use_fast_tokenizer`, `--trust_remote_code`, `--forced_bos_token` (translation), `--lang`
(summarization), `--ignore_mismatched_sizes` (GLUE), and the Accelerate loop's `--with_tracking` /
`--report_to`, `--predict_with_generate`, `--max_length`; progress output; `torchrun` on CPUs; and the one
spelling of the offline corpora's cache, `--data_cache_dir`.

Every run is a tiny model trained for a step or two, in-process through the scripts' `main(argv)`
(the torchrun test starts a subprocess; HF_SIMPLE_ATTN_SKIP_TORCHRUN=1 skips it).
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import accelerate.tracking
import datasets
import pytest
from accelerate.tracking import GeneralTracker
from transformers import AutoTokenizer

import hf_simple_attn.recipes.model_setup
from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertForSequenceClassification, SimpleAttnMarianConfig
from hf_simple_attn.recipes.arguments import ModelArguments, parse_script_arguments
from hf_simple_attn.recipes.tokenization import train_bert_tokenizer, train_tokenizer


TRAINING_DIR = Path(__file__).resolve().parent.parent / "training"
sys.path.insert(0, str(TRAINING_DIR))

import run_glue  # noqa: E402
import run_summarization  # noqa: E402
import run_translation  # noqa: E402
import run_translation_no_trainer  # noqa: E402


WORDS = {"the": "die", "cat": "katze", "dog": "hund", "red": "rot", "house": "haus", "runs": "läuft", "on": "auf"}
TINY = [
    "--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2", "--ffn_dim", "32",
    "--vocab_size", "60", "--max_position_embeddings", "64",
]  # fmt: skip
TRAINER = [
    "--use_cpu", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "3",
    "--per_device_train_batch_size", "8", "--learning_rate", "3e-3",
]  # fmt: skip


def pairs(count: int) -> list[tuple[str, str]]:
    english = list(WORDS)
    rows = []
    for index in range(count):
        words = [english[(index * 3 + offset * 5) % len(english)] for offset in range(2 + index % 4)]
        rows.append((" ".join(words), " ".join(WORDS[word] for word in words)))
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, count in (("train", 32), ("validation", 4), ("test", 3)):
        path = folder / f"{split}.jsonl"
        path.write_text(
            "".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs(count)),
            encoding="utf-8",
        )
        files[split] = str(path)
    return files


def translation_args(corpus, *splits) -> list[str]:
    arguments = ["--source_lang", "en", "--target_lang", "de"]
    for split in splits:
        arguments += [f"--{split}_file", corpus[split]]
    return arguments


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def language_token_tokenizer(tmp_path_factory) -> Path:
    """A Marian-layout tokenizer of the toy corpus with `>>de<<` added as an ordinary token."""
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer = train_tokenizer([text for pair in pairs(32) for text in pair], vocab_size=60)
    tokenizer.add_tokens([">>de<<"])
    tokenizer.save_pretrained(folder)
    return folder


# --use_fast_tokenizer, --trust_remote_code, --config_name -------------------------------------------------


def test_use_fast_tokenizer_true_is_accepted_false_is_refused(corpus, tmp_path):
    assert ModelArguments(use_fast_tokenizer=True).use_fast_tokenizer
    with pytest.raises(ValueError, match="--use_fast_tokenizer false: no slow tokenizer can be had here"):
        run_translation.main(
            translation_args(corpus, "train") + ["--use_fast_tokenizer", "false", "--do_train"]
            + ["--output_dir", str(tmp_path / "out")]
        )  # fmt: skip


def test_trust_remote_code_lets_a_tokenizer_with_custom_code_load(corpus, language_token_tokenizer, tmp_path):
    folder = tmp_path / "custom-tokenizer"
    shutil.copytree(language_token_tokenizer, folder)
    config = read_json(folder / "tokenizer_config.json")
    config |= {"tokenizer_class": "CustomTokenizer", "auto_map": {"AutoTokenizer": [None, "custom.CustomTokenizer"]}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "custom.py").write_text(
        "from transformers import PreTrainedTokenizerFast\n\n\nclass CustomTokenizer(PreTrainedTokenizerFast):\n"
        "    pass\n",
        encoding="utf-8",
    )
    arguments = translation_args(corpus, "train") + TINY + TRAINER + ["--tokenizer_name", str(folder), "--do_train"]
    arguments += ["--max_steps", "1", "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        run_translation.main(arguments)
    run_translation.main(arguments + ["--trust_remote_code"])
    assert read_json(tmp_path / "out" / "tokenizer_config.json")["tokenizer_class"] == "CustomTokenizer"


def test_config_name_gives_the_size_and_layout_or_replaces_a_checkpoints_config(corpus, tmp_path):
    sizes = dict(d_model=24, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2)
    sizes |= dict(encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=48, vocab_size=10)
    SimpleAttnMarianConfig.from_preset("hc-sa", **sizes).save_pretrained(tmp_path / "config")
    scratch = tmp_path / "scratch"
    run_translation.main(
        translation_args(corpus, "train") + TRAINER + ["--vocab_size", "60", "--max_source_length", "16"]
        + ["--config_name", str(tmp_path / "config"), "--do_train", "--max_steps", "1", "--output_dir", str(scratch)]
    )  # fmt: skip
    config = read_json(scratch / "config.json")
    del sizes["vocab_size"]  # the tokenizer's
    assert {key: config[key] for key in sizes} == sizes
    assert config["attention_preset"] == "hc-sa"
    assert config["vocab_size"] == len(AutoTokenizer.from_pretrained(scratch)) == config["pad_token_id"] + 1

    # With --model_name_or_path: the config of --config_name (here another dropout) instead of the checkpoint's.
    changed = tmp_path / "changed-config"
    changed.mkdir()
    (changed / "config.json").write_text(json.dumps(config | {"dropout": 0.25}), encoding="utf-8")
    continued = tmp_path / "continued"
    run_translation.main(
        translation_args(corpus, "train") + TRAINER + ["--model_name_or_path", str(scratch)]
        + ["--config_name", str(changed), "--do_train", "--max_steps", "1", "--output_dir", str(continued)]
    )  # fmt: skip
    assert read_json(continued / "config.json")["dropout"] == 0.25
    assert read_json(scratch / "config.json")["dropout"] == 0.1


# --forced_bos_token, --lang, --ignore_mismatched_sizes --------------------------------------------------


def test_forced_bos_token_starts_every_translation(corpus, language_token_tokenizer, tmp_path):
    arguments = translation_args(corpus, "train", "test") + TINY + TRAINER
    arguments += ["--tokenizer_name", str(language_token_tokenizer), "--do_train", "--do_predict"]
    arguments += ["--predict_with_generate", "--max_steps", "1", "--val_max_target_length", "6"]
    with pytest.raises(ValueError, match="--forced_bos_token: '>>fr<<' is not in the tokenizer's vocabulary"):
        run_translation.main(arguments + ["--forced_bos_token", ">>fr<<", "--output_dir", str(tmp_path / "fr")])
    output_dir = tmp_path / "de"
    run_translation.main(arguments + ["--forced_bos_token", ">>de<<", "--output_dir", str(output_dir)])
    token_id = read_json(output_dir / "tokenizer.json")["added_tokens"][-1]
    assert token_id["content"] == ">>de<<"
    assert read_json(output_dir / "generation_config.json")["forced_bos_token_id"] == token_id["id"]
    predictions = (output_dir / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == 3 and all(line.startswith(">>de<<") for line in predictions)


def test_lang_names_the_summaries_language(tmp_path, caplog):
    rows = [{"document": f"{en}. {en} again, and more.", "summary": en} for en, _ in pairs(16)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output_dir = tmp_path / "out"
    run_summarization.main(
        ["--train_file", str(train), "--lang", "de", "--do_train", "--max_steps", "1", "--output_dir", str(output_dir)]
        + TINY + TRAINER
    )  # fmt: skip
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "language:\n- de\n" in card
    assert any(record.getMessage().startswith("--lang de: ROUGE's tokenizer") for record in caplog.records)


def test_ignore_mismatched_sizes_starts_a_classifier_head_of_another_size(tmp_path):
    labels = ["good", "bad", "so so"]
    rows = [{"sentence": f"{en} is {labels[i % 3]}", "label": labels[i % 3]} for i, (en, _) in enumerate(pairs(12))]
    checkpoint = tmp_path / "two-labels"
    tokenizer = train_bert_tokenizer([row["sentence"] for row in rows], vocab_size=60, model_max_length=32)
    config = SimpleAttnBertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, num_labels=2, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    SimpleAttnBertForSequenceClassification(config).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    arguments = ["--model_name_or_path", str(checkpoint), "--train_file", str(train), "--validation_file", str(train)]
    arguments += ["--do_train", "--max_steps", "1", "--output_dir", str(tmp_path / "out"), *TRAINER]
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        run_glue.main(arguments)
    run_glue.main(arguments + ["--ignore_mismatched_sizes"])
    config = read_json(tmp_path / "out" / "config.json")
    assert config["id2label"] == {"0": "bad", "1": "good", "2": "so so"}


# The Accelerate loop: --with_tracking / --report_to, --max_length, --predict_with_generate -----------------


class RecordingTracker(GeneralTracker):
    """A tracker that keeps what it is given (accelerate's trackers need packages that may be missing here)."""

    name = "recording"
    requires_logging_directory = False
    runs = []

    def __init__(self, run_name: str, **kwargs):
        super().__init__()
        self.run = {"name": run_name, "config": None, "logs": []}
        RecordingTracker.runs.append(self.run)

    @property
    def tracker(self):
        return self.run

    def store_init_configuration(self, values: dict):
        self.run["config"] = values

    def log(self, values: dict, step: int | None = None, **kwargs):
        self.run["logs"].append((step, values))


def test_accelerate_loop_tracks_generates_up_to_max_length_and_scores_by_loss(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(accelerate.tracking.LOGGER_TYPE_TO_CLASS, RecordingTracker.name, RecordingTracker)
    monkeypatch.setattr(RecordingTracker, "runs", [])
    common = translation_args(corpus, "train", "validation", "test") + TINY + ["--per_device_train_batch_size", "8"]
    common += ["--max_train_steps", "2", "--logging_steps", "1", "--do_predict", "--seed", "5"]
    tracked = tmp_path / "tracked"
    run_translation_no_trainer.main(
        common + ["--with_tracking", "--report_to", "recording", "--max_length", "4", "--hub_token", "hf_SECRET"]
        + ["--output_dir", str(tracked)]
    )  # fmt: skip
    [run] = RecordingTracker.runs
    assert run["name"] == "translation_no_trainer"
    assert run["config"]["learning_rate"] == 5e-5 and run["config"]["max_length"] == 4
    assert "hub_token" not in run["config"] and "hf_SECRET" not in json.dumps(run["config"])
    assert [step for step, _ in run["logs"]] == [1, 2, 2]
    assert set(run["logs"][0][1]) == {"train_loss", "learning_rate", "epoch"}
    assert {"eval_bleu", "eval_chrf", "predict_bleu", "eval_gen_len"} <= set(run["logs"][-1][1])
    assert read_json(tracked / "generation_config.json")["max_length"] == 4
    assert read_json(tracked / "eval_results.json")["eval_gen_len"] <= 4

    by_loss = tmp_path / "by-loss"
    # with label smoothing the model smooths its own loss (chunked in training)
    run_translation_no_trainer.main(
        common + ["--predict_with_generate", "false", "--label_smoothing_factor", "0.1", "--output_dir", str(by_loss)]
    )
    results = read_json(by_loss / "all_results.json")
    assert math.isfinite(results["eval_loss"]) and math.isfinite(results["predict_loss"])
    assert not any(key.endswith(("_bleu", "_chrf")) for key in results)
    assert not (by_loss / "generated_predictions.txt").exists()
    assert RecordingTracker.runs == [run]  # without --with_tracking nothing is tracked


# Progress ---------------------------------------------------------------------------------------------------


def test_tokenizer_training_shows_progress_unless_disable_tqdm(corpus, tmp_path, monkeypatch):
    shown = []

    def recording_train_tokenizer(texts, **kwargs):
        shown.append(kwargs["show_progress"])
        return train_tokenizer(texts, **kwargs)

    monkeypatch.setattr(hf_simple_attn.recipes.model_setup, "train_tokenizer", recording_train_tokenizer)
    arguments = translation_args(corpus, "train") + TINY + TRAINER + ["--do_train", "--max_steps", "1"]
    run_translation.main(arguments + ["--output_dir", str(tmp_path / "quiet")])
    assert datasets.utils.are_progress_bars_disabled()
    run_translation.main(arguments + ["--disable_tqdm", "false", "--output_dir", str(tmp_path / "shown")])
    assert not datasets.utils.are_progress_bars_disabled()
    assert shown == [False, True]


# The offline corpora's cache --------------------------------------------------------------------------------

# Each script with an offline corpus of its own, so that parsing needs nothing else.
OFFLINE_DATASET = {
    run_translation: "libreoffice_help",
    run_translation_no_trainer: "libreoffice_help",
    run_glue: "rotten_tomatoes",
    run_summarization: "debian_summarization",
}


def parsed_data_cache_dir(script, argv: list[str]) -> str:
    parsed = parse_script_arguments(script.SCRIPT_ARGUMENTS, ["--dataset_name", OFFLINE_DATASET[script], *argv])
    (data_args,) = [group for group in parsed if isinstance(group, script.DataTrainingArguments)]
    return data_args.data_cache_dir


@pytest.mark.parametrize("script", list(OFFLINE_DATASET), ids=lambda script: script.__name__)
def test_every_script_takes_data_cache_dir(script, tmp_path):
    argv = ["--data_cache_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert parsed_data_cache_dir(script, argv) == str(tmp_path)


@pytest.mark.parametrize("script", [run_translation, run_translation_no_trainer], ids=lambda script: script.__name__)
def test_the_translation_scripts_still_take_corpus_cache_dir(script, tmp_path):
    argv = ["--corpus_cache_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert parsed_data_cache_dir(script, argv) == str(tmp_path)


# torchrun ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(os.environ.get("HF_SIMPLE_ATTN_SKIP_TORCHRUN") == "1", reason="HF_SIMPLE_ATTN_SKIP_TORCHRUN=1")
def test_torchrun_on_cpus_runs_one_distributed_job(corpus, tmp_path):
    """Two processes, no --use_cpu, no GPU: one gloo job (a step of 2 × 8 pairs), not two copies (about 20 s)."""
    output_dir = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        str(TRAINING_DIR / "run_translation.py"),
    ]
    command += translation_args(corpus, "train") + TINY + ["--report_to", "none", "--save_strategy", "no"]
    command += [
        "--per_device_train_batch_size",
        "8",
        "--do_train",
        "--max_steps",
        "1",
        "--output_dir",
        str(output_dir),
    ]
    environment = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    environment.pop("ACCELERATE_USE_CPU", None)
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for rank in (0, 1):
        assert f"Process rank: {rank}, device: cpu:0, n_gpu: 0, distributed training: True" in completed.stdout
    assert read_json(output_dir / "train_results.json")["epoch"] == 0.5  # 16 of the 32 pairs in the step
    assert completed.stdout.count("Model card written") == 1
