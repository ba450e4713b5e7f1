"""Deduplicate examples and split them into train/validation/test by a stable hash.

Splitting by a hash of the normalised source text (rather than by a random shuffle) makes
every rebuild give identical splits, and deduplicating on the same text first guarantees
that no source sentence appears in two splits.
"""

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import datasets


SPLIT_NAMES = ("train", "validation", "test")

Example = dict[str, Any]


def normalize_text(text: str) -> str:
    """Canonical form used to detect duplicates: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def stable_hash(text: str) -> int:
    """64-bit hash of the normalised text, identical across processes (unlike ``hash``)."""
    digest = hashlib.sha256(normalize_text(text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def deduplicate(examples: Iterable[Example], key: Callable[[Example], str]) -> list[Example]:
    """Keep the first example for each normalised ``key(example)``, in input order."""
    seen: set[str] = set()
    unique = []
    for example in examples:
        normalized = normalize_text(key(example))
        if normalized not in seen:
            seen.add(normalized)
            unique.append(example)
    return unique


def split_examples(
    examples: Iterable[Example],
    key: Callable[[Example], str],
    validation_size: int | float,
    test_size: int | float,
) -> dict[str, list[Example]]:
    """Deduplicate on ``key`` and assign every example to one split by ``stable_hash(key)``.

    Integer sizes are example counts: the examples with the smallest hashes form the test
    split and the next ones the validation split. Float sizes are fractions of the hash
    range, so an example's split does not depend on the rest of the corpus. Within each
    split examples are ordered by hash, which acts as a fixed shuffle.
    """
    unique = deduplicate(examples, key)
    ranked = sorted(
        ((stable_hash(key(example)), normalize_text(key(example)), example) for example in unique),
        key=lambda item: item[:2],
    )
    ordered = [example for _, _, example in ranked]

    if isinstance(validation_size, int) and isinstance(test_size, int):
        if validation_size < 0 or test_size < 0 or validation_size + test_size > len(ordered):
            raise ValueError(
                f"validation_size={validation_size} and test_size={test_size} do not fit "
                f"{len(ordered)} unique examples"
            )
        return {
            "train": ordered[validation_size + test_size :],
            "validation": ordered[test_size : test_size + validation_size],
            "test": ordered[:test_size],
        }

    if isinstance(validation_size, float) and isinstance(test_size, float):
        if validation_size < 0 or test_size < 0 or validation_size + test_size >= 1:
            raise ValueError(
                f"fractions validation_size={validation_size} and test_size={test_size} "
                "must be non-negative and sum to less than 1"
            )
        test_end = test_size * 2**64
        validation_end = (test_size + validation_size) * 2**64
        splits: dict[str, list[Example]] = {name: [] for name in SPLIT_NAMES}
        for hash_value, _, example in ranked:
            if hash_value < test_end:
                splits["test"].append(example)
            elif hash_value < validation_end:
                splits["validation"].append(example)
            else:
                splits["train"].append(example)
        return splits

    raise TypeError("validation_size and test_size must both be ints (counts) or both floats (fractions)")


def to_dataset_dict(splits: Mapping[str, Sequence[Example]], features: datasets.Features) -> datasets.DatasetDict:
    """Turn lists of example dicts into a ``DatasetDict`` with the given features."""
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {column: [example[column] for example in rows] for column in features},
                features=features,
                split=datasets.NamedSplit(name),
            )
            for name, rows in splits.items()
        }
    )
