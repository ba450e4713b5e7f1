"""Local data files of the training scripts: every malformed file stops the run with a `DataFileError` that
names the file, the line and the field, before any training; csv/tsv cells stay text (`#N/A` is not NaN).

Each case runs a script's `main(argv)` in-process on tiny files in tmp_path (a 1-step tiny model, in
case a file were wrongly accepted).
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hf_simple_attn.data import DataFileError, load_data_files
from hf_simple_attn.recipes.arguments import ModelArguments


TRAINING_DIR = Path(__file__).resolve().parent.parent / "training"
sys.path.insert(0, str(TRAINING_DIR))

import run_glue  # noqa: E402
import run_summarization  # noqa: E402
import run_translation  # noqa: E402


TINY_RUN = [
    "--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2", "--ffn_dim", "32",
    "--vocab_size", "60", "--max_steps", "1", "--use_cpu", "--report_to", "none", "--save_strategy", "no",
    "--disable_tqdm", "true", "--do_train",
]  # fmt: skip


@dataclass
class Script:
    """A training script and the fields of its local files: a json row of (source, target), the csv header."""

    name: str
    main: object
    row: object
    header: tuple[str, str]
    target: str  # the target's field name in json files
    arguments: tuple[str, ...] = ()
    needs_validation: bool = False
    text_target: bool = True

    def jsonl(self, pairs) -> str:
        return "".join(json.dumps(self.row(source, target)) + "\n" for source, target in pairs)

    def csv(self, pairs, delimiter=",") -> str:
        return "".join(delimiter.join(cells) + "\n" for cells in [self.header, *pairs])


TRANSLATION = Script(
    "translation",
    run_translation.main,
    lambda source, target: {"translation": {"en": source, "de": target}},
    ("en", "de"),
    "translation.de",
    ("--source_lang", "en", "--target_lang", "de"),
)
SUMMARIZATION = Script(
    "summarization",
    run_summarization.main,
    lambda source, target: {"document": source, "summary": target},
    ("document", "summary"),
    "summary",
)
GLUE = Script(
    "glue",
    run_glue.main,
    lambda source, target: {"sentence": source, "label": target},
    ("sentence", "label"),
    "label",
    needs_validation=True,
    text_target=False,
)
GOOD = [("the red car", "das rote auto"), ("a small dog", "ein kleiner hund"), ("the tree", "der baum")]


def without(row: dict, field: str) -> dict:
    *parents, name = field.split(".")
    inner = row
    for parent in parents:
        inner = inner[parent]
    del inner[name]
    return row


def with_value(script: Script, value) -> str:
    rows = [script.row(*GOOD[0]), script.row(GOOD[1][0], value)]
    return "".join(json.dumps(row) + "\n" for row in rows)


# name -> (scripts it applies to, files(script) -> {file name: text or bytes}, fragments(script) of the message)
CASES = {
    "field missing in a later row": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.jsonl": s.jsonl(GOOD[:2]) + json.dumps(without(s.row(*GOOD[2]), s.target)) + "\n"},
        lambda s: ["train.jsonl line 3", f"field '{s.target}' is missing"],
    ),
    "null target": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.jsonl": with_value(s, None)},
        lambda s: ["train.jsonl line 2", f"field '{s.target}' is null"],
    ),
    "numeric target": (
        (TRANSLATION, SUMMARIZATION),
        lambda s: {"train.jsonl": with_value(s, 3)},
        lambda s: ["train.jsonl line 2", f"field '{s.target}' is not a string (got 3)"],
    ),
    "blank target": (
        (TRANSLATION, SUMMARIZATION),
        lambda s: {"train.jsonl": with_value(s, "  ")},
        lambda s: ["train.jsonl line 2", f"field '{s.target}' is empty"],
    ),
    "empty source in a tsv": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.tsv": s.csv([("a b", "1"), ("", "0")], "\t")},
        lambda s: ["train.tsv line 3", f"field '{s.header[0]}' is empty"],
    ),
    "labels of two kinds": (
        (GLUE,),
        lambda s: {"train.jsonl": s.jsonl([("a b", "good"), ("c d", 1)])},
        lambda s: ["train.jsonl line 2", "field 'label' is 1, but line 1 has 'good'"],
    ),
    "empty jsonl": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.jsonl": ""},
        lambda s: ["train.jsonl has no rows"],
    ),
    "header-only csv": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.csv": s.csv([])},
        lambda s: ["train.csv has no rows"],
    ),
    "non-UTF-8 bytes": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.tsv": s.csv(GOOD[:1], "\t").encode() + "caf\xe9\tcaf\xe9\n".encode("latin-1")},
        lambda s: ["train.tsv line 3", "byte 0xe9 (byte offset", "not UTF-8"],
    ),
    "ragged csv": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.csv": s.csv(GOOD[:1]) + "a, b, c\n"},
        lambda s: ["train.csv line 3", f"3 fields, but the header has 2 ({', '.join(s.header)})"],
    ),
    "truncated json": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {"train.json": "[" + json.dumps(s.row(*GOOD[0])) + ",\n" + json.dumps(s.row(*GOOD[1]))[:-9]},
        lambda s: ["train.json line 2", "not valid JSON"],
    ),
    "validation file of another schema": (
        (TRANSLATION, SUMMARIZATION, GLUE),
        lambda s: {
            "train.jsonl": s.jsonl(GOOD),
            "validation.jsonl": "".join(json.dumps({"src": a, "tgt": b}) + "\n" for a, b in GOOD),
        },
        lambda s: ["validation.jsonl has columns ['src', 'tgt'], but", "train.jsonl has", "missing"],
    ),
}
PARAMETERS = [
    pytest.param(script, name, id=f"{script.name}: {name}") for name, case in CASES.items() for script in case[0]
]


@pytest.mark.parametrize("script, case", PARAMETERS)
def test_malformed_data_file_names_file_line_and_field(script, case, tmp_path):
    _, files, fragments = CASES[case]
    paths = {}
    for file_name, content in files(script).items():
        paths[file_name.split(".")[0]] = path = tmp_path / file_name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if script.needs_validation and "validation" not in paths:
        paths["validation"] = tmp_path / "good-validation.jsonl"
        paths["validation"].write_text(script.jsonl([("a b", "1"), ("c d", "0")]), encoding="utf-8")
    arguments = [*script.arguments, *TINY_RUN, "--output_dir", str(tmp_path / "out")]
    for split, path in paths.items():
        arguments += [f"--{split}_file", str(path)]
    with pytest.raises(DataFileError) as error:
        script.main(arguments)
    message = str(error.value)
    for fragment in fragments(script):
        assert fragment in message
    assert str(tmp_path) in message  # the path as given
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_na_like_tsv_cells_stay_text_and_train(tmp_path):
    """#N/A, NA, null, nan and N/A are text in a tsv: the translation script loads and trains on them."""
    train = tmp_path / "train.tsv"
    train.write_text("en\tde\n#N/A\t#N/A\nNA\tnull\nthe car\tnan\nN/A\tdas auto\n", encoding="utf-8")
    arguments = run_translation.DataTrainingArguments(train_file=str(train), source_lang="en", target_lang="de")
    raw = run_translation.load_raw_datasets(arguments, ModelArguments(cache_dir=str(tmp_path / "cache")))
    assert raw["train"]["translation"] == [
        {"en": "#N/A", "de": "#N/A"},
        {"en": "NA", "de": "null"},
        {"en": "the car", "de": "nan"},
        {"en": "N/A", "de": "das auto"},
    ]
    metrics = run_translation.main(
        ["--train_file", str(train), "--source_lang", "en", "--target_lang", "de", *TINY_RUN]
        + ["--output_dir", str(tmp_path / "out")]
    )
    assert metrics["train_samples"] == 4


def test_summarization_csv_cells_stay_text(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text('document,summary\n"NA, or not",#N/A\nnull,None\n', encoding="utf-8")
    arguments = run_summarization.DataTrainingArguments(train_file=str(train))
    raw = run_summarization.load_raw_datasets(arguments, ModelArguments(cache_dir=str(tmp_path / "cache")))
    assert raw["train"][:] == {"document": ["NA, or not", "null"], "summary": ["#N/A", "None"]}


def test_loader_reads_json_arrays_csv_labels_and_refreshes_its_cache(tmp_path):
    cache = str(tmp_path / "cache")
    array = tmp_path / "train.json"
    array.write_text(json.dumps([{"sentence": "a", "label": 1}, {"sentence": "b"}]), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"train\.json item 2: field 'label' is missing"):
        load_data_files({"train": str(array)}, ["sentence"], "label", cache_dir=cache)

    labelled = tmp_path / "train.csv"
    labelled.write_text("sentence,label\na,1\nb,0\n", encoding="utf-8")
    test = tmp_path / "test.csv"
    test.write_text("sentence\nc\n", encoding="utf-8")
    raw = load_data_files({"train": str(labelled), "test": str(test)}, ["sentence"], "label", cache_dir=cache)
    assert raw["train"].features["label"].dtype == "int64" and raw["train"]["label"] == [1, 0]
    assert raw["test"].column_names == ["sentence"]  # a test file may leave out the labels
    raw = load_data_files(
        {"train": str(labelled), "validation": str(labelled)}, ["sentence"], "label", cache_dir=cache
    )
    assert raw["validation"]["sentence"] == ["a", "b"]  # one file, two splits
    regression = tmp_path / "validation.csv"
    regression.write_text("sentence,label\na,0.5\nb,2\n", encoding="utf-8")
    raw = load_data_files({"validation": str(regression)}, ["sentence"], "label", cache_dir=cache)
    assert raw["validation"]["label"] == [0.5, 2.0]
    words = tmp_path / "words.csv"
    words.write_text("sentence,label\na,pos\nb,neg\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"words\.csv: field 'label' holds text, but in .*train\.csv it holds"):
        load_data_files({"train": str(labelled), "validation": str(words)}, ["sentence"], "label", cache_dir=cache)

    labelled.write_text("sentence,label\nchanged,1\n", encoding="utf-8")  # same path: read again, not the cache
    assert load_data_files({"train": str(labelled)}, ["sentence"], "label", cache_dir=cache)["train"]["sentence"] == [
        "changed"
    ]
