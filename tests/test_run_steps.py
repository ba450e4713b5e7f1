"""The steps the training scripts share (`hf_simple_attn.recipes.run_steps`)."""

from types import SimpleNamespace

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

from hf_simple_attn.recipes.run_steps import decode_token_ids, select_split, select_splits


def splits(**sizes: int) -> DatasetDict:
    return DatasetDict({name: Dataset.from_dict({"x": list(range(size))}) for name, size in sizes.items()})


def test_select_split_keeps_the_first_examples_and_names_the_flag_of_a_missing_split():
    data = splits(train=5)
    assert select_split(data, "train", 3, "--do_train")["x"] == [0, 1, 2]
    assert select_split(data, "train", 9, "--do_train")["x"] == list(range(5))
    assert select_split(data, "train", None, "--do_train")["x"] == list(range(5))
    with pytest.raises(ValueError, match=r"--do_eval requires a validation split; the data has \['train'\]"):
        select_split(data, "validation", None, "--do_eval")


def test_select_splits_takes_the_splits_the_run_uses_under_their_names():
    data = splits(train=5, validation_matched=4, test_matched=3)
    data_args = SimpleNamespace(max_train_samples=2, max_eval_samples=None, max_predict_samples=1)
    training_args = SimpleNamespace(do_train=True, do_eval=True, do_predict=False)
    names = {"validation": "validation_matched", "test": "test_matched"}
    selected = select_splits(data, data_args, training_args, names)
    assert {split: None if dataset is None else len(dataset) for split, dataset in selected.items()} == {
        "train": 2,
        "validation": 4,
        "test": None,
    }
    with pytest.raises(ValueError, match="--do_eval requires a validation split"):
        select_splits(data, data_args, training_args)


def test_decode_token_ids_reads_minus_100_as_padding(tiny_tokenizer):
    first, second = tiny_tokenizer(["the cat sat", "a dog"])["input_ids"]
    padded = np.array([first, second + [-100] * (len(first) - len(second))])
    assert decode_token_ids(tiny_tokenizer, padded) == ["the cat sat", "a dog"]
