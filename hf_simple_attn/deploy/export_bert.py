"""Export a BERT-style encoder as one graph (`torch.export`, ONNX) and run it with ONNX Runtime.

The graph, for any layout and head (`export_bert_program`, written as `model.onnx` by `export_bert_onnx`):
`input_ids`, `attention_mask`, `token_type_ids` (batch, length) -> what the model returns for them: `logits` for a
head ((batch, num_labels) for sequence classification, (batch, length, num_labels) for token classification,
(batch, length, vocab) for masked LM), or for the bare `SimpleAttnBertModel` `last_hidden_state` (batch, length,
hidden) and, when it has its pooler, `pooler_output` (batch, hidden). Batch and length are dynamic: any batch, and
lengths up to `max_position_embeddings` or, if fewer, the positions the layout's position tables cover (RAN,
Synthesizer), from 2 for the `torch.export` program (its guards refuse one token; the ONNX graph takes it).

`OnnxBertModel` runs `model.onnx` and returns the PyTorch model's output class (torch tensors) with its config, so
that it replaces the PyTorch model for inference.
"""

import copy
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from ..modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from ..modeling.modeling_simple_attn_bert import (
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertForTokenClassification,
    SimpleAttnBertModel,
)
from ..modeling.stack import check_inputs
from .export import export_program, length_dim, write_onnx
from .onnx_sessions import inference_session


MODEL_FILE = "model.onnx"
# Per model class name (what `config.architectures` holds): the class and the output class its forward returns.
MODEL_CLASSES = {
    model_class.__name__: (model_class, output_class)
    for model_class, output_class in (
        (SimpleAttnBertModel, BaseModelOutputWithPoolingAndCrossAttentions),
        (SimpleAttnBertForMaskedLM, MaskedLMOutput),
        (SimpleAttnBertForSequenceClassification, SequenceClassifierOutput),
        (SimpleAttnBertForTokenClassification, TokenClassifierOutput),
    )
}


def model_class_name(config: SimpleAttnBertConfig) -> str:
    """The encoder class a config was saved from (`architectures`); a `ValueError` for any other."""
    name = (config.architectures or [None])[0]
    if name not in MODEL_CLASSES:
        raise ValueError(f"architectures {config.architectures}: expected one of {', '.join(MODEL_CLASSES)}")
    return name


def length_limit(config: SimpleAttnBertConfig) -> torch.export.Dim:
    """The dynamic length: from 2 to the positions both the embeddings and the layout's position tables cover."""
    limit = length_dim("length", config, "encoder_self", 2)
    return torch.export.Dim("length", min=limit.min, max=min(limit.max, config.max_position_embeddings))


class BertForExport(nn.Module):
    """The graph of the module docstring: the model called with the three inputs, its tensors as a tuple."""

    input_names = ["input_ids", "attention_mask", "token_type_ids"]

    def __init__(self, model):
        super().__init__()
        if type(model).__name__ not in MODEL_CLASSES:
            raise ValueError(f"{type(model).__name__}: expected one of {', '.join(MODEL_CLASSES)}")
        self.model = model
        if model.base_model is not model:
            self.output_names = ["logits"]
        else:
            self.output_names = ["last_hidden_state"] + (["pooler_output"] if model.pooler is not None else [])
        self.masked_lm = isinstance(model, SimpleAttnBertForMaskedLM)
        if self.masked_lm:
            # The masked-LM output layer as its own (hidden, vocabulary) constant, as export.OutputLayerForExport:
            # tied to the embeddings, it reached the graph as a transpose of their table, left float32 by int8.
            decoder = model.cls.predictions.decoder
            self.output_projection = nn.Buffer(decoder.weight.detach().t().contiguous())
            self.output_bias = nn.Buffer(decoder.bias.detach().clone())

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        if self.masked_lm:
            outputs = self.model.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
            )
            hidden_states = self.model.cls.predictions.transform(outputs.last_hidden_state)
            return (hidden_states @ self.output_projection + self.output_bias,)  # (batch, length, vocabulary)
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return tuple(outputs[name] for name in self.output_names)


def example_inputs(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sequences of 7 tokens, the second padded by 2, one segment each."""
    input_ids = torch.arange(14, device=model.device).remainder(model.config.vocab_size).view(2, 7)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    return input_ids, attention_mask, torch.zeros_like(input_ids)


def export_bert_program(model) -> torch.export.ExportedProgram:
    """The graph of an encoder model (bare or with a head) in eval mode, with dynamic batch and length (see the
    module docstring). A model in training mode is refused: its dropout would be traced into the graph."""
    if model.training:
        raise ValueError("export_bert_program: the model is in training mode; call model.eval() first")
    dims = {0: torch.export.Dim("batch", min=1), 1: length_limit(model.config)}
    return export_program(BertForExport(model), example_inputs(model), (dims,) * 3)


def export_bert_onnx(model_dir_or_model, out_dir, *, opset_version: int | None = None) -> Path:
    """Write `model.onnx` (the graph of `export_bert_program`), the model's config and its tokenizer when
    `model_dir_or_model` is a folder that has one: what `OnnxBertModel` loads. A folder is loaded with the class its
    config's `architectures` names; a model object is put in eval mode. Returns `out_dir`."""
    model, tokenizer = model_dir_or_model, None
    if isinstance(model, (str, os.PathLike)):
        config = SimpleAttnBertConfig.from_pretrained(model_dir_or_model)
        model = MODEL_CLASSES[model_class_name(config)][0].from_pretrained(model_dir_or_model, config=config)
        if any(Path(model_dir_or_model).glob("tokenizer*")):
            tokenizer = AutoTokenizer.from_pretrained(model_dir_or_model)
    model.eval()
    save_bert_onnx(model, export_bert_program(model), out_dir, opset_version=opset_version)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return Path(out_dir)


def save_bert_onnx(model, program: torch.export.ExportedProgram, out_dir, *, opset_version: int | None = None) -> None:
    """Write the program of `export_bert_program` of `model` as `model.onnx` (`torch.onnx.export(...,
    dynamo=True)`), with the model's config, its `architectures` naming the model's class (what `OnnxBertModel`
    reads to return that class's outputs)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_onnx(program, out_dir / MODEL_FILE, BertForExport(model), opset_version)
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    config.save_pretrained(out_dir)


class OnnxBertModel:
    """`model.onnx` of `export_bert_onnx` run by ONNX Runtime, called as the PyTorch model is for inference.

    `model(input_ids, attention_mask=None, token_type_ids=None)` (tensors, arrays or lists; a tokenizer's output
    unpacked with `**`) returns the output class of the exported model (`SequenceClassifierOutput`, ...) with its
    tensors as torch tensors; `config` is the model's config (`id2label`, ...).
    """

    # What inference code reads of a model: the main input's name, and where to put the inputs (outputs are on CPU).
    main_input_name = "input_ids"
    device = torch.device("cpu")

    def __init__(self, onnx_dir, session_options=None, providers: list[str] | None = None):
        self.onnx_dir = Path(onnx_dir)
        self.config = SimpleAttnBertConfig.from_pretrained(self.onnx_dir)
        self.output_class = MODEL_CLASSES[model_class_name(self.config)][1]
        self.max_length = length_limit(self.config).max
        self.session = inference_session(self.onnx_dir / MODEL_FILE, session_options, providers)
        self.output_names = [node.name for node in self.session.get_outputs()]

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None):
        return self.forward(input_ids, attention_mask, token_type_ids)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """input_ids, attention_mask (1 at real tokens; all ones if None), token_type_ids (zeros if None): (batch,
        length). A `ValueError` for masks of another shape and lengths beyond the graph's (`max_length`)."""
        input_ids = torch.as_tensor(input_ids, dtype=torch.long)
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else torch.as_tensor(attention_mask)
        token_type_ids = torch.zeros_like(input_ids) if token_type_ids is None else torch.as_tensor(token_type_ids)
        check_inputs(input_ids, "input_ids", attention_mask, "attention_mask")
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids has shape {tuple(token_type_ids.shape)}; expected that of input_ids, "
                f"{tuple(input_ids.shape)}"
            )
        if input_ids.shape[1] > self.max_length:
            raise ValueError(
                f"input_ids has {input_ids.shape[1]} positions; this model takes at most {self.max_length}"
            )
        feeds = {
            "input_ids": input_ids.numpy(),
            "attention_mask": attention_mask.to(torch.long).numpy(),
            "token_type_ids": token_type_ids.to(torch.long).numpy(),
        }
        outputs = self.session.run(None, feeds)
        return self.output_class(
            **{name: torch.from_numpy(output) for name, output in zip(self.output_names, outputs)}
        )
