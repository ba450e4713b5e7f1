"""Marian-style encoder-decoder whose attention follows the config's attention layout.

With the `base` layout every parameter has the name and shape it has in transformers'
`MarianMTModel`, so a Marian checkpoint loads and gives the same logits.
"""

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding, shift_tokens_right
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .attention import SimpleAttention, query_key_ties
from .attention_heads import AttentionContext
from .cache import cache_slots, decoder_cache_for, is_static, static_attention_mask, static_positions
from .candidate_vocabulary import CandidateVocabulary
from .configuration_simple_attn import SimpleAttnMarianConfig
from .fused_cross_entropy import chunked_cross_entropy
from .generation_simple_attn_marian import SimpleAttnMarianGenerationMixin
from .modeling_simple_attn_common import SimpleAttnBasePreTrainedModel
from .stack import (
    build_stack_state,
    check_inputs,
    padding_mask_or_none,
    prefixed,
    run_encoder_layers,
    stack_forward,
)
from .vocab_shortlist import CandidateRows, VocabShortlist, resized_vocab_shortlist


class SimpleAttnMarianLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: dropout settings and the optional post-LN feed-forward block
    (built last, so parameters are in MarianMTModel's order)."""

    def __init__(self, config: SimpleAttnMarianConfig):
        super().__init__()
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def build_feed_forward(self, config: SimpleAttnMarianConfig, has_ffn: bool, ffn_dim: int) -> None:
        self.has_ffn = has_ffn
        if has_ffn:
            self.fc1 = nn.Linear(config.d_model, ffn_dim)
            self.fc2 = nn.Linear(ffn_dim, config.d_model)
            self.final_layer_norm = nn.LayerNorm(config.d_model)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        hidden_states = self.fc2(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        return self.final_layer_norm(residual + hidden_states)


class SimpleAttnMarianEncoderLayer(SimpleAttnMarianLayer):
    """Post-LN encoder layer; the self-attention or feed-forward sublayer may be absent."""

    def __init__(self, config: SimpleAttnMarianConfig, layer_idx: int):
        super().__init__(config)
        attention_spec = config.attention_layout["encoder_self"][layer_idx]
        self.self_attn = None
        if attention_spec is not None:
            self.self_attn = SimpleAttention(config, attention_spec, "encoder_self", layer_idx)
            self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.build_feed_forward(config, config.attention_layout["encoder_ffn"][layer_idx], config.encoder_ffn_dim)

    def forward(
        self, hidden_states: torch.Tensor, context: AttentionContext, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        weights = None
        if self.self_attn is not None:
            residual = hidden_states
            hidden_states, weights = self.self_attn(hidden_states, context, output_attentions=output_attentions)
            hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
            hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        if self.has_ffn:
            hidden_states = self.feed_forward(hidden_states)
        return hidden_states, weights


class SimpleAttnMarianDecoderLayer(SimpleAttnMarianLayer):
    """Post-LN decoder layer: causal self-attention, cross attention, feed-forward; any may be absent."""

    def __init__(self, config: SimpleAttnMarianConfig, layer_idx: int):
        super().__init__(config)
        self.layer_idx = layer_idx
        self_spec = config.attention_layout["decoder_self"][layer_idx]
        cross_spec = config.attention_layout["cross"][layer_idx]
        self.self_attn = self.encoder_attn = None
        if self_spec is not None:
            self.self_attn = SimpleAttention(config, self_spec, "decoder_self", layer_idx)
            self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        if cross_spec is not None:
            self.encoder_attn = SimpleAttention(config, cross_spec, "cross", layer_idx)
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.build_feed_forward(config, config.attention_layout["decoder_ffn"][layer_idx], config.decoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        self_context: AttentionContext,
        encoder_hidden_states: torch.Tensor,
        cross_context: AttentionContext,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        self_weights = cross_weights = None
        if self.self_attn is not None:
            residual = hidden_states
            hidden_states, self_weights = self.self_attn(
                hidden_states, self_context, cache=cache, output_attentions=output_attentions
            )
            hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
            hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        elif cache is not None:
            # No self-attention here: cache empty states so the cache still counts the positions.
            empty = hidden_states[:, None, :, :0][:, :0]  # (batch, 0, q_len, 0): a view, nothing allocated
            cache.self_attention_cache.update(empty, empty, self.layer_idx, **self_context.cache_update_kwargs())
        if self.encoder_attn is not None:
            residual = hidden_states
            hidden_states, cross_weights = self.encoder_attn(
                hidden_states,
                cross_context,
                key_value_states=encoder_hidden_states,
                cache=cache,
                output_attentions=output_attentions,
            )
            hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
            hidden_states = self.encoder_attn_layer_norm(residual + hidden_states)
        if self.has_ffn:
            hidden_states = self.feed_forward(hidden_states)
        return hidden_states, self_weights, cross_weights


class SimpleAttnPreTrainedModel(SimpleAttnBasePreTrainedModel):
    """Marian's weight initialisation (sinusoidal positions, logits bias) on top of the shared base."""

    config_class = SimpleAttnMarianConfig
    base_model_prefix = "model"
    _auto_map = {
        "AutoModel": "modeling_simple_attn_marian.SimpleAttnMarianModel",
        "AutoModelForSeq2SeqLM": "modeling_simple_attn_marian.SimpleAttnMarianMTModel",
    }

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, MarianSinusoidalPositionalEmbedding):
            init.copy_(module.weight, module.create_weight())
        elif isinstance(module, SimpleAttnMarianMTModel):
            init.zeros_(module.final_logits_bias)
        elif isinstance(module, VocabShortlist):
            module.init_weights()


class SimpleAttnMarianEncoder(SimpleAttnPreTrainedModel):
    def __init__(self, config: SimpleAttnMarianConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList(
            [SimpleAttnMarianEncoderLayer(config, index) for index in range(config.encoder_layers)]
        )
        self.attention_state = build_stack_state(config, ("encoder_self",))
        self.tied_query_key = query_key_ties(
            config.attention_layout["encoder_self"], "layers", "self_attn", SimpleAttention.query_key_names
        )
        self._tied_weights_keys = self.tied_query_key or None
        self.gradient_checkpointing = False
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if input_ids is not None:
            check_inputs(input_ids, "input_ids", attention_mask, "attention_mask")
        else:
            check_inputs(inputs_embeds, "inputs_embeds", attention_mask, "attention_mask")
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        hidden_states = inputs_embeds + self.embed_positions(inputs_embeds.shape[:-1])
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)

        return run_encoder_layers(
            self.layers, hidden_states, attention_mask, self.attention_state, output_attentions, output_hidden_states
        )


class SimpleAttnMarianDecoder(SimpleAttnPreTrainedModel):
    def __init__(self, config: SimpleAttnMarianConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.decoder_vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList(
            [SimpleAttnMarianDecoderLayer(config, index) for index in range(config.decoder_layers)]
        )
        self.attention_state = build_stack_state(config, ("decoder_self", "cross"))
        self.tied_query_key = {
            **query_key_ties(
                config.attention_layout["decoder_self"], "layers", "self_attn", SimpleAttention.query_key_names
            ),
            **query_key_ties(
                config.attention_layout["cross"], "layers", "encoder_attn", SimpleAttention.query_key_names
            ),
        }
        self._tied_weights_keys = self.tied_query_key or None
        self.gradient_checkpointing = False
        self.post_init()

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of decoder_input_ids or decoder_inputs_embeds")
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache:  # ours, new or given; a cache built the transformers way is taken over (`decoder_cache_for`)
            cache = decoder_cache_for(self.config, cache)
        if not use_cache:
            cache = None
        # A static cache holds its length on the device: the positions are a tensor, never read on the host.
        static = cache is not None and is_static(cache)
        past_length = None if static else cache.get_seq_length() if cache is not None else 0
        inputs, inputs_name = (
            (input_ids, "decoder_input_ids") if input_ids is not None else (inputs_embeds, "decoder_inputs_embeds")
        )
        if static:
            check_inputs(inputs, inputs_name, None, "decoder_attention_mask")
            if attention_mask is not None:
                attention_mask = static_attention_mask(cache, attention_mask, inputs.shape[0])
        else:
            check_inputs(inputs, inputs_name, attention_mask, "decoder_attention_mask", past_length)
        if encoder_hidden_states is not None:
            check_inputs(encoder_hidden_states, "encoder_hidden_states", encoder_attention_mask, "attention_mask")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds * self.embed_scale

        query_length = inputs_embeds.shape[1]
        if static:
            query_positions = static_positions(cache, query_length, inputs_embeds.device)
        else:
            query_positions = torch.arange(past_length, past_length + query_length, device=inputs_embeds.device)
        hidden_states = inputs_embeds + self.embed_positions(inputs_embeds.shape[:-1], position_ids=query_positions)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)

        self_context, cross_context = (
            AttentionContext(
                key_padding_mask=padding_mask_or_none(mask),
                query_start=past_length,  # None with a static cache
                query_length=query_length,
                is_causal=is_causal,
                device=inputs_embeds.device,
                stack_state=self.attention_state,
                shared_tensors={("positions",): query_positions},
            )
            for mask, is_causal in ((attention_mask, True), (encoder_attention_mask, False))
        )
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self_attentions = () if output_attentions else None
        all_cross_attentions = () if output_attentions else None
        if output_attentions:
            # Weights of zero heads where a sublayer is absent, shaped as the others (what `generate`'s assisted
            # decoding splits per token).
            self_key_length = cache_slots(cache) if static else past_length + query_length
            no_self_heads = hidden_states.new_zeros(hidden_states.shape[0], 0, query_length, self_key_length)
            no_cross_heads = None
            if encoder_hidden_states is not None:
                no_cross_heads = hidden_states.new_zeros(
                    hidden_states.shape[0], 0, query_length, encoder_hidden_states.shape[1]
                )
        with stack_forward(self.layers, self.attention_state):
            for layer in self.layers:
                hidden_states, self_weights, cross_weights = layer(
                    hidden_states,
                    self_context,
                    encoder_hidden_states,
                    cross_context,
                    cache,
                    output_attentions,
                )
                if output_hidden_states:
                    all_hidden_states += (hidden_states,)
                if output_attentions:
                    all_self_attentions += (no_self_heads if layer.self_attn is None else self_weights,)
                    all_cross_attentions += (no_cross_heads if layer.encoder_attn is None else cross_weights,)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            cache=cache,
            hidden_states=all_hidden_states,
            attentions=all_self_attentions,
            cross_attentions=all_cross_attentions,
        )


def check_special_token_ids(config: SimpleAttnMarianConfig) -> None:
    """The special token ids must index the vocabulary (MarianConfig's defaults assume 58,101 entries)."""
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        token_id = getattr(config, name)
        if token_id is not None and not 0 <= token_id < config.vocab_size:
            raise ValueError(
                f"{name}: {token_id} is outside the vocabulary of vocab_size={config.vocab_size}; set it with the "
                "tokenizer's id (e.g. tokenizer.pad_token_id)"
            )


class SimpleAttnMarianModel(SimpleAttnPreTrainedModel):
    """The bare encoder-decoder, returning the decoder's last hidden states."""

    _keys_to_ignore_on_load_missing = ["encoder.embed_positions.weight", "decoder.embed_positions.weight"]

    def __init__(self, config: SimpleAttnMarianConfig):
        super().__init__(config)
        check_special_token_ids(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = SimpleAttnMarianEncoder(config)
        self.decoder = SimpleAttnMarianDecoder(config)
        tied = {
            **prefixed(self.encoder.tied_query_key, "encoder."),
            **prefixed(self.decoder.tied_query_key, "decoder."),
        }
        if config.share_encoder_decoder_embeddings:
            tied.update(
                {"decoder.embed_tokens.weight": "shared.weight", "encoder.embed_tokens.weight": "shared.weight"}
            )
        self._tied_weights_keys = tied or None
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        if self.config.share_encoder_decoder_embeddings:
            self.shared = value
            self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class SimpleAttnMarianMTModel(SimpleAttnPreTrainedModel, SimpleAttnMarianGenerationMixin):
    """The encoder-decoder with Marian's language-modelling head; translates with `generate`."""

    # `forward` smooths its loss itself when given `label_smoothing`: trainers that look for this pass it.
    accepts_label_smoothing = True

    _keys_to_ignore_on_load_missing = [
        "final_logits_bias",
        "model.encoder.embed_positions.weight",
        "model.decoder.embed_positions.weight",
    ]
    _keys_to_ignore_on_save = ["model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"]
    # A checkpoint's vocabulary shortlist is dropped when loaded with `shortlist_top_k=0`.
    _keys_to_ignore_on_load_unexpected = [r"^shortlist\."]

    def __init__(self, config: SimpleAttnMarianConfig):
        super().__init__(config)
        self.model = SimpleAttnMarianModel(config)
        target_vocab_size = config.vocab_size if config.share_encoder_decoder_embeddings else config.decoder_vocab_size
        self.final_logits_bias = nn.Buffer(torch.zeros((1, target_vocab_size)))
        self.lm_head = nn.Linear(config.d_model, target_vocab_size, bias=False)
        tied = prefixed(self.model._tied_weights_keys or {}, "model.")
        tied["lm_head.weight"] = (
            "model.shared.weight" if config.share_encoder_decoder_embeddings else "model.decoder.embed_tokens.weight"
        )
        self._tied_weights_keys = tied
        self.shortlist = VocabShortlist(config) if config.shortlist_top_k else None
        self.candidate_rows = CandidateRows()
        self.post_init()

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """With a shared vocabulary, also resize `final_logits_bias` and `config.decoder_vocab_size`, as
        `MarianMTModel` does; a vocabulary shortlist is fitted to the new sizes."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self.config.share_encoder_decoder_embeddings:
            num_tokens = embeddings.weight.shape[0]
            self.config.decoder_vocab_size = num_tokens
            self._resize_final_logits_bias(num_tokens)
        if self.shortlist is not None:
            self.shortlist = resized_vocab_shortlist(self.config, self.shortlist)
        return embeddings

    def _resize_final_logits_bias(self, new_num_tokens: int) -> None:
        """Keep the first `new_num_tokens` entries; new tokens get a zero bias."""
        old_bias = self.final_logits_bias
        missing = new_num_tokens - old_bias.shape[-1]
        if missing <= 0:
            new_bias = old_bias[:, :new_num_tokens].clone()
        else:
            new_bias = torch.cat([old_bias, old_bias.new_zeros(1, missing)], dim=1)
        self.final_logits_bias = nn.Buffer(new_bias)

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_vocab_mask: torch.BoolTensor | None = None,
        candidate_vocabulary: CandidateVocabulary | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """labels: (batch, tgt_len) target ids, -100 where nothing is scored. The loss is their summed cross-entropy
        divided by `num_items_in_batch`, by default the number of scored tokens (their mean); transformers' `Trainer`
        passes the scored tokens of all the batches it accumulates, as it does to its own models' losses.
        label_smoothing (a keyword of `kwargs`): ε of the loss, with transformers' `LabelSmoother` formula (that of
        torch's `cross_entropy`); trainers pass their `label_smoothing_factor` here instead of smoothing the logits,
        so the loss stays chunked. Not a named parameter: transformers' `Trainer` takes every parameter whose name
        holds "label" for a label input, and computes no evaluation loss when an input lacks it.
        output_vocab_mask: (rows, vocab) bool, the output tokens to compute (`generate` fills it with
        `use_shortlist=True`, see `vocab_shortlist.py`): logits of the tokens any row allows, -inf elsewhere.
        candidate_vocabulary: a search over a shortlist's candidates alone (`generate` sets it, see
        `candidate_search`): `decoder_input_ids` are candidate indices and `logits` (batch, tgt_len, candidates).
        Both come from `generate` (`generation_simple_attn_marian.py`: `shortlisted_logits` computes these logits).

        In training with labels and `config.loss_chunk_size` > 0 the loss is computed chunk by chunk together with
        its gradients (`fused_cross_entropy.py`) and `logits` is None, as with fused-loss kernels (Liger); otherwise
        (and when `lm_head` is not a plain `nn.Linear`, see `lm_head_is_plain`) `logits` is (batch, tgt_len, vocab).
        """
        label_smoothing = kwargs.pop("label_smoothing", 0.0)
        decoder_input_ids = self.shortlisted_decoder_input_ids(
            decoder_input_ids, labels, output_vocab_mask, candidate_vocabulary
        )
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = shift_tokens_right(
                    labels, self.config.pad_token_id, self.config.decoder_start_token_id
                )
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        loss = logits = None
        if labels is not None and self.training and self.config.loss_chunk_size > 0 and self.lm_head_is_plain():
            loss = chunked_cross_entropy(
                outputs.last_hidden_state,
                self.lm_head.weight,
                self.final_logits_bias[0],
                labels,
                self.config.loss_chunk_size,
                label_smoothing,
            )
        elif output_vocab_mask is not None or candidate_vocabulary is not None:
            logits = self.shortlisted_logits(outputs.last_hidden_state, output_vocab_mask, candidate_vocabulary)
        else:
            logits = self.lm_head(outputs.last_hidden_state) + self.final_logits_bias
            if labels is not None:
                loss = nn.functional.cross_entropy(
                    logits.flatten(0, 1), labels.flatten(), label_smoothing=label_smoothing, reduction="sum"
                )
        if labels is not None:
            divisor = (labels != -100).sum() if num_items_in_batch is None else num_items_in_batch
            loss = loss / torch.as_tensor(divisor, device=loss.device)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor):
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def lm_head_is_plain(self) -> bool:
        """Whether `lm_head` is a plain `nn.Linear` without hooks, whose weight the chunked loss and the shortlist's
        candidate logits may read directly. A replaced or wrapped head (an adapter such as LoRA, a quantized layer)
        or a hook on it must see its inputs, so both then go through `lm_head` itself, with the full logits."""
        head = self.lm_head
        return type(head) is nn.Linear and not (head._forward_hooks or head._forward_pre_hooks)


__all__ = [
    "SimpleAttnPreTrainedModel",
    "SimpleAttnMarianModel",
    "SimpleAttnMarianMTModel",
    "SimpleAttnMarianEncoder",
    "SimpleAttnMarianDecoder",
]
