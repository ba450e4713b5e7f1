"""Pushing to the Hub and loading from it, end to end, through huggingface_hub's own HTTP client and a local Hub.

The local Hub (tests/hub_server.py) runs on 127.0.0.1 for this module (`serving_hub`). Each training script runs once,
in-process and tiny, with `--push_to_hub`; `hf-simple-attn push` pushes a folder again; then one process in which the
package cannot be imported loads every checkpoint by name (`trust_remote_code=True`) and must translate, summarize and
classify as the local folders do. A request the local Hub does not understand fails the test that made it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import HfApi, ModelCard, metadata_load
from test_training_glue_summarization import (
    QUIET_CPU_RUN,
    TINY_ENCODER,
    TINY_SEQ2SEQ,
    load_script,
    sentiment_rows,
    summarization_files,
    write_jsonl,
)
from test_training_translation import (
    LOOP_ARGS,
    TINY_MODEL,
    TRAINER_ARGS,
    run_translation,
    run_translation_no_trainer,
    toy_pairs,
)

from hf_simple_attn.cli import main as cli
from hf_simple_attn.recipes.hub import files_to_push, push_command
from hf_simple_attn.recipes.model_card import card_for_repository, write_model_card

from conftest import HUB_TOKEN, HUB_USERS, hub_environment, make_model, serving_hub


OTHER_TOKEN = next(token for token, user in HUB_USERS.items() if user == "other")
# Files above this size take the LFS path: the tiny models' weights (12k parameters, about 50 kB) do, configs do not.
LFS_THRESHOLD = 20_000
PUSH = ["--hub_token", HUB_TOKEN, "--push_to_hub", "--hub_model_id"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with serving_hub(tmp_path_factory.mktemp("hf_home"), lfs_threshold=LFS_THRESHOLD) as hub:
        yield hub


@pytest.fixture(autouse=True)
def understood_requests_only(hub):
    """Fail the test during which the local Hub got a request it does not understand (a protocol change)."""
    yield
    unexpected, hub.unexpected[:] = list(hub.unexpected), []
    if unexpected:
        pytest.fail(f"the local Hub does not understand these requests of huggingface_hub: {unexpected}")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> SimpleNamespace:
    """Toy en-de pairs (train and validation) and the glue and summarization scripts' data files."""
    folder = tmp_path_factory.mktemp("data")
    translation = ["--source_lang", "en", "--target_lang", "de"]
    for split, count, seed in (("train", 64, 0), ("validation", 6, 1)):
        translation += [f"--{split}_file", write_jsonl(folder / f"{split}-en-de.jsonl", toy_pairs(count, seed))]
    rows = sentiment_rows()
    classification = ["--train_file", write_jsonl(folder / "sentiment.jsonl", rows)]
    classification += ["--validation_file", write_jsonl(folder / "sentiment-validation.jsonl", rows[:4])]
    (folder / "summaries").mkdir()
    return SimpleNamespace(
        translation=translation, classification=classification, summarization=summarization_files(folder / "summaries")
    )


@pytest.fixture(scope="module")
def runs(hub, data, tmp_path_factory) -> SimpleNamespace:
    """Each training script run once with --push_to_hub, and the failures and `hf-simple-attn push` calls around them:

    - run_translation.py -> user/tiny-mt (checkpoint folders saved locally), then `push --revision v2` of its folder;
    - run_translation_no_trainer.py (Accelerate) -> user/tiny-mt-loop;
    - run_glue.py -> user/tiny-classifier, a private repository;
    - run_summarization.py -> user/tiny-summarizer, whose commit fails with a 500; `push` pushes its folder again.
    """
    folder = tmp_path_factory.mktemp("runs")
    out = SimpleNamespace(
        translation=folder / "tiny-mt",
        loop=folder / "tiny-mt-loop",
        classification=folder / "tiny-classifier",
        summarization=folder / "tiny-summarizer",
    )
    run_translation.main(
        data.translation
        + TINY_MODEL
        + TRAINER_ARGS
        + ["--do_train", "--do_eval", "--predict_with_generate", "--max_steps", "2", "--save_steps", "1"]
        + ["--output_dir", str(out.translation), *PUSH, "user/tiny-mt"]
    )
    run_translation_no_trainer.main(
        data.translation
        + TINY_MODEL
        + LOOP_ARGS
        + ["--max_train_steps", "1", "--checkpointing_steps", "1", "--output_dir", str(out.loop)]
        + [*PUSH, "user/tiny-mt-loop"]
    )
    load_script("run_glue").main(
        data.classification
        + TINY_ENCODER
        + ["--vocab_size", "100", "--max_steps", "2", "--do_train", "--do_eval", *QUIET_CPU_RUN]
        + ["--output_dir", str(out.classification), *PUSH, "user/tiny-classifier", "--hub_private_repo", "true"]
    )
    hub.fail("POST", "/api/models/user/tiny-summarizer/commit/", 500, "Internal Error: the commit was not saved")
    with pytest.raises(SystemExit) as failed_push:
        load_script("run_summarization").main(
            data.summarization
            + TINY_SEQ2SEQ
            + ["--vocab_size", "80", "--max_steps", "1", "--do_train", "--do_eval", "--predict_with_generate"]
            + [*QUIET_CPU_RUN, "--output_dir", str(out.summarization), *PUSH, "user/tiny-summarizer"]
        )
    out.failed_push_message = str(failed_push.value.code)
    out.failed_push_files = sorted(path.name for path in out.summarization.iterdir())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_TOKEN", HUB_TOKEN)
        cli(["push", str(out.summarization), "user/tiny-summarizer"])
        cli(["push", str(out.translation), "user/tiny-mt", "--revision", "v2"])
    return out


LOADER = r"""
import contextlib, io, json, logging, sys, tempfile

sys.modules["hf_simple_attn"] = None  # any import of the package fails: the checkpoints bring their own code
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer, pipeline


@contextlib.contextmanager
def captured():
    # What a call prints (a trust_remote_code prompt) or logs (transformers' warnings).
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        yield stream
    logger.removeHandler(handler)


def outputs(job, source, with_pipeline=True, **options):
    # The model's output through AutoTokenizer + AutoModel*, and through the task's pipeline.
    options = dict(options, trust_remote_code=True, token=job.get("token"))
    tokenizer = AutoTokenizer.from_pretrained(source, **options)
    batch = tokenizer(job["texts"], return_tensors="pt", padding=True)
    if job["task"] == "text-classification":
        model = AutoModelForSequenceClassification.from_pretrained(source, **options)
        result = {"model": [model.config.id2label[index] for index in model(**batch).logits.argmax(-1).tolist()]}
        if with_pipeline:
            classifier = pipeline("text-classification", model=source, **options)
            result["pipeline"] = [prediction["label"] for prediction in classifier(job["texts"])]
        return result
    model = AutoModelForSeq2SeqLM.from_pretrained(source, **options)
    generated = model.generate(**batch, num_beams=2, max_new_tokens=8)
    result = {"model": tokenizer.batch_decode(generated, skip_special_tokens=True)}
    if with_pipeline:
        texts = pipeline(job["task"], model=source, **options)(job["texts"], num_beams=2, max_new_tokens=8)
        result["pipeline"] = [next(iter(text.values())) for text in texts]
    return result


def tokenizers(job):
    # The tokenizer by its own transformers class (no custom code), and by AutoTokenizer without trust_remote_code.
    own_class = getattr(transformers, job["tokenizer_class"])
    loaded = {}
    for name, tokenizer_class in (("own_class", own_class), ("auto", AutoTokenizer)):
        with captured() as output:
            tokenizer = tokenizer_class.from_pretrained(job["repo"], token=job.get("token"))
        ids = tokenizer(job["texts"]).input_ids
        loaded[name] = {"ids": ids, "output": output.getvalue(), "class": type(tokenizer).__name__}
    return loaded


def refused(repo, token):
    # From an empty cache, as on another machine: this process has the files cached already.
    try:
        AutoConfig.from_pretrained(repo, trust_remote_code=True, token=token, cache_dir=tempfile.mkdtemp())
    except OSError as error:
        return str(error)
    return None


results = {}
for name, job in json.loads(sys.stdin.readline()).items():  # then stdin is at its end: a prompt would not wait
    result = results[name] = {"by_name": outputs(job, job["repo"], revision=job.get("revision"))}
    if "folder" in job:
        result["folder"] = outputs(job, job["folder"], with_pipeline=False)
    if "tokenizer_class" in job:
        result["tokenizers"] = tokenizers(job)
    if "wrong_token" in job:
        result["refused"] = {
            "no token": refused(job["repo"], None),
            "wrong token": refused(job["repo"], job["wrong_token"]),
        }
print(json.dumps(results))
"""

TEXTS = {
    "translation": ["the cat runs", "a big red car and the small dog"],
    "summarization": ["This package provides a small tool that converts images. It can also resize pictures."],
    "text-classification": ["a warm, funny and moving film", "a dull and boring mess"],
}


def without_pythonpath() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


@pytest.fixture(scope="module")
def loader(hub, tmp_path_factory):
    """The process without the package that loads the checkpoints (`LOADER`). It starts at once, so that it imports
    transformers while the scripts train, and waits for its jobs on stdin (`loaded`)."""
    workdir = tmp_path_factory.mktemp("elsewhere")
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER],
        cwd=workdir,
        env={**without_pythonpath(), "OMP_NUM_THREADS": "1", **hub_environment(hub, workdir / "hf_home")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:  # the runs failed before the jobs were sent
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def loaded(loader, runs) -> dict:
    """What the process without the package gets from each checkpoint, by name from the local Hub and from its folder;
    its tokenizers loaded without custom code (`tokenizer_class`); the private repository without its token."""
    jobs = {
        "translation": dict(task="translation", repo="user/tiny-mt", folder=runs.translation),
        "translation v2": dict(task="translation", repo="user/tiny-mt", revision="v2"),
        "loop": dict(task="translation", repo="user/tiny-mt-loop", folder=runs.loop),
        "summarization": dict(task="summarization", repo="user/tiny-summarizer", folder=runs.summarization),
        "classification": dict(
            task="text-classification",
            repo="user/tiny-classifier",
            folder=runs.classification,
            token=HUB_TOKEN,
            wrong_token=OTHER_TOKEN,
        ),
    }
    for job in jobs.values():
        job["texts"] = TEXTS[job["task"]]
        if "folder" in job:
            tokenizer_config = json.loads((job["folder"] / "tokenizer_config.json").read_text())
            job.update(folder=str(job["folder"]), tokenizer_class=tokenizer_config["tokenizer_class"])
    stdout, stderr = loader.communicate(json.dumps(jobs) + "\n", timeout=300)
    assert loader.returncode == 0, stderr[-5000:]
    return json.loads(stdout.strip().splitlines()[-1])


def assert_no_secret(*folders: Path) -> None:
    """No file below `folders` holds the Hub token."""
    holding = [
        str(p) for folder in folders for p in folder.rglob("*") if p.is_file() and HUB_TOKEN.encode() in p.read_bytes()
    ]
    assert holding == []


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("translation", "translation"),
        ("translation v2", "translation"),  # `hf-simple-attn push --revision v2` of the same folder
        ("loop", "loop"),
        ("summarization", "summarization"),
        ("classification", "classification"),
    ],
)
def test_a_process_without_the_package_loads_the_pushed_checkpoint_by_name(loaded, name, folder):
    """Model + generate (or the classifier's logits), by name, give the local folder's output, and so does the task's
    pipeline, by name."""
    by_name = loaded[name]["by_name"]
    assert by_name["model"] == loaded[folder]["folder"]["model"]
    assert by_name["pipeline"] == by_name["model"]


def test_the_tokenizer_loads_by_its_own_class_without_custom_code(loaded):
    checked = {name: result for name, result in loaded.items() if "tokenizers" in result}
    for name, result in checked.items():
        own_class = result["tokenizers"]["own_class"]
        assert own_class["output"] == "", (name, own_class["output"])
        assert own_class["ids"] == result["tokenizers"]["auto"]["ids"], name
    assert {result["tokenizers"]["own_class"]["class"] for result in checked.values()} == {
        "TokenizersBackend",
        "BertTokenizer",
    }


@pytest.mark.xfail(
    strict=True,
    reason="transformers 5.24's AutoTokenizer loads config.json through AutoConfig first, which asks for "
    "trust_remote_code (a prompt, then a warning about model type '') for any model_type it does not know, "
    "whatever the tokenizer files say",
)
def test_auto_tokenizer_without_trust_remote_code_neither_asks_nor_warns(loaded):
    outputs = [result["tokenizers"]["auto"]["output"] for result in loaded.values() if "tokenizers" in result]
    assert outputs == [""] * len(outputs)


def test_a_private_repository_answers_its_owner_only(loaded):
    """Loaded by name with its owner's token (above); without a token, or with another user's, it does not exist."""
    refused = loaded["classification"]["refused"]
    assert refused.keys() == {"no token", "wrong token"}
    for message in refused.values():
        assert message.startswith("user/tiny-classifier is not a local folder and is not a valid model identifier")
        assert "If this is a private repository, make sure to pass a token" in message


def test_pushed_files_are_the_model_files_with_lfs_weights(hub, runs):
    for repo_id, folder in (
        ("user/tiny-mt", runs.translation),
        ("user/tiny-mt-loop", runs.loop),
        ("user/tiny-classifier", runs.classification),
        ("user/tiny-summarizer", runs.summarization),
    ):
        pushed = hub.files(repo_id)
        assert sorted(pushed) == files_to_push(folder), repo_id
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= set(
            pushed
        )
        assert not any(name.startswith(("checkpoint-", "step_")) or name == "training_args.bin" for name in pushed)
        assert pushed["model.safetensors"].lfs and not pushed["config.json"].lfs, repo_id
        for name, stored in pushed.items():
            if name != "README.md":
                assert stored.content == (folder / name).read_bytes(), (repo_id, name)
    translation = hub.files("user/tiny-mt")
    assert {"modeling_simple_attn_marian.py", "configuration_simple_attn.py", "pipeline_translation.py"} <= set(
        translation
    )
    config = json.loads(translation["config.json"].content)
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_simple_attn_marian.SimpleAttnMarianMTModel"
    assert (runs.translation / "checkpoint-2" / "training_args.bin").is_file()  # trained with checkpoints, kept local
    methods = {(method, path.split("/")[1]) for method, path, status in hub.requests if status == 200}
    assert {("PUT", "lfs-upload"), ("POST", "lfs-verify")} <= methods


def test_the_token_reaches_the_hub_only(hub, runs, loaded, tmp_path_factory):
    """Not in any saved file (checkpoints included), nor in any uploaded file, nor in the Hugging Face homes of this
    process and of the loading one."""
    assert_no_secret(runs.translation, runs.loop, runs.classification, runs.summarization)
    assert [upload["token"] for upload in hub.uploads] == [HUB_TOKEN] * len(hub.uploads)
    assert [
        name for upload in hub.uploads for name, data in upload["files"].items() if HUB_TOKEN.encode() in data
    ] == []
    base = tmp_path_factory.getbasetemp()
    assert_no_secret(*base.glob("hf_home*"), *base.glob("elsewhere*"))


def test_a_failed_commit_keeps_the_run_and_says_how_to_push_it_again(runs):
    message = runs.failed_push_message
    assert "while uploading" in message and "500" in message and "the commit was not saved" in message
    assert f"The local checkpoint at {runs.summarization} is intact" in message
    assert push_command(runs.summarization, "user/tiny-summarizer") in message
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json"} <= set(runs.failed_push_files)


@pytest.mark.parametrize(
    ("run", "repo_id", "metrics"),
    [
        ("translation", "user/tiny-mt", ["chrf", "sacrebleu"]),
        ("loop", "user/tiny-mt-loop", ["chrf", "sacrebleu"]),
        ("classification", "user/tiny-classifier", ["accuracy", "f1", "matthews_correlation"]),
        ("summarization", "user/tiny-summarizer", ["rouge"]),
    ],
)
def test_each_scripts_card_passes_the_hubs_metadata_rules(hub, runs, run, repo_id, metrics):
    path = getattr(runs, run) / "README.md"
    card = ModelCard.load(path)
    card.validate()  # the local Hub's /api/validate-yaml, as push_to_hub calls it
    metadata = metadata_load(path)
    assert metadata["metrics"] == metrics and metadata["library_name"] == "transformers"
    assert "datasets" not in metadata and "model-index" not in metadata  # local files: not a Hub dataset
    assert "not a Hub dataset, so these results are not in the card's `model-index`" in card.text
    assert "| dataset configuration |" not in card.text
    assert f'from_pretrained("{repo_id}"' in card.text and card.data.model_name == repo_id
    assert hub.files(repo_id)["README.md"].content.decode() == path.read_text()


def test_the_card_states_the_trained_input_length(runs):
    assert (
        "Inputs longer than 16 tokens (the tokenizer's `model_max_length`)"
        in (runs.translation / "README.md").read_text()
    )


def test_a_card_for_a_hub_dataset_names_it(hub, tmp_path):
    """`datasets` and the model-index's dataset type take a Hub dataset id; the Hub's rules accept the card."""
    path = write_model_card(
        tmp_path / "run",
        make_model("hc-sa"),
        task="translation",
        dataset_name="wmt/wmt16",
        metrics={"eval_bleu": 20.5, "eval_chrf": 50.25},
        language=["en", "de"],
    )
    card = ModelCard.load(path)
    card.validate()
    assert card.data.datasets == ["wmt/wmt16"]
    assert {(result.dataset_type, result.metric_type) for result in card.data.eval_results} == {
        ("wmt/wmt16", "sacrebleu"),
        ("wmt/wmt16", "chrf"),
    }
    assert f'model="{tmp_path / "run"}"' in card.text  # not pushed: the snippets load the folder
    pushed = ModelCard(card_for_repository(card.content, "user/wmt-model"))
    assert pushed.data.model_name == "user/wmt-model" and pushed.text.startswith("\n# user/wmt-model\n")
    assert 'model="user/wmt-model"' in pushed.text and str(tmp_path) not in pushed.content


def test_create_refused_stops_the_script_before_training(data, tmp_path):
    output_dir = tmp_path / "refused"
    with pytest.raises(SystemExit) as refused:
        run_translation.main(
            data.translation
            + TINY_MODEL
            + TRAINER_ARGS
            + ["--do_train", "--max_steps", "1", "--output_dir", str(output_dir), *PUSH, "other/tiny-mt"]
        )
    message = str(refused.value.code)
    assert "cannot create the repository 'other/tiny-mt'" in message and "403 Forbidden" in message
    assert "nothing was trained" in message and not (output_dir / "model.safetensors").exists()


def test_push_command_refuses_bad_input_and_a_wrong_token(runs, tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit) as usage:
        cli(["push", str(tmp_path), "user/x"])
    assert usage.value.code == 2 and f"RUN_DIR: {tmp_path} holds no config.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli(["push", str(runs.translation), "user/a/b"])
    assert usage.value.code == 2 and "REPO_ID: expected a Hub repository id" in capsys.readouterr().err
    monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
    with pytest.raises(SystemExit) as refused:
        cli(["push", str(runs.classification), "user/tiny-classifier", "--private"])
    message = str(refused.value.code)
    assert "while creating the repository 'user/tiny-classifier'" in message and "403 Forbidden" in message
    assert push_command(runs.classification, "user/tiny-classifier", private=True) in message


def test_the_local_hub_lists_what_was_pushed(hub, runs):
    """The listing endpoints agree with the pushed files: whoami, model info at a branch, tree, paths-info."""
    api = HfApi(token=HUB_TOKEN)
    assert api.whoami()["name"] == "user"
    pushed = hub.files("user/tiny-mt", "v2")
    info = api.model_info("user/tiny-mt", revision="v2")
    assert sorted(sibling.rfilename for sibling in info.siblings) == sorted(pushed)
    assert info.sha == hub.repos["user/tiny-mt"].branches["v2"]
    tree = {entry.path: entry for entry in api.list_repo_tree("user/tiny-mt", revision="v2", recursive=True)}
    assert tree.keys() == pushed.keys() and tree["model.safetensors"].lfs.sha256 == pushed["model.safetensors"].etag
    [config] = api.get_paths_info("user/tiny-mt", ["config.json", "missing.txt"], revision="v2")
    assert (config.path, config.size, config.lfs) == ("config.json", len(pushed["config.json"].content), None)
