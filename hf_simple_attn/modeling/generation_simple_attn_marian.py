"""Generation of the Marian-style model: transformers' `generate` with this model's cache, lengths fitted to learned
position tables, compilation on request, and the search over a vocabulary shortlist.

As `generation_whisper.py` beside transformers' `modeling_whisper.py`, `SimpleAttnMarianMTModel` inherits this
module's mixin, so that `modeling_simple_attn_marian.py` reads as `modeling_marian.py`. The shortlisted search lives
here: with `use_shortlist=True`, `generate` runs over the batch's candidates alone (`candidate_search`, with
`candidate_vocabulary.py`), or, for a call that needs the whole vocabulary, every decoding step gets the candidates as
`output_vocab_mask` and the model's forward computes their logits only (`shortlisted_logits`). The shortlist's tables
are `vocab_shortlist.py`'s; the ONNX engine (`hf_simple_attn.deploy.export`) runs its own loop with the same pieces.

Each override of a private `GenerationMixin` method says in its first line why it exists;
`tests/test_generation_hooks.py` fails when transformers renames or drops one, or no longer takes its arguments.
"""

import torch
from transformers import GenerationMixin
from transformers.cache_utils import EncoderDecoderCache
from transformers.generation import GenerationMode

from .cache import decoder_cache_for, describe_layout, new_decoder_cache, rollback_refusal
from .candidate_vocabulary import CandidateVocabulary, beam_fill_token
from .stack import position_limits
from .vocab_shortlist import CandidateRows, new_vocab_shortlist, shortlist_logits, shortlist_requested


# Arguments of `generate` that see token ids of the whole vocabulary: with them, a shortlist's search runs over it.
WHOLE_VOCABULARY_ARGUMENTS = (
    "logits_processor",
    "stopping_criteria",
    "prefix_allowed_tokens_fn",
    "assistant_model",
    "streamer",
    "negative_prompt_ids",
    "custom_generate",
    "decoder_input_ids",
)


def fit_generated_length(config, generation_config, has_default_max_length: bool, input_ids_length: int):
    """Fit `generation_config.max_length` to decoder heads with learned position tables (recurrent,
    random_synthesizer): the default length is cut to them, a requested one beyond them raises before decoding
    starts."""
    limits = position_limits(config.attention_layout["decoder_self"])
    if not limits:
        return generation_config
    layer_idx, kind, max_positions = min(limits, key=lambda limit: limit[2])
    # The decoder reads every token of the output but the last.
    if generation_config.max_length - 1 <= max_positions:
        return generation_config
    if has_default_max_length and generation_config.max_new_tokens is None:
        generation_config.max_length = max_positions + 1
        return generation_config
    if generation_config.max_new_tokens is not None:
        requested, allowed = "max_new_tokens", max_positions + 1 - input_ids_length
    else:
        requested, allowed = "max_length", max_positions + 1
    raise ValueError(
        f"generate: {requested}={getattr(generation_config, requested)} needs "
        f"{generation_config.max_length - 1} decoder positions ({input_ids_length} decoder input token(s) "
        f"included), but the {kind} attention at decoder_self layer {layer_idx} covers only "
        f"max_positions={max_positions}; ask for {requested} <= {allowed} or use a larger 'max_positions' "
        "in the attention layout"
    )


class SimpleAttnMarianGenerationMixin(GenerationMixin):
    """`generate` and its hooks for `SimpleAttnMarianMTModel`, which holds what they read: `config`, `lm_head`,
    `final_logits_bias`, `shortlist` (a `VocabShortlist` or None), `candidate_rows` (a `CandidateRows`) and
    `lm_head_is_plain`. transformers' `can_generate` looks for "GenerationMixin" in the names of a model's bases, hence
    this class's name. Every method whose name starts with "_" overrides `GenerationMixin`'s."""

    def new_cache(self) -> EncoderDecoderCache:
        """An empty decoding cache for this model, to pass as `cache=` to `forward` or `generate` (whose output's
        `cache` it then is). A fresh transformers `DynamicCache` or `EncoderDecoderCache` works too: the model takes
        it over at its first use."""
        return new_decoder_cache(self.config)

    def set_vocab_shortlist(self, candidates: torch.Tensor, frequent: torch.Tensor) -> None:
        """Attach a vocabulary shortlist (built from the training data by `hf_simple_attn.deploy.shortlist`):
        `candidates` (source vocab, top_k), each source token's likely target tokens, -1 for none; `frequent`, the
        target tokens every sentence may produce. Sets `config.shortlist_top_k` and `config.shortlist_frequent`; saved
        with the weights; off until `generate(..., use_shortlist=True)`."""
        self.shortlist = new_vocab_shortlist(self.config, candidates, frequent).to(self.device)

    def shortlisted_decoder_input_ids(
        self,
        decoder_input_ids: torch.LongTensor | None,
        labels: torch.LongTensor | None,
        output_vocab_mask: torch.BoolTensor | None,
        candidate_vocabulary: CandidateVocabulary | None,
    ) -> torch.LongTensor | None:
        """The forward's `decoder_input_ids` as target ids: a search over the candidates alone passes candidate
        indices. A `ValueError` for the shortlist's arguments with labels, or together: they are `generate`'s."""
        if candidate_vocabulary is not None:
            if labels is not None or output_vocab_mask is not None:
                raise ValueError("candidate_vocabulary is generate's search over candidates; pass it alone")
            return candidate_vocabulary.to_vocabulary(decoder_input_ids)
        if labels is not None and output_vocab_mask is not None:
            raise ValueError("output_vocab_mask restricts the logits generation decodes over; pass it without labels")
        return decoder_input_ids

    def shortlisted_logits(
        self,
        hidden_states: torch.Tensor,
        output_vocab_mask: torch.BoolTensor | None,
        candidate_vocabulary: CandidateVocabulary | None,
    ) -> torch.Tensor:
        """The output layer over a shortlist's candidates, (batch, tgt_len, d_model) -> (batch, tgt_len, candidates)
        with `candidate_vocabulary`, or (batch, tgt_len, vocab) with `output_vocab_mask`, -inf outside the
        candidates. Their rows are read from a plain `lm_head` only (`lm_head_is_plain`); another head computes every
        logit, and those outside the candidates are then set to -inf."""
        if candidate_vocabulary is not None:
            return candidate_vocabulary.logits(hidden_states)
        if self.lm_head_is_plain():
            rows = self.candidate_rows.get(output_vocab_mask, self.lm_head.weight, self.final_logits_bias)
            return shortlist_logits(hidden_states, rows, self.lm_head.weight.shape[0])
        logits = self.lm_head(hidden_states) + self.final_logits_bias
        return logits.masked_fill(~output_vocab_mask.any(dim=0), float("-inf"))

    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        """transformers' `generate`; with `use_shortlist=True` its search runs over the batch's candidates alone where
        the call allows it (`candidate_search`), and the output (tokens, and scores and logits with -inf outside the
        candidates) is mapped back to the vocabulary."""
        search = self.candidate_search(inputs, generation_config, kwargs)
        if search is None:
            return super().generate(inputs, generation_config, **kwargs)
        vocabulary, search_config, model_kwargs = search
        # The defaults `generate` fills unset options from must be the search's own, in candidate indices too.
        model_defaults, self.generation_config = self.generation_config, search_config
        try:
            output = super().generate(inputs, search_config, candidate_vocabulary=vocabulary, **model_kwargs)
        finally:
            self.generation_config = model_defaults
        if isinstance(output, torch.Tensor):
            return vocabulary.to_vocabulary(output)
        output.sequences = vocabulary.to_vocabulary(output.sequences)
        for name in ("scores", "logits"):
            steps = getattr(output, name, None)
            if steps is not None:
                setattr(output, name, tuple(vocabulary.scores_to_vocabulary(step) for step in steps))
        return output

    def candidate_search(
        self, inputs: torch.Tensor | None, generation_config, kwargs: dict
    ) -> tuple[CandidateVocabulary, object, dict] | None:
        """(the candidates as a vocabulary, this call's generation config in candidate indices, the model kwargs) for
        a `generate` call with `use_shortlist=True` whose search can run over the candidates alone and choose the
        same tokens (`candidate_vocabulary.py`): greedy or beam search, every token id of the options carried over,
        no argument that sees the whole vocabulary (a logits processor, a streamer, watermarking, ...);
        None otherwise, for the search over the whole vocabulary with -inf outside the candidates."""
        if self.shortlist is None or not self.lm_head_is_plain():
            return None
        if any(kwargs.get(name) is not None for name in WHOLE_VOCABULARY_ARGUMENTS):
            return None
        source_ids = kwargs.get("input_ids") if inputs is None else inputs
        config, model_kwargs = self._prepare_generation_config(generation_config, **kwargs)
        if source_ids is None or not shortlist_requested(config, self.shortlist):
            return None
        mode = config.get_generation_mode()
        if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.BEAM_SEARCH):
            return None
        if config.watermarking_config is not None:
            return None
        self._prepare_special_tokens(config, "attention_mask" in model_kwargs, device=self.device)
        mask = self.shortlist.batch_mask(source_ids, model_kwargs.get("attention_mask"))
        vocabulary = CandidateVocabulary(
            *CandidateRows().get(mask, self.lm_head.weight, self.final_logits_bias), self.lm_head.weight.shape[0]
        )
        search_config = vocabulary.search_config(config, self)
        if search_config is None:
            return None
        # What beam search writes after a hypothesis ends must map back to the token it writes over the vocabulary.
        fill_token = beam_fill_token(search_config)
        fill_token = int(vocabulary.ids[fill_token]) if fill_token >= 0 else fill_token
        if mode == GenerationMode.BEAM_SEARCH and fill_token != beam_fill_token(config):
            return None
        search_config.use_shortlist = False
        for name in ("max_length", "min_length"):  # left to `generate`'s defaults as in the call, if they were
            if kwargs.get(name) is None and getattr(generation_config, name, None) is None:
                if getattr(self.generation_config, name) is None:
                    setattr(search_config, name, None)
        for name in ("output_attentions", "output_hidden_states"):  # options of the config, not of the model
            model_kwargs.pop(name, None)
        return vocabulary, search_config, model_kwargs

    def _prepare_generation_config(self, generation_config, **kwargs):
        """Take `use_shortlist` as a generation option: transformers' config takes only the options it knows.

        Like `num_beams`, it is set on this call's copy of the generation config only (`vocab_shortlist.py`)."""
        use_shortlist = kwargs.pop("use_shortlist", None)
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        if use_shortlist is not None:
            generation_config.use_shortlist = use_shortlist
        return generation_config, model_kwargs

    def _maybe_prepare_encoder_kwargs_for_generation(
        self, inputs_tensor, model_kwargs, model_input_name, generation_config
    ):
        """Drop an attention mask without padding, and look a shortlist's candidates up once per call.

        Without the mask, the encoder and every decoding step run without masks (SDPA's unmasked kernel, no mask
        operators). Asking whether it holds padding reads the mask once per call, before decoding, where the forward
        itself never reads a tensor's value. With `use_shortlist`, every decoding step gets the batch's candidates as
        `output_vocab_mask` (one row, their union; `generate` repeats it, not changing it)."""
        attention_mask = model_kwargs.get("attention_mask")
        if (
            attention_mask is not None
            and not torch.compiler.is_compiling()
            and attention_mask.shape == inputs_tensor.shape[:2]  # a mask of the wrong shape reaches the check
            and bool(attention_mask.all())
        ):
            model_kwargs = {name: value for name, value in model_kwargs.items() if name != "attention_mask"}
        model_kwargs = super()._maybe_prepare_encoder_kwargs_for_generation(
            inputs_tensor, model_kwargs, model_input_name, generation_config
        )
        if shortlist_requested(generation_config, self.shortlist):
            if model_input_name != "input_ids":
                raise ValueError(f"use_shortlist=True looks up the source input_ids; generate got {model_input_name}")
            model_kwargs["output_vocab_mask"] = self.shortlist.batch_mask(
                inputs_tensor, model_kwargs.get("attention_mask")
            )
        return model_kwargs

    def _prepare_generated_length(
        self,
        generation_config,
        has_default_max_length,
        has_default_min_length,
        model_input_name,
        input_ids_length,
        inputs_tensor,
    ):
        """Fit the length to decoder heads with learned position tables (`fit_generated_length`)."""
        generation_config = super()._prepare_generated_length(
            generation_config,
            has_default_max_length,
            has_default_min_length,
            model_input_name,
            input_ids_length,
            inputs_tensor,
        )
        return fit_generated_length(self.config, generation_config, has_default_max_length, input_ids_length)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, generation_mode, *args, **kwargs):
        """Give `generate` this model's cache: transformers' own cannot hold value-only heads or per-step state.

        Ours (value-only heads, absent sublayers, per-step state) unless the user brought one or asked for a static
        one (`cache_implementation="static"`), which is taken over before the first step (`decoder_cache_for`: a
        fresh `DynamicCache`, `StaticCache` or `EncoderDecoderCache` of them becomes ours in place; caches that cannot
        hold the decoding state are refused). Assisted and prompt-lookup decoding, which crop the cache, are refused
        for a layout whose decoding state cannot be cropped (`rollback_refusal`)."""
        if generation_mode == GenerationMode.ASSISTED_GENERATION or generation_config.is_assistant:
            reason = rollback_refusal(self.config)
            if reason is not None:
                raise ValueError(
                    f"generate: assisted and prompt-lookup decoding roll the cache back to the accepted tokens, which "
                    f"{type(self).__name__} with {describe_layout(self.config)} cannot do: {reason}; use greedy or "
                    "beam search, or sampling"
                )
        if model_kwargs.get("cache") is None and generation_config.use_cache is not False:
            if generation_config.cache_implementation in (None, "dynamic"):
                model_kwargs["cache"] = new_decoder_cache(self.config)
                if generation_config.is_assistant:  # rolled back by `crop` (as transformers' caches)
                    model_kwargs["cache"].activate_past_recording()
                return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, generation_mode, *args, **kwargs)
        if model_kwargs.get("cache") is not None:
            model_kwargs["cache"] = decoder_cache_for(self.config, model_kwargs["cache"])

    def _valid_auto_compile_criteria(self, model_kwargs: dict, generation_config) -> bool:
        """Compile the decoding steps when asked, for either cache: transformers compiles for static caches only.

        Asked with a `compile_config` (`generate(..., compile_config=CompileConfig(...))`), on any device, unless
        `disable_compile` is set. Our dynamic caches grow by one position a step (their lengths are Python ints, so no
        step waits for the device), so the compiled step has dynamic shapes: after a few recompiles in the first
        steps, one graph serves every length. With `cache_implementation="static"` every step has the same shapes:
        one graph from the first compiled step. On a GPU, CUDA graphs ("reduce-overhead", `CompileConfig`'s default
        mode) then record one graph per decoded length in a first call and replay them in later calls of the same
        lengths; `CompileConfig(mode="default")` or `"max-autotune-no-cudagraphs"` compile without them."""
        if generation_config.disable_compile or generation_config.compile_config is None:
            return False
        return getattr(self, "hf_quantizer", None) is None or self.hf_quantizer.is_compileable

    def create_masks_for_generate(self, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
        """Keep the 2D decoder mask (or None): the attention families make their masks from it and the positions.

        `generate` looks this method up by name, instead of `masking_utils.create_masks_for_generate`, which would
        make 4D masks in advance for compilable (static) caches."""
        return attention_mask


__all__ = ["SimpleAttnMarianGenerationMixin", "fit_generated_length"]
