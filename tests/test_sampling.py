"""Length-grouped training batches in random order; evaluation kept in dataset order."""

import pytest
import torch
from datasets import Dataset
from torch.utils.data import SequentialSampler
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.recipes.sampling import (
    LengthGroupedSeq2SeqTrainer,
    LengthGroupedTrainer,
    ShuffledLengthGroupedSampler,
)
from hf_simple_attn.recipes.tokenization import train_tokenizer


def batches_of(indices: list[int], batch_size: int) -> list[list[int]]:
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def test_one_megabatch_gives_batches_of_neighbouring_lengths_in_random_order():
    lengths = torch.randperm(203, generator=torch.Generator().manual_seed(0)).tolist()  # lengths 0..202, distinct
    sampler = ShuffledLengthGroupedSampler(lengths, batch_size=8, megabatch_batches=26)
    torch.manual_seed(0)
    indices = list(sampler)
    assert sorted(indices) == list(range(203)) and len(sampler) == 203
    batches = [sorted(lengths[i] for i in batch) for batch in batches_of(indices, 8)]
    # Full batches hold 8 neighbouring lengths (counted from the longest); the short one the 3 shortest, last.
    assert batches[-1] == [0, 1, 2]
    assert sorted(batches[:-1]) == [list(range(top - 7, top + 1)) for top in range(10, 203, 8)]
    assert batches[0][-1] == 202
    maxima = [batch[-1] for batch in batches[1:-1]]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_passes_differ_and_repeat_under_the_same_seed():
    lengths = [int(x) for x in torch.randint(1, 60, (100,), generator=torch.Generator().manual_seed(1))]
    torch.manual_seed(3)
    sampler = ShuffledLengthGroupedSampler(lengths, batch_size=4)
    first, second = list(sampler), list(sampler)
    torch.manual_seed(3)
    assert list(ShuffledLengthGroupedSampler(lengths, batch_size=4)) == first and first != second


def test_each_epoch_is_fixed_by_the_seed_whatever_came_before():
    """What a resumed run relies on: epoch e's order depends on (seed, e) only, not on the global RNG."""
    lengths = [int(x) for x in torch.randint(1, 60, (100,), generator=torch.Generator().manual_seed(1))]
    uninterrupted = ShuffledLengthGroupedSampler(lengths, batch_size=4, seed=11)
    passes = [list(uninterrupted) for _ in range(3)]
    resumed = ShuffledLengthGroupedSampler(lengths, batch_size=4, seed=11)
    torch.manual_seed(12345)  # the checkpoint's restored RNG state: irrelevant to the order
    resumed.set_epoch(2)
    assert list(resumed) == passes[2]
    assert len({tuple(order) for order in passes}) == 3
    assert list(ShuffledLengthGroupedSampler(lengths, batch_size=4, seed=12)) != passes[0]


@pytest.mark.parametrize("batch_size, megabatch_batches", [(0, 50), (4, 0)])
def test_bad_sizes_are_refused(batch_size, megabatch_batches):
    with pytest.raises(ValueError, match="batch_size|megabatch_batches"):
        ShuffledLengthGroupedSampler([1, 2, 3], batch_size=batch_size, megabatch_batches=megabatch_batches)


def test_group_by_length_training_keeps_predictions_in_dataset_order(tmp_path):
    words = "the cat dog house tree car red blue big small runs sits on and".split()
    sources = [" ".join(words[(3 * row + k) % len(words)] for k in range(1 + row % 7)) for row in range(12)]
    tokenizer = train_tokenizer(sources, vocab_size=60)
    config = SimpleAttnMarianConfig.from_preset(
        "hc-sa", vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id, init_std=1.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = SimpleAttnMarianMTModel(config).eval()
    encoded = tokenizer(sources)
    dataset = Dataset.from_dict({**encoded, "labels": encoded["input_ids"]})

    def predictions(strategy: str) -> list[list[int]]:
        args = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path / strategy), per_device_train_batch_size=4, per_device_eval_batch_size=3,
            predict_with_generate=True, generation_max_length=6, train_sampling_strategy=strategy,
            use_cpu=True, report_to="none", disable_tqdm=True,
        )  # fmt: skip
        trainer = LengthGroupedSeq2SeqTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        )  # fmt: skip
        if strategy == "group_by_length":
            for tested in (trainer, LengthGroupedTrainer(model=model, args=args, processing_class=tokenizer)):
                assert isinstance(tested._get_train_sampler(dataset), ShuffledLengthGroupedSampler)
                assert isinstance(tested._get_eval_sampler(dataset), SequentialSampler)
        output = trainer.predict(dataset).predictions
        return [[int(t) for t in row if t not in (-100, tokenizer.pad_token_id)] for row in output]

    in_order = predictions("sequential")
    assert len({tuple(row) for row in in_order}) > 3  # rows differ, so a reordering would show
    assert predictions("group_by_length") == in_order
