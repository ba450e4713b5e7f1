"""Vocabulary shortlist (Marian's lexical shortlist, CTranslate2's vocabulary map): decode over the target tokens a
batch is likely to need instead of the whole vocabulary.

The table, built from the training data (`hf_simple_attn.deploy.shortlist`), lists for each source token the `top_k`
target tokens it most likely translates into (-1 fills the rows of tokens with fewer); every sentence may also produce
the `frequent` target tokens and the special tokens of the config. With `generate(..., use_shortlist=True)` (or
`model.generation_config.use_shortlist = True`, saved in `generation_config.json`) the source tokens of the batch are
looked up once per call and the search runs over these candidates alone (`candidate_vocabulary.py`: the logits of
the candidates only, the options' token ids carried into candidate indices, the output, scores included, mapped
back), choosing the tokens a search over the whole vocabulary with -inf outside the candidates would. A call that
needs the whole vocabulary (a logits processor or streamer of its own, sampling) gets exactly that search:
`output_vocab_mask` computes the candidates' logits and sets every other one to -inf. As in Marian and CTranslate2 the
candidates are the union over the batch's sentences, so a sentence may translate differently in another batch; alone,
it gets only its own candidates.
"""

import torch
from torch import nn
from transformers import initialization as init


def target_vocab_size(config) -> int:
    """The size of the output vocabulary (the language-model head's rows)."""
    return config.vocab_size if config.share_encoder_decoder_embeddings else config.decoder_vocab_size


class VocabShortlist(nn.Module):
    """The shortlist's tables, as buffers saved with the weights: `candidates` (source vocabulary, top_k) and
    `frequent` (shortlist_frequent,), target token ids."""

    def __init__(self, config):
        super().__init__()
        self.target_vocab_size = target_vocab_size(config)
        self.special_ids = sorted({config.pad_token_id, config.eos_token_id, config.decoder_start_token_id} - {None})
        self.candidates = nn.Buffer(torch.full((config.vocab_size, config.shortlist_top_k), -1, dtype=torch.int32))
        self.frequent = nn.Buffer(torch.full((config.shortlist_frequent,), -1, dtype=torch.int32))

    def init_weights(self) -> None:
        """An empty shortlist (only frequent and special tokens would remain) until the tables are loaded or set."""
        init.constant_(self.candidates, -1)
        init.constant_(self.frequent, -1)

    def candidate_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(batch, source) source tokens -> (batch, target vocabulary) bool: the tokens each sentence may produce."""
        rows = self.candidates[input_ids].long()  # (batch, source, top_k)
        if attention_mask is not None:
            rows = rows.masked_fill(attention_mask[..., None] == 0, -1)
        # -1 (no candidate) lands in an extra last column, dropped afterwards.
        rows = rows.masked_fill(rows < 0, self.target_vocab_size).flatten(1)
        mask = torch.zeros(rows.shape[0], self.target_vocab_size + 1, dtype=torch.bool, device=rows.device)
        mask.scatter_(1, rows, True)
        mask = mask[:, :-1]
        mask[:, self.frequent.long()] = True
        mask[:, self.special_ids] = True
        return mask

    def batch_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(batch, source) source tokens -> (1, target vocabulary) bool: the batch's candidates, the union over its
        sentences (as in Marian and CTranslate2)."""
        return self.candidate_mask(input_ids, attention_mask).any(dim=0, keepdim=True)


def new_vocab_shortlist(config, candidates: torch.Tensor, frequent: torch.Tensor) -> VocabShortlist:
    """A shortlist holding `candidates` (source vocabulary, top_k) and `frequent` (any length), checked against the
    config's vocabularies; records their sizes in `config.shortlist_top_k` and `config.shortlist_frequent`."""
    check_table(candidates, "candidates", 2, config.vocab_size, target_vocab_size(config), -1)
    check_table(frequent, "frequent", 1, None, target_vocab_size(config), 0)
    config.shortlist_top_k, config.shortlist_frequent = candidates.shape[1], frequent.shape[0]
    shortlist = VocabShortlist(config)
    shortlist.candidates.copy_(candidates)
    shortlist.frequent.copy_(frequent)
    return shortlist


def resized_vocab_shortlist(config, shortlist: VocabShortlist) -> VocabShortlist:
    """`shortlist` fitted to the config's vocabulary sizes after `resize_token_embeddings`: a new source token gets no
    candidates of its own (it allows the frequent and special tokens only); a target token that no longer exists
    leaves the tables."""
    target_size = target_vocab_size(config)
    candidates = shortlist.candidates[: config.vocab_size]  # (source vocabulary, top_k)
    new_rows = candidates.new_full((config.vocab_size - len(candidates), candidates.shape[1]), -1)
    candidates = torch.cat([candidates, new_rows])
    candidates = candidates.masked_fill(candidates >= target_size, -1)
    frequent = shortlist.frequent[shortlist.frequent < target_size]
    return new_vocab_shortlist(config, candidates, frequent).to(shortlist.candidates.device)


def check_table(table, name: str, ndim: int, rows: int | None, vocab_size: int, minimum: int) -> None:
    """A `ValueError` naming `name` unless `table` is an integer tensor of `ndim` dimensions (`rows` rows) with ids in
    [minimum, vocab_size)."""
    if not isinstance(table, torch.Tensor) or table.is_floating_point() or table.is_complex() or table.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor of integer token ids, got {describe(table)}")
    if rows is not None and table.shape[0] != rows:
        raise ValueError(f"{name}: expected one row per source token ({rows}), got shape {tuple(table.shape)}")
    if ndim == 2 and table.shape[1] == 0:
        raise ValueError(f"{name}: expected at least one column (top_k >= 1), got shape {tuple(table.shape)}")
    if table.numel() and not (minimum <= table.min() and table.max() < vocab_size):
        raise ValueError(
            f"{name}: token ids must lie in [{minimum}, {vocab_size}) (the target vocabulary"
            f"{', -1 for an empty slot' if minimum < 0 else ''}), got values from {table.min()} to {table.max()}"
        )


def describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def shortlist_requested(generation_config, shortlist: VocabShortlist | None) -> bool:
    """Whether `generate` decodes over the shortlist (`use_shortlist`, off by default); a `ValueError` for a value
    other than True/False, or for True without a shortlist."""
    use_shortlist = getattr(generation_config, "use_shortlist", None)
    if use_shortlist is None:
        return False
    if not isinstance(use_shortlist, bool):
        raise ValueError(f"use_shortlist: expected True or False, got {use_shortlist!r}")
    if use_shortlist and shortlist is None:
        raise ValueError(
            "use_shortlist=True: this model has no vocabulary shortlist (config.shortlist_top_k is 0); add one with "
            "`hf-simple-attn shortlist RUN_DIR ...` or `model.set_vocab_shortlist(candidates, frequent)`"
        )
    return use_shortlist


class CandidateRows:
    """The output layer's rows of one `output_vocab_mask`'s candidates, gathered at the first decoding step of a
    `generate` call and reused by its next steps (`generate` passes each step the same mask tensor); gathered anew
    for another mask or once the weights change (version counters)."""

    def __init__(self):
        self.mask = None  # kept alive, so that its identity cannot pass to a new tensor
        self.key = None
        self.rows = None

    def get(
        self, output_vocab_mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(candidate ids (candidates,), their weight rows (candidates, d_model), their biases (candidates,)) of the
        union of the rows of `output_vocab_mask` (rows, vocabulary); `weight` (vocabulary, d_model), `bias`
        (..., vocabulary), e.g. Marian's `final_logits_bias` (1, vocabulary): the tensors themselves, not views made
        anew at each step, which would look like new weights."""
        if (
            output_vocab_mask.dtype != torch.bool
            or output_vocab_mask.ndim != 2
            or output_vocab_mask.shape[1] != len(weight)
        ):
            raise ValueError(
                f"output_vocab_mask: expected a bool tensor of shape (rows, vocabulary={len(weight)}), "
                f"got {describe(output_vocab_mask)}"
            )
        key = (weight, weight._version, bias, bias._version, torch.is_inference_mode_enabled())
        if self.mask is not output_vocab_mask or self.key != key:
            candidate_ids = output_vocab_mask.any(dim=0).nonzero().squeeze(1)  # (candidates,)
            self.mask, self.key = output_vocab_mask, key
            self.rows = candidate_ids, weight[candidate_ids], bias.reshape(-1)[candidate_ids]
        return self.rows


def shortlist_logits(
    hidden_states: torch.Tensor, rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor], vocab_size: int
) -> torch.Tensor:
    """The language-model head over the candidates only: (batch, length, d_model) -> (batch, length, vocab_size),
    -inf outside the candidates; `rows` from `CandidateRows.get`."""
    candidate_ids, weight, bias = rows
    logits = nn.functional.linear(hidden_states, weight, bias)
    full_logits = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
    full_logits[..., candidate_ids] = logits
    return full_logits


__all__ = [
    "CandidateRows",
    "VocabShortlist",
    "new_vocab_shortlist",
    "resized_vocab_shortlist",
    "shortlist_logits",
    "shortlist_requested",
]
