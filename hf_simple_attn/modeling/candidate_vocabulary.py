"""Search over a vocabulary shortlist's candidates, as CTranslate2 does with its vocabulary map.

Decoding with the shortlist (`vocab_shortlist.py`) gives every token outside the batch's candidates the logit -inf.
Computing those logits for the whole vocabulary and then a log-softmax, the logits processors and the top-k over it
at every step costs a third of a beam search at opus-mt size with a few thousand candidates. A
`CandidateVocabulary` makes the candidates a vocabulary of their own: token i of the search is candidate
`ids[i]`; the generation config's token ids are carried into it (`search_config`), the search runs unchanged on
(rows, candidates) logits, and `to_vocabulary` maps its output back. Since a token outside the candidates has
probability 0, the search chooses the same tokens as over the whole vocabulary with -inf logits.

An option whose token ids cannot be carried over (a forced token that is not a candidate, `sequence_bias`, the
encoder-side repetition options, which compare source with target ids) gives `search_config` None: the caller
then searches the whole vocabulary. Callers: `SimpleAttnMarianMTModel.generate` (`candidate_search`, in
`generation_simple_attn_marian.py`) and `OnnxSeq2SeqModel.generate`.
"""

import copy

import torch
from torch import nn
from transformers import GenerationConfig


# Generation options the search cannot carry over, with their "off" values.
UNCARRIED_OPTIONS = {
    "sequence_bias": None,
    "force_words_ids": None,
    "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
    "stop_strings": None,
}
SPECIAL_TOKENS = ("bos", "eos", "pad", "decoder_start")


def beam_fill_token(generation_config) -> int:
    """What transformers' beam search writes after the end of a finished hypothesis: the pad token, or the first
    end-of-sequence token when the pad id is 0 or unset, or -1 without either."""
    pad_token_id, eos_token_id = generation_config._pad_token_tensor, generation_config._eos_token_tensor
    return int(pad_token_id or eos_token_id[0] if eos_token_id is not None else -1)


class CandidateVocabulary:
    """The candidates of one `generate` call (`ids`, (candidates,) sorted target ids) with their output-layer rows
    (`weight` (candidates, d_model), `bias` (candidates,)); `index` (vocabulary,) gives a target id's candidate
    index, -1 for a token that is not a candidate."""

    def __init__(self, ids: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, vocab_size: int):
        self.ids, self.weight, self.bias = ids, weight, bias
        self.index = torch.full((vocab_size,), -1, dtype=torch.long, device=ids.device)
        self.index[ids] = torch.arange(len(ids))

    def logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The output layer over the candidates: (rows, d_model) -> (rows, candidates)."""
        return nn.functional.linear(hidden_states, self.weight, self.bias)

    def to_vocabulary(self, tokens: torch.Tensor) -> torch.Tensor:
        """Candidate indices -> target ids; negative values (no token) stay as they are."""
        return torch.where(tokens >= 0, self.ids[tokens.clamp(min=0)], tokens)

    def scores_to_vocabulary(self, scores: torch.Tensor) -> torch.Tensor:
        """A step's scores or logits (rows, candidates) -> (rows, vocabulary), -inf outside the candidates, as the
        search over the whole vocabulary gives them."""
        vocabulary_scores = scores.new_full((scores.shape[0], len(self.index)), float("-inf"))
        vocabulary_scores[:, self.ids] = scores
        return vocabulary_scores

    def carry(self, token_lists: list[list[int] | torch.Tensor]) -> list[list[int]]:
        """For each list of target ids, the candidate indices of those of its tokens that are candidates. Which tokens
        are candidates depends on the call's source sentences, and a search config needs Python ids: all lists are
        looked up together, one read of the device per `generate` call, before decoding."""
        device = self.index.device
        token_lists = [torch.as_tensor(ids, dtype=torch.long, device=device).reshape(-1) for ids in token_lists]
        if not token_lists:
            return []
        indices = self.index[torch.cat(token_lists)].tolist()
        carried, start = [], 0
        for ids in token_lists:
            carried.append([index for index in indices[start : start + len(ids)] if index >= 0])
            start += len(ids)
        return carried

    def search_config(self, generation_config: GenerationConfig, model) -> GenerationConfig | None:
        """A copy of `generation_config` (prepared by `model._prepare_special_tokens`) whose token ids are candidate
        indices, prepared the same way; None when an option cannot be carried over. Tokens the search may not
        produce (bad words, suppressed tokens, extra end-of-sequence ids) are dropped when they are not candidates,
        since no candidate search can produce them anyway."""
        for name, off in UNCARRIED_OPTIONS.items():
            if getattr(generation_config, name, off) not in (off, None):
                return None
        special = {name: getattr(generation_config, f"_{name}_token_tensor") for name in SPECIAL_TOKENS}
        special = {name: tensor for name, tensor in special.items() if tensor is not None}
        forced = {name: getattr(generation_config, name) for name in ("forced_bos_token_id", "forced_eos_token_id")}
        forced = {name: t if isinstance(t, list) else [t] for name, t in forced.items() if t is not None}
        suppressed = {name: getattr(generation_config, name) for name in ("suppress_tokens", "begin_suppress_tokens")}
        suppressed = {name: tokens for name, tokens in suppressed.items() if tokens is not None}
        bad_words = generation_config.bad_words_ids or []
        lists = [*special.values(), *forced.values(), *suppressed.values(), *bad_words]
        carried = iter(self.carry(lists))  # in the order of `lists`

        search_config = copy.deepcopy(generation_config)
        for name, tensor in special.items():
            ids = next(carried)
            if len(ids) < (1 if name == "eos" else tensor.numel()):
                return None
            setattr(search_config, f"{name}_token_id", ids if tensor.ndim else ids[0])
        for name, tokens in forced.items():
            ids = next(carried)
            if len(ids) < len(tokens):  # a forced token outside the candidates wins over all of them
                return None
            setattr(search_config, name, ids if isinstance(getattr(generation_config, name), list) else ids[0])
        for name in suppressed:
            setattr(search_config, name, next(carried) or None)
        if bad_words:
            kept = [ids for ids, word in zip(carried, bad_words) if len(ids) == len(word)]
            search_config.bad_words_ids = kept or None
        model._prepare_special_tokens(search_config, True, device=model.device)
        return search_config


__all__ = ["CandidateVocabulary", "beam_fill_token"]
