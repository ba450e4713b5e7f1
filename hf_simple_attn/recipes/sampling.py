"""Length-grouped batches in random order, for `--train_sampling_strategy group_by_length`.

With that strategy transformers' `Trainer` also length-groups (and so shuffles) evaluation and
prediction batches, while our scripts score predictions against the raw references in dataset
order (and write them so); the trainers here keep evaluation in dataset order.

transformers' `LengthGroupedSampler` sorts each megabatch (50 batches) by length and yields its
batches longest first, so training sees 50 steps of steadily shorter sentences, then jumps back.
On the embedded corpus (batch 16, small model) that ordering held the model in the language-model
phase (loss 5.8 after 1,200 steps; with the batches shuffled 5.8 after 250 and 4.3 after 1,200).
Grouping by length and then shuffling the batches, as fairseq does, keeps the padding saving
without the ordering.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler, SequentialSampler
from transformers import Seq2SeqTrainer, Trainer

from .label_smoothing import ModelLabelSmoothingMixin


MEGABATCH_BATCHES = 50


class ShuffledLengthGroupedSampler(Sampler[int]):
    """Indices whose consecutive `batch_size` slices hold similar lengths; the batches come in random order.

    Each pass draws a permutation, sorts it by length within megabatches of `megabatch_batches`
    batches, cuts the megabatches into batches and shuffles them. The batch that holds the longest
    example comes first (an out-of-memory error shows at once) and the one short batch, if any (the
    last megabatch's shortest examples), last.

    Pass `e` is drawn from `seed + e`, as accelerate's seedable sampler and `DistributedSampler` do, so a run
    resumed in any epoch sees the batches the uninterrupted run saw (the Trainer calls `set_epoch`; without it
    each pass moves on to the next epoch). Without `seed`, one is drawn from torch's global generator when the
    sampler is built, so `set_seed` makes runs repeat.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        megabatch_batches: int = MEGABATCH_BATCHES,
        seed: int | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        if megabatch_batches < 1:
            raise ValueError(f"megabatch_batches: must be at least 1, got {megabatch_batches}")
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.megabatch_size = batch_size * megabatch_batches
        self.seed = int(torch.empty((), dtype=torch.int64).random_().item()) if seed is None else seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        self.epoch += 1
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        batches = []
        for start in range(0, len(order), self.megabatch_size):
            megabatch = sorted(order[start : start + self.megabatch_size], key=self.lengths.__getitem__, reverse=True)
            batches.extend(megabatch[i : i + self.batch_size] for i in range(0, len(megabatch), self.batch_size))
        short_batch = batches.pop() if batches and len(batches[-1]) < self.batch_size else None
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        if batches:  # each batch is sorted longest first
            longest = max(range(len(batches)), key=lambda i: self.lengths[batches[i][0]])
            batches[0], batches[longest] = batches[longest], batches[0]
        if short_batch is not None:
            batches.append(short_batch)
        for batch in batches:
            yield from batch


class LengthGroupedSamplingMixin:
    """For a `Trainer`: `group_by_length` uses `ShuffledLengthGroupedSampler` in training and leaves
    evaluation and prediction in dataset order (predictions are scored and written in that order)."""

    def _get_train_sampler(self, train_dataset=None):
        dataset = self.train_dataset if train_dataset is None else train_dataset
        columns = getattr(dataset, "column_names", None)  # a `datasets.Dataset`
        if self.args.train_sampling_strategy != "group_by_length" or columns is None:
            return super()._get_train_sampler(train_dataset)
        if self.args.length_column_name in columns:
            lengths = dataset[self.args.length_column_name]
        else:
            input_name = "input_ids" if self.processing_class is None else self.processing_class.model_input_names[0]
            lengths = [len(ids) for ids in dataset[input_name]]
        seed = self.args.seed if self.args.data_seed is None else self.args.data_seed
        batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return ShuffledLengthGroupedSampler(lengths, batch_size, seed=seed)

    def _get_eval_sampler(self, eval_dataset):
        if self.args.train_sampling_strategy != "group_by_length":
            return super()._get_eval_sampler(eval_dataset)
        if eval_dataset is None or self.args.world_size > 1:
            return None  # accelerate shards it in order
        return SequentialSampler(eval_dataset)


class LengthGroupedTrainer(LengthGroupedSamplingMixin, Trainer):
    """`Trainer` with `LengthGroupedSamplingMixin`'s `group_by_length`."""


class LengthGroupedSeq2SeqTrainer(LengthGroupedSamplingMixin, ModelLabelSmoothingMixin, Seq2SeqTrainer):
    """`Seq2SeqTrainer` with `LengthGroupedSamplingMixin`'s `group_by_length`; with `label_smoothing_factor`, our
    models smooth their (chunked) loss themselves (`ModelLabelSmoothingMixin`)."""


__all__ = [
    "LengthGroupedSamplingMixin",
    "LengthGroupedSeq2SeqTrainer",
    "LengthGroupedTrainer",
    "ShuffledLengthGroupedSampler",
]
