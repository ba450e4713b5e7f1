"""BERT-style encoders whose self-attention follows the config's attention layout.

With the `base` layout every parameter has the name and shape it has in transformers'
`BertModel` / `BertFor...` classes, so a BERT checkpoint loads and gives the same outputs.
Embeddings, pooler, feed-forward blocks and heads are transformers' own BERT modules; only the
self-attention (`encoder.layer.N.attention.self`) is built from the layout's head groups.
"""

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.models.bert.modeling_bert import (
    BertEmbeddings,
    BertIntermediate,
    BertLMPredictionHead,
    BertOnlyMLMHead,
    BertOutput,
    BertPooler,
    BertSelfOutput,
)
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils import can_return_tuple

from .attention import AttentionProjections, HeadGroups, query_key_ties
from .attention_heads import AttentionContext
from .configuration_simple_attn_bert import SimpleAttnBertConfig
from .modeling_simple_attn_common import SimpleAttnBasePreTrainedModel
from .stack import build_stack_state, check_inputs, prefixed, run_encoder_layers


class SimpleAttnBertSelfAttention(AttentionProjections):
    """BERT's `attention.self` over any mix of families, with BERT's projection names."""

    query_key_names = ("query", "key")
    value_name = "value"

    def __init__(self, config: SimpleAttnBertConfig, layer_spec: dict, layer_idx: int):
        super().__init__(HeadGroups(config, layer_spec, "encoder_self", layer_idx), config.hidden_size)

    def forward(
        self, hidden_states: torch.Tensor, context: AttentionContext, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states: (batch, len, hidden) -> (batch, len, heads * head_dim) and the weights if asked."""
        batch_size, length, _ = hidden_states.shape
        query = key = None
        if self.heads.query_slots:
            query = self.split_heads(self.query(hidden_states))  # (batch, query slots, len, head_dim)
        if self.heads.query_key_slots:
            key = self.split_heads(self.key(hidden_states))  # (batch, key slots, len, head_dim)
        value = self.split_heads(self.value(hidden_states))  # (batch, heads, len, head_dim)
        output, weights = self.heads(query, key, value, context, output_attentions)
        return output.transpose(1, 2).reshape(batch_size, length, self.inner_dim), weights


class SimpleAttnBertSelfOutput(BertSelfOutput):
    """BERT's attention output block (dense, dropout, residual LayerNorm) from the heads' width,
    which differs from `hidden_size` only when a layout sets `head_dim` or `num_heads` explicitly."""

    def __init__(self, config: SimpleAttnBertConfig, inner_dim: int):
        super().__init__(config)
        if inner_dim != config.hidden_size:
            self.dense = nn.Linear(inner_dim, config.hidden_size)


class SimpleAttnBertAttention(nn.Module):
    """BERT's `attention` block: the layout's self-attention and its output block."""

    def __init__(self, config: SimpleAttnBertConfig, layer_spec: dict, layer_idx: int):
        super().__init__()
        self.self = SimpleAttnBertSelfAttention(config, layer_spec, layer_idx)
        self.output = SimpleAttnBertSelfOutput(config, self.self.inner_dim)

    def forward(
        self, hidden_states: torch.Tensor, context: AttentionContext, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, weights = self.self(hidden_states, context, output_attentions)
        return self.output(attention_output, hidden_states), weights


class SimpleAttnBertLayer(GradientCheckpointingLayer):
    """Post-LN BERT layer; the attention block (layout spec None) or the feed-forward block
    (`encoder_ffn` false) may be absent."""

    def __init__(self, config: SimpleAttnBertConfig, layer_idx: int):
        super().__init__()
        attention_spec = config.attention_layout["encoder_self"][layer_idx]
        self.attention = None
        if attention_spec is not None:
            self.attention = SimpleAttnBertAttention(config, attention_spec, layer_idx)
        self.has_ffn = config.attention_layout["encoder_ffn"][layer_idx]
        if self.has_ffn:
            self.chunk_size_feed_forward = config.chunk_size_feed_forward
            self.intermediate = BertIntermediate(config)
            self.output = BertOutput(config)

    def feed_forward_chunk(self, attention_output: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(attention_output), attention_output)

    def forward(
        self, hidden_states: torch.Tensor, context: AttentionContext, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        weights = None
        if self.attention is not None:
            hidden_states, weights = self.attention(hidden_states, context, output_attentions)
        if self.has_ffn:
            hidden_states = apply_chunking_to_forward(
                self.feed_forward_chunk, self.chunk_size_feed_forward, 1, hidden_states
            )
        return hidden_states, weights


class SimpleAttnBertEncoder(nn.Module):
    """BERT's `encoder`: the layers, the modules their families share, and the query/key ties."""

    def __init__(self, config: SimpleAttnBertConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([SimpleAttnBertLayer(config, index) for index in range(config.num_hidden_layers)])
        self.attention_state = build_stack_state(config, ("encoder_self",))
        self.tied_query_key = query_key_ties(
            config.attention_layout["encoder_self"],
            "layer",
            "attention.self",
            SimpleAttnBertSelfAttention.query_key_names,
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutput:
        """hidden_states: (batch, len, hidden) embeddings; attention_mask: (batch, len), 1 at real tokens."""
        return run_encoder_layers(
            self.layer, hidden_states, attention_mask, self.attention_state, output_attentions, output_hidden_states
        )


class SimpleAttnBertPreTrainedModel(SimpleAttnBasePreTrainedModel):
    """BERT's weight initialisation (MLM bias, position and token type buffers) on top of the shared base."""

    config_class = SimpleAttnBertConfig
    base_model_prefix = "bert"
    _no_split_modules = ["BertEmbeddings", "SimpleAttnBertLayer"]
    _auto_map = {
        "AutoModel": "modeling_simple_attn_bert.SimpleAttnBertModel",
        "AutoModelForMaskedLM": "modeling_simple_attn_bert.SimpleAttnBertForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_simple_attn_bert.SimpleAttnBertForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_simple_attn_bert.SimpleAttnBertForTokenClassification",
    }

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            init.zeros_(module.bias)
        elif isinstance(module, BertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)


def pooler_input(sequence_output: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """What BERT's pooler reads at position 0, (batch, 1, hidden): the first token, or the mean of the real tokens.

    sequence_output: (batch, len, hidden); attention_mask: (batch, len), 1 at real tokens, or None.
    """
    if pooling == "cls":
        return sequence_output[:, :1]
    if attention_mask is None:
        return sequence_output.mean(dim=1, keepdim=True)
    token_weights = attention_mask.to(sequence_output.dtype).unsqueeze(-1)  # (batch, len, 1)
    token_counts = token_weights.sum(dim=1, keepdim=True).clamp(min=1)  # (batch, 1, 1)
    return (sequence_output * token_weights).sum(dim=1, keepdim=True) / token_counts


class SimpleAttnBertModel(SimpleAttnBertPreTrainedModel):
    """The bare encoder (embeddings, layers, optional pooler), as transformers' `BertModel`."""

    def __init__(self, config: SimpleAttnBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = SimpleAttnBertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.tied_query_key = prefixed(self.encoder.tied_query_key, "encoder.")
        self._tied_weights_keys = self.tied_query_key or None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
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
        embedding_output = self.embeddings(
            input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
        )
        encoder_outputs = self.encoder(embedding_output, attention_mask, output_attentions, output_hidden_states)
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = None
        if self.pooler is not None:
            pooled_output = self.pooler(pooler_input(sequence_output, attention_mask, self.config.classifier_pooling))
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=encoder_outputs.hidden_states,
            attentions=encoder_outputs.attentions,
        )


class SimpleAttnBertForMaskedLM(SimpleAttnBertPreTrainedModel):
    """The encoder with BERT's masked-language-modelling head, its decoder tied to the word embeddings."""

    def __init__(self, config: SimpleAttnBertConfig):
        super().__init__(config)
        self.bert = SimpleAttnBertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self._tied_weights_keys = {
            **prefixed(self.bert._tied_weights_keys or {}, "bert."),
            "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias",
        }
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        """labels: (batch, len) token ids to predict, -100 where no prediction is scored."""
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.cls(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class SimpleAttnBertForSequenceClassification(SimpleAttnBertPreTrainedModel):
    """The encoder with BERT's classification (or regression) head on the pooled output (the first token, or the
    mean of the tokens with `classifier_pooling="mean"`)."""

    def __init__(self, config: SimpleAttnBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = SimpleAttnBertModel(config)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self._tied_weights_keys = prefixed(self.bert._tied_weights_keys or {}, "bert.") or None
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        """labels: (batch,) class ids, or floats for regression (`num_labels == 1`) and multi-label problems."""
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class SimpleAttnBertForTokenClassification(SimpleAttnBertPreTrainedModel):
    """The encoder with BERT's per-token classification head."""

    def __init__(self, config: SimpleAttnBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = SimpleAttnBertModel(config, add_pooling_layer=False)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self._tied_weights_keys = prefixed(self.bert._tied_weights_keys or {}, "bert.") or None
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        """labels: (batch, len) class ids, -100 where no prediction is scored."""
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "SimpleAttnBertPreTrainedModel",
    "SimpleAttnBertModel",
    "SimpleAttnBertForMaskedLM",
    "SimpleAttnBertForSequenceClassification",
    "SimpleAttnBertForTokenClassification",
]
