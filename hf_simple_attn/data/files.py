"""Local data files of the training scripts (`--train_file`, `--validation_file`, `--test_file`).

One loader for every script in `training/`: json (JSON lines or an array of objects), jsonl, csv
and tsv (a header row naming the columns). csv/tsv cells are read as text, as written: `#N/A`,
`NA` or `null` stay those strings. Every row is checked before training starts; a problem raises
`DataFileError` naming the file, the line (`item N` in a JSON array) and the field:

    train.jsonl line 7: field 'translation.de' is missing
    train.tsv line 3: field 'de' is empty
    validation.jsonl has columns ['src', 'tgt'], but train.jsonl has ['en', 'de']: missing 'en', 'de'
"""

import csv
import json
import os
from collections.abc import Iterator, Sequence

import datasets
from datasets.fingerprint import Hasher


FILE_EXTENSIONS = ("json", "jsonl", "csv", "tsv")
DELIMITERS = {"csv": ",", "tsv": "\t"}
SPLIT_FLAGS = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}
# Bump when the rows read from a file change, so that no older cached Arrow file is reused.
READER_VERSION = "1"


class DataFileError(ValueError):
    """A data file the training scripts cannot use; the message names the file, the line and the field."""


def file_extension(path: str | os.PathLike) -> str:
    return str(path).rsplit(".", 1)[-1].lower()


def data_files_by_split(train_file: str | None, validation_file: str | None, test_file: str | None) -> dict:
    """The given files by split name; each must exist and end in one of FILE_EXTENSIONS (else a ValueError)."""
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path is not None}
    for split, path in files.items():
        if file_extension(path) not in FILE_EXTENSIONS:
            raise ValueError(
                f"{SPLIT_FLAGS[split]}: expected a file ending in .{', .'.join(FILE_EXTENSIONS)}, got {path}"
            )
    for split, path in files.items():
        if not os.path.isfile(path):
            raise ValueError(f"{SPLIT_FLAGS[split]}: no such file: {path}")
    return files


def reference_file(data_files: dict[str, str]) -> str:
    """The file whose columns the others must have: the training file, else the first one."""
    return data_files.get("train", next(iter(data_files.values())))


def text_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of a UTF-8 file (a byte order mark is dropped)."""
    offset = 0
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataFileError(
                    f"{path} line {number}: byte {raw[error.start]:#04x} (byte offset {offset + error.start}) is not "
                    "UTF-8; save the file as UTF-8"
                ) from None
            offset += len(raw)


def json_rows(path: str) -> Iterator[tuple[str, object]]:
    """(place, row) of a JSON lines file, or of a .json file holding one array of objects (places `item N`)."""
    lines = text_lines(path)
    for number, text in lines:
        if not text.strip():
            continue
        if text.lstrip().startswith("[") and file_extension(path) == "json":
            text = text + "".join(rest for _, rest in lines)
            try:
                items = json.loads(text)
            except json.JSONDecodeError as error:
                raise invalid_json(path, number + error.lineno - 1, error) from None
            yield from ((f"item {index}", item) for index, item in enumerate(items, start=1))
            return
        try:
            yield f"line {number}", json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            raise invalid_json(path, number, error) from None


def invalid_json(path: str, line: int, error: json.JSONDecodeError) -> DataFileError:
    return DataFileError(f"{path} line {line}: not valid JSON ({error.msg}, column {error.colno})")


def csv_records(path: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of every record of a csv/tsv file, every cell as text; blank lines are skipped."""
    reader = csv.reader((text for _, text in text_lines(path)), delimiter=DELIMITERS[file_extension(path)])
    start = 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if cells:
                yield line, cells
    except csv.Error as error:
        raise DataFileError(f"{path} line {reader.line_num}: {error}") from None


def csv_rows(path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(place, row) of a csv/tsv file, keyed by its header (the first line)."""
    records = csv_records(path)
    _, header = next(records, (None, None))
    count = 0
    for line, cells in records:
        if len(cells) != len(header):
            raise DataFileError(
                f"{path} line {line}: {len(cells)} fields, but the header has {len(header)} "
                f"({', '.join(header)}); quote cells that hold the delimiter"
            )
        count += 1
        yield f"line {line}", dict(zip(header, cells, strict=True))
    if header is not None and count == 0:
        raise DataFileError(f"{path} has no rows (only the header line)")


def file_rows(path: str) -> Iterator[tuple[str, dict]]:
    """(place, row) of every row of a data file; DataFileError when it has none or a row is not an object."""
    rows = csv_rows(path) if file_extension(path) in DELIMITERS else json_rows(path)
    count = 0
    for place, row in rows:
        if not isinstance(row, dict):
            raise DataFileError(f"{path} {place}: expected an object of fields, got {type(row).__name__} {row!r:.40}")
        count += 1
        yield place, row
    if count == 0:
        raise DataFileError(f"{path} has no rows")


def data_file_columns(path: str) -> list[str]:
    """The columns of a data file: its csv/tsv header, or the fields of its first json row."""
    if file_extension(path) in DELIMITERS:
        _, header = next(csv_records(path), (None, None))
        if header is None:
            raise DataFileError(f"{path} has no rows")
        return header
    _, row = next(file_rows(path))
    return list(row)


def field_value(row: dict, field: str):
    """`row[field]`, following dots into nested objects (`translation.de`); KeyError when missing."""
    value = row
    for part in field.split("."):
        if not isinstance(value, dict):
            raise KeyError(field)
        value = value[part]
    return value


def checked_value(path: str, place: str, row: dict, field: str, text: bool):
    """The field's value, a non-empty string (text) or a string or number (a label); DataFileError otherwise."""
    try:
        value = field_value(row, field)
    except KeyError:
        raise DataFileError(f"{path} {place}: field {field!r} is missing") from None
    if value is None:
        raise DataFileError(f"{path} {place}: field {field!r} is null")
    if text and not isinstance(value, str):
        raise DataFileError(f"{path} {place}: field {field!r} is not a string (got {value!r:.40})")
    if not isinstance(value, str | int | float):
        raise DataFileError(f"{path} {place}: field {field!r} is not a string or a number (got {value!r:.40})")
    if isinstance(value, str) and not value.strip():
        raise DataFileError(f"{path} {place}: field {field!r} is empty")
    return value


def label_dtype(path: str, field: str, labels: list[tuple[str, object]]) -> str:
    """The datasets dtype of a file's labels: int64, float64 (also csv text that reads as numbers) or string."""
    from_text = file_extension(path) in DELIMITERS
    if from_text:
        labels = [(place, parse_number(label)) for place, label in labels]
    first_place, first = labels[0]
    for place, label in labels:
        if isinstance(label, str) != isinstance(first, str):
            raise DataFileError(
                f"{path} {place}: field {field!r} is {label!r:.40}, but {first_place} has {first!r:.40}: "
                "use numbers for every label or text for every label"
            )
    if isinstance(first, str):
        return "string"
    return "int64" if all(isinstance(label, int) for _, label in labels) else "float64"


def parse_number(text: str) -> int | float | str:
    for number_type in (int, float):
        try:
            return number_type(text)
        except ValueError:
            pass
    return text


def check_file(path: str, text_fields: Sequence[str], label_field: str | None) -> str | None:
    """Check every row of `path`; returns the dtype of its labels (None without a label field)."""
    labels = []
    for place, row in file_rows(path):
        for field in text_fields:
            checked_value(path, place, row, field, text=True)
        if label_field is not None:
            labels.append((place, checked_value(path, place, row, label_field, text=False)))
    return label_dtype(path, label_field, labels) if label_field is not None else None


def generate_rows(path: str, text_fields: Sequence[str], label_field: str | None, label_type: str | None):
    """The checked rows of `path`, reduced to the fields read (nested as in the file), labels typed."""
    convert = {"int64": int, "float64": float, "string": str}.get(label_type)
    for _, row in file_rows(path):
        example = {}
        for field in text_fields:
            *parents, name = field.split(".")
            target = example
            for parent in parents:
                target = target.setdefault(parent, {})
            target[name] = field_value(row, field)
        if label_field is not None:
            example[label_field] = convert(row[label_field])
        yield example


def features_of(text_fields: Sequence[str], label_field: str | None, label_type: str | None) -> datasets.Features:
    features = {}
    for field in text_fields:
        *parents, name = field.split(".")
        target = features
        for parent in parents:
            target = target.setdefault(parent, {})
        target[name] = datasets.Value("string")
    if label_field is not None:
        features[label_field] = datasets.Value(label_type)
    return datasets.Features(features)


def load_data_files(
    data_files: dict[str, str],
    text_fields: Sequence[str],
    label_field: str | None = None,
    cache_dir: str | None = None,
) -> datasets.DatasetDict:
    """`data_files` (split -> path) as a DatasetDict of `text_fields` and `label_field`, every row checked first.

    Text fields (dotted for a field of a nested json object, e.g. `translation.de`) must be present,
    strings, and not empty or blank; the label a string or a number (csv labels that all read as
    numbers become numbers), of one kind in a file. The label column may be left out of a `test`
    file (that split then has no labels). Every file must have the columns the first one (train's)
    has for these fields. Problems raise `DataFileError`. The Arrow files are cached in `cache_dir`
    (datasets' default when None), keyed by the split and the file's path, size and modification time.
    """
    reference = reference_file(data_files)
    reference_columns = data_file_columns(reference)
    needed = list(dict.fromkeys(field.split(".")[0] for field in text_fields))
    dataset_dict = datasets.DatasetDict()
    reference_label_type = None
    for split, path in data_files.items():
        columns = data_file_columns(path)
        split_label = label_field if label_field in columns or split != "test" else None
        missing = [column for column in [*needed, split_label] if column is not None and column not in columns]
        if missing:
            what = f"{path} has columns {columns}"
            if path != reference:
                what += f", but {reference} has {reference_columns}"
            raise DataFileError(f"{what}: missing {', '.join(map(repr, missing))}")
        label_type = check_file(path, text_fields, split_label)
        reference_label_type = reference_label_type or label_type
        if label_type is not None and (label_type == "string") != (reference_label_type == "string"):
            kinds = {True: "text", False: "numbers"}
            raise DataFileError(
                f"{path}: field {label_field!r} holds {kinds[label_type == 'string']}, "
                f"but in {reference} it holds {kinds[reference_label_type == 'string']}"
            )
        stat = os.stat(path)
        file_identity = [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]
        identity = [split, *file_identity, list(text_fields), split_label, label_type]
        dataset_dict[split] = datasets.Dataset.from_generator(
            generate_rows,
            features=features_of(text_fields, split_label, label_type),
            # a tuple: list values of gen_kwargs are shards to datasets
            gen_kwargs={
                "path": path,
                "text_fields": tuple(text_fields),
                "label_field": split_label,
                "label_type": label_type,
            },
            cache_dir=cache_dir,
            split=split,
            fingerprint=Hasher.hash([READER_VERSION, *identity]),
        )
    return dataset_dict


__all__ = [
    "FILE_EXTENSIONS",
    "DataFileError",
    "data_file_columns",
    "data_files_by_split",
    "file_extension",
    "load_data_files",
    "reference_file",
]
