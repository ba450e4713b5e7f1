"""Export a seq2seq model as two graphs (`torch.export`, ONNX) and generate with them in ONNX Runtime.

The graphs, for any layout (`export_encoder` / `export_decoder_step`, written as ONNX by `export_onnx`):

- encoder: `input_ids`, `attention_mask` (batch, source) -> `last_hidden_state` (batch, source, d_model) and, for
  each decoder layer i with cross attention, its projected `cross.{i}.key` (batch, query/key slots, source,
  head_dim; absent for value-only heads such as hard-coded ones) and `cross.{i}.value` (batch, heads, source,
  head_dim), computed once per sentence and the same for all its beams.
- decoder step: `input_ids` (rows, 1), a token for each beam of each sentence (a sentence's beams in adjacent rows;
  rows = batch in greedy search), `position` () int64 (the number of earlier tokens), `encoder_attention_mask`
  (batch, source) and the encoder's `cross.*` tensors, once per sentence, then the decoding state `past.*` ->
  `hidden_states` (rows, d_model), the decoder's output for the token, and the next decoding state `present.*`, in
  the same order. Cross attention runs a sentence's beams as its queries over the sentence's keys and values
  (`SentenceCrossAttention`; a family that keeps a state per beam, the GMM synthesis network, gets a row per beam).
- output layer: `hidden_states` (rows, d_model) -> `logits` (rows, vocab). A graph of its own, so that decoding
  over a vocabulary shortlist skips it: with `generate(..., use_shortlist=True)` the logits of the batch's
  candidate tokens are computed from the rows of the output layer saved beside the graphs (`shortlist.safetensors`,
  written for a model that has a shortlist, with the shortlist's tables).

The decoding state (`DecoderStepForExport.past` lists it), per decoder layer i: `past.{i}.self.key` (absent for
value-only heads) and `past.{i}.self.value`, (rows, slots or heads, slots, head_dim), buffers whose slot i holds
position i, written at the step's position; and
`past.{i}.self.state.{name}` / `past.{i}.cross.state.{name}`, the running quantities a family keeps from step to
step (the GMM synthesis network's means), rows first, zeros before the first step. Before the first step every
`past.*` tensor is zeros. Beam search reorders every `past.*` tensor along the rows (of a buffer, the written slots,
or the last few where a layer's step reads only those: the graph's `past_lookback` metadata, from
`decoding_lookback`), and none of the `cross.*` ones (the same for all the beams of a sentence).

`OnnxSeq2SeqModel` runs the ONNX graphs with ONNX Runtime and decodes (greedy or beam search) exactly as
transformers' `generate` does with the PyTorch model, with or without the shortlist (whose search runs over the
batch's candidates alone: `candidate_vocabulary.py`); `TranslationPipeline(model=OnnxSeq2SeqModel(folder),
tokenizer=...)` translates text with it.
"""

import contextlib
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoTokenizer, GenerationConfig, GenerationMixin
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationMode, StoppingCriteriaList

from ..modeling.attention_heads import AttentionContext
from ..modeling.cache import SimpleAttnStaticLayer
from ..modeling.candidate_vocabulary import CandidateVocabulary, beam_fill_token
from ..modeling.configuration_simple_attn import SimpleAttnMarianConfig
from ..modeling.generation_simple_attn_marian import fit_generated_length
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from ..modeling.stack import position_limits
from ..modeling.vocab_shortlist import CandidateRows, VocabShortlist, shortlist_logits, shortlist_requested
from .onnx_decoding import (
    FIRST_CAPACITY,
    ArrayPool,
    DecodingBuffers,
    OutputLayer,
    SearchHead,
    candidate_layer_graph,
    step_bias,
    takes_processors,
    written_in_place,
)
from .onnx_sessions import inference_session
from .onnx_sessions import session_options as default_session_options
from .onnx_translation import TRANSLATIONS


ENCODER_FILE, DECODER_FILE, OUTPUT_FILE = "encoder.onnx", "decoder_with_past.onnx", "output_layer.onnx"
SHORTLIST_FILE = "shortlist.safetensors"


@dataclasses.dataclass
class PastSpec:
    """One tensor of the decoding state: its input name (`present.*` as output), its shape without the batch
    dimension (None: the slots of a buffer), and for a buffer of which a step reads only the slots of the last few
    positions besides its own, how many (`lookback`; None: every written slot)."""

    name: str
    shape: tuple[int | None, ...]
    lookback: int | None = None


def beams_as_queries(attention) -> bool:
    """Whether the cross attention module `attention` may run a sentence's beams as its queries over the sentence's
    keys and values (`SentenceCrossAttention`): every group's family computes each query alone
    (`AttentionHeads.independent_queries`)."""
    return all(type(group).independent_queries(group.spec) for group in attention.heads.groups)


def cross_attention_names(model) -> list[tuple[int, str | None, str]]:
    """(layer index, key name or None, value name) of every decoder layer with cross attention."""
    names = []
    for index, layer in enumerate(model.get_decoder().layers):
        if layer.encoder_attn is not None:
            key_name = f"cross.{index}.key" if layer.encoder_attn.heads.query_key_slots else None
            names.append((index, key_name, f"cross.{index}.value"))
    return names


class EncoderForExport(nn.Module):
    """The encoder graph: `input_ids`, `attention_mask` -> `last_hidden_state`, then the `cross.*` keys and values."""

    input_names = ["input_ids", "attention_mask"]

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()
        names = cross_attention_names(model)
        self.cross_attentions = nn.ModuleList(model.get_decoder().layers[index].encoder_attn for index, _, _ in names)
        self.output_names = ["last_hidden_state"] + [name for _, *pair in names for name in pair if name]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        outputs = [hidden_states]
        key_padding_mask = attention_mask.bool()
        for attention in self.cross_attentions:
            key, value = attention.project_cross_keys_values(hidden_states, key_padding_mask)
            outputs += [key, value] if attention.heads.query_key_slots else [value]
        return tuple(outputs)


class StepCacheLayer(SimpleAttnStaticLayer):
    """A static cache layer over tensors given to the decoder step graph: self attention's buffers of `capacity`
    slots, written at `position` (a 0-d tensor: the number of earlier tokens), or cross attention's keys and values.

    A step writes its one position by indexing every row and head (`index_put`), which becomes an ONNX `ScatterND`
    whose input is the buffer itself: ONNX Runtime then writes the position in place when the engine binds the
    graph's output to the input's memory (`index_copy_` along the slots, what `SimpleAttnStaticLayer.update` uses,
    exports as transposes of the whole buffer, and `scatter` as a `ScatterElements` 25x slower than `ScatterND`)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, position, states: dict, beam_invariant: bool):
        super().__init__(values.shape[2], beam_invariant)
        self.keys, self.values, self.states = keys, values, states
        self.dtype, self.device = values.dtype, values.device
        self.cumulative_length = position  # `is_initialized` is set once the cache holding the layer is built

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.beam_invariant:
            return self.keys, self.values
        if self.values.shape[1]:
            self.values = self.write_position(self.values, value_states)
        self.keys = self.write_position(self.keys, key_states) if self.keys.shape[1] else self.values[:, :0]
        self.cumulative_length = self.cumulative_length + value_states.shape[2]
        return self.keys, self.values

    def write_position(self, buffer: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """`buffer` (batch, heads, slots, head_dim) with `states` (batch, heads, 1, head_dim) at the position."""
        rows = torch.arange(buffer.shape[0], device=buffer.device).view(-1, 1, 1)
        heads = torch.arange(buffer.shape[1], device=buffer.device).view(1, -1, 1)
        return buffer.index_put((rows, heads, self.cumulative_length.view(1, 1, 1)), states)


class SentenceCrossAttention(nn.Module):
    """A decoder layer's cross attention in the decoder step graph, whose keys, values and padding mask come once per
    sentence while the step has a row per beam (the beams of a sentence in adjacent rows; `beams` = rows //
    sentences, 1 in greedy search).

    With `beams_as_queries`, the hidden states (sentences x beams, 1, d_model) become (sentences, beams, d_model) and
    the attention runs with the beams as its queries, all at the step's position: one product per sentence and head
    with a row per beam, over keys and values that a row per beam would repeat `beams` times. Otherwise (a family
    that keeps a state per beam, or computes its queries together) each beam is a row of its own: the padding mask is
    repeated here for each beam, the keys and values when the step builds its cache (`DecoderStepForExport`)."""

    def __init__(self, attention, beams_as_queries: bool):
        super().__init__()
        self.attention, self.beams_as_queries = attention, beams_as_queries

    def forward(
        self,
        hidden_states: torch.Tensor,
        context: AttentionContext,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        rows, _, d_model = hidden_states.shape
        key_padding_mask = context.key_padding_mask  # (sentences, source)
        positions = context.query_positions  # (1,): the step's position
        if self.beams_as_queries:
            hidden_states = hidden_states.view(key_padding_mask.shape[0], -1, d_model)  # (sentences, beams, d_model)
            beams = hidden_states.shape[1]
            context = dataclasses.replace(
                context, query_length=beams, shared_tensors={("positions",): positions.expand(beams)}
            )
        else:
            key_padding_mask = beam_rows(key_padding_mask, rows)
            context = dataclasses.replace(
                context, key_padding_mask=key_padding_mask, shared_tensors={("positions",): positions}
            )
        output, weights = self.attention(hidden_states, context, key_value_states, cache, output_attentions)
        return output.reshape(rows, 1, d_model), weights


def beam_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """`tensor` (sentences, ...) with each sentence's row repeated for its beams: (rows, ...)."""
    beams = rows // tensor.shape[0]
    return tensor[:, None].expand(tensor.shape[0], beams, *tensor.shape[1:]).reshape(rows, *tensor.shape[1:])


class DecoderStepForExport(nn.Module):
    """The decoder step graph (see the module docstring): one token per row (a row per beam of each sentence) at
    `position`, the decoding state in and out, as a static cache holds it (`SimpleAttnStaticLayer`: every layer's
    buffers have the same slots).

    The layout of the state comes from the model: the self-attention buffers of each layer (keys only where heads
    score them) and the states its families keep, read from one eager step (a state's shape must not depend on the
    lengths).
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.decoder = model.get_decoder()
        self.cross_names = cross_attention_names(model)
        states = self.probe_states()
        self.past = []
        for index, layer in enumerate(self.decoder.layers):
            if layer.self_attn is not None:
                heads = layer.self_attn.heads
                prefix = f"past.{index}.self."
                lookback = heads.decoding_lookback(model.dtype)
                if heads.query_key_slots:
                    self.past.append(PastSpec(prefix + "key", (heads.query_key_slots, None, heads.head_dim), lookback))
                self.past.append(PastSpec(prefix + "value", (heads.num_heads, None, heads.head_dim), lookback))
            for site in ("self", "cross"):
                for name, shape in sorted(states[site][index].items()):
                    self.past.append(PastSpec(f"past.{index}.{site}.state.{name}", shape))
        # Plain containers: the wrapped modules are the model's, registered there.
        layers = list(self.decoder.layers)
        self.cross_attentions = {
            index: SentenceCrossAttention(
                layers[index].encoder_attn,
                beams_as_queries(layers[index].encoder_attn) and not states["cross"][index],
            )
            for index, _, _ in self.cross_names
        }
        self.cross_swaps = [
            (layers[index], layers[index].encoder_attn, wrapper) for index, wrapper in self.cross_attentions.items()
        ]
        cross = [name for _, *pair in self.cross_names for name in pair if name]
        self.input_names = ["input_ids", "position", "encoder_attention_mask", *cross]
        self.input_names += [spec.name for spec in self.past]
        self.output_names = ["hidden_states"] + ["present" + spec.name[len("past") :] for spec in self.past]

    @torch.no_grad()
    def probe_states(self) -> dict[str, list[dict[str, tuple[int, ...]]]]:
        """{"self" | "cross": [{state name: shape without the batch}, one per layer]} after one eager step."""
        config, device = self.model.config, self.model.device
        cache = self.model(
            input_ids=torch.full((1, 2), config.eos_token_id, device=device),
            decoder_input_ids=torch.full((1, 1), config.decoder_start_token_id, device=device),
            use_cache=True,
        ).cache
        return {
            site: [{name: tuple(state.shape[1:]) for name, state in layer.states.items()} for layer in layers.layers]
            for site, layers in (("self", cache.self_attention_cache), ("cross", cache.cross_attention_cache))
        }

    def forward(
        self,
        input_ids: torch.Tensor,
        position: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        *tensors: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        named = dict(zip(self.input_names[3:], tensors))
        rows, num_layers = input_ids.shape[0], self.model.config.decoder_layers
        slots = next((named[spec.name].shape[2] for spec in self.past if None in spec.shape), 1)
        self_layers, cross_layers = [], []
        for index in range(num_layers):
            values = named.get(f"past.{index}.self.value")
            if values is None:  # no self attention: the layer only counts the positions
                values = input_ids.new_zeros(rows, 0, slots, 0, dtype=self.model.dtype)
            keys = named.get(f"past.{index}.self.key", values[:, :0])
            states = self.named_states(named, f"past.{index}.self.state.")
            self_layers.append(StepCacheLayer(keys, values, position.clone(), states, beam_invariant=False))
            values = named.get(f"cross.{index}.value", values[:, :, :0])
            keys = named.get(f"cross.{index}.key", values[:, :0])
            if index in self.cross_attentions and not self.cross_attentions[index].beams_as_queries:
                keys, values = beam_rows(keys, rows), beam_rows(values, rows)
            states = self.named_states(named, f"past.{index}.cross.state.")
            cross_layers.append(StepCacheLayer(keys, values, position.clone(), states, beam_invariant=True))
        # Built before its layers count as filled: `EncoderDecoderCache` reads the lengths of filled layers.
        cache = EncoderDecoderCache(Cache(layers=self_layers), Cache(layers=cross_layers))
        for layer in self_layers + cross_layers:
            layer.is_initialized = True
        for index, _, _ in self.cross_names:
            cache.is_updated[index] = True
        with self.sentence_cross_attention():
            hidden_states = self.decoder(
                input_ids=input_ids,
                # Ones as wide as the slots (the causal mask hides those not written yet): a mask with the step's rows.
                attention_mask=input_ids.new_ones(rows, slots),
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                use_cache=True,
            ).last_hidden_state
        presents = []
        for spec in self.past:
            _, index, site, field, *state_name = spec.name.split(".")
            layer = (self_layers if site == "self" else cross_layers)[int(index)]
            presents.append(layer.states[state_name[0]] if field == "state" else getattr(layer, f"{field}s"))
        return (hidden_states[:, 0], *presents)

    @contextlib.contextmanager
    def sentence_cross_attention(self):
        """The decoder's layers with their `SentenceCrossAttention` in place of their cross attention, for one
        forward. Swapped through references taken before any trace (`cross_swaps`): under `torch.export`, a module
        reached through its parent is the tracer's proxy of it, which must not stay in the model."""
        try:
            for layer, _, wrapper in self.cross_swaps:
                layer.encoder_attn = wrapper
            yield
        finally:
            for layer, attention, _ in self.cross_swaps:
                layer.encoder_attn = attention

    @staticmethod
    def named_states(named: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
        """The states under `prefix`, copied: a family writes its state in place, which must not change an input."""
        return {name[len(prefix) :]: tensor.clone() for name, tensor in named.items() if name.startswith(prefix)}


class OutputLayerForExport(nn.Module):
    """The output layer graph: the decoder's output for one token -> the logits of the whole vocabulary."""

    input_names, output_names = ["hidden_states"], ["logits"]

    def __init__(self, model):
        super().__init__()
        # Its own (d_model, vocabulary) constant: tied to the embeddings, the weight reached the graph as a transpose
        # of their table, which ONNX Runtime's int8 quantisation left in float32 (dequantised at each step).
        self.projection = nn.Buffer(model.lm_head.weight.detach().t().contiguous())
        self.bias = nn.Buffer(model.final_logits_bias.detach().clone())

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states @ self.projection + self.bias  # (batch, d_model) -> (batch, vocabulary)


def export_program(module: nn.Module, args: tuple, dynamic_shapes: tuple) -> torch.export.ExportedProgram:
    """`torch.export` without assuming sizes above 1 (`backed_size_oblivious`), so that the program also serves one
    sentence and the empty decoding state of the first step."""
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        return torch.export.export(module, args, dynamic_shapes=dynamic_shapes)


def length_dim(name: str, config, site: str, minimum: int) -> torch.export.Dim:
    """A dynamic length, at most the positions the site's learned position tables (RAN, Synthesizer) cover."""
    limits = [max_positions for _, _, max_positions in position_limits(config.attention_layout[site])]
    return torch.export.Dim(name, min=minimum, max=min(limits, default=None))


def example_source(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sentences of 7 tokens, the second padded by 2."""
    input_ids = torch.full((2, 7), model.config.eos_token_id, device=model.device)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    return input_ids, attention_mask


def export_encoder(model) -> torch.export.ExportedProgram:
    """The encoder graph of a seq2seq model in eval mode, for any batch size and sources of 2 tokens or more (the
    program's guards refuse a one-token source; the ONNX graph takes it)."""
    source = length_dim("source", model.config, "encoder_self", 2)
    batch = torch.export.Dim("batch", min=1)
    return export_program(EncoderForExport(model), example_source(model), ({0: batch, 1: source},) * 2)


def export_decoder_step(model) -> torch.export.ExportedProgram:
    """The decoder step graph of a seq2seq model in eval mode, for any number of sentences, of rows (beams) per
    sentence, 2 or more (checks of the query's rows, SDPA's among them, make the program's guards refuse one; the
    ONNX graph takes it, as greedy search runs it), sources of 2 tokens or more, and buffers of any number of slots
    up to the positions its position tables cover (the engine sizes them)."""
    step = DecoderStepForExport(model)
    input_ids, attention_mask = example_source(model)
    with torch.no_grad():
        cross = EncoderForExport(model)(input_ids, attention_mask)[1:]
    rows, slots, device = 3 * input_ids.shape[0], 6, model.device  # 3 beams a sentence
    args = (
        torch.full((rows, 1), model.config.decoder_start_token_id, device=device),
        torch.tensor(3, device=device),
        attention_mask,
        *cross,
        *(
            torch.zeros(
                rows, *(slots if size is None else size for size in spec.shape), dtype=model.dtype, device=device
            )
            for spec in step.past
        ),
    )
    batch, source = torch.export.Dim("batch", min=1), torch.export.Dim("source", min=2)
    rows = torch.export.Dim("rows", min=1)
    slots = length_dim("slots", model.config, "decoder_self", 1)
    buffers = [
        {0: rows, **{dim + 1: slots for dim, size in enumerate(spec.shape) if size is None}} for spec in step.past
    ]
    dynamic_shapes = ({0: rows}, None, {0: batch, 1: source}, (*[{0: batch, 2: source}] * len(cross), *buffers))
    return export_program(step, args, dynamic_shapes)


def export_output_layer(model) -> torch.export.ExportedProgram:
    """The output layer graph of a seq2seq model, for any batch size."""
    hidden_states = torch.zeros(2, model.config.d_model, dtype=model.dtype, device=model.device)
    return export_program(OutputLayerForExport(model), (hidden_states,), ({0: torch.export.Dim("batch", min=1)},))


def write_onnx(program: torch.export.ExportedProgram, path: Path, graph: nn.Module, opset_version: int | None) -> None:
    """One exported program as an ONNX graph (`torch.onnx.export(..., dynamo=True)`, with the translations of
    `onnx_translation`), its inputs and outputs named as the module it was exported from names them (`input_names`,
    `output_names`)."""
    torch.onnx.export(
        program,
        f=path,
        input_names=graph.input_names,
        output_names=graph.output_names,
        opset_version=opset_version,
        dynamo=True,
        custom_translation_table=TRANSLATIONS,
    )


def export_onnx(model_dir_or_model, out_dir, *, opset_version: int | None = None) -> Path:
    """Write `encoder.onnx` and `decoder_with_past.onnx` (the graphs of the module docstring, through
    `torch.onnx.export(..., dynamo=True)`), the model's config and generation config, and its tokenizer when
    `model_dir_or_model` is a folder that has one: what `OnnxSeq2SeqModel` loads. A model object is put in eval
    mode. Returns `out_dir`."""
    model, tokenizer = model_dir_or_model, None
    if isinstance(model, (str, os.PathLike)):
        model = SimpleAttnMarianMTModel.from_pretrained(model_dir_or_model)
        if any(Path(model_dir_or_model).glob("tokenizer*")):
            tokenizer = AutoTokenizer.from_pretrained(model_dir_or_model)
    model.eval()
    save_onnx(model, export_encoder(model), export_decoder_step(model), out_dir, opset_version=opset_version)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return Path(out_dir)


def save_onnx(
    model,
    encoder_program: torch.export.ExportedProgram,
    decoder_program: torch.export.ExportedProgram,
    out_dir,
    *,
    opset_version: int | None = None,
) -> None:
    """Write the programs of `export_encoder` and `export_decoder_step` of `model` as ONNX graphs, with the output
    layer's graph, the model's config and generation config, and the shortlist's file for a model that has one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    decoder_step = DecoderStepForExport(model)  # runs an eager step to read the state's layout: once
    for program, names, file_name in (
        (encoder_program, EncoderForExport(model), ENCODER_FILE),
        (decoder_program, decoder_step, DECODER_FILE),
        (export_output_layer(model), OutputLayerForExport(model), OUTPUT_FILE),
    ):
        write_onnx(program, out_dir / file_name, names, opset_version)
    mark_lookbacks(out_dir / DECODER_FILE, decoder_step.past)
    if model.shortlist is not None:
        save_shortlist(model, out_dir / SHORTLIST_FILE)
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)


def mark_lookbacks(path: Path, past: list[PastSpec]) -> None:
    """Write the buffers' `lookback`s into the decoder step graph at `path` (its `past_lookback` metadata, JSON
    {input name: positions}), for the engine's beam reordering; int8 quantisation keeps it."""
    import onnx

    lookbacks = {spec.name: spec.lookback for spec in past if spec.lookback is not None}
    graph = onnx.load(str(path), load_external_data=False)  # the weights stay in their file
    onnx.helper.set_model_props(graph, {"past_lookback": json.dumps(lookbacks, sort_keys=True)})
    onnx.save(graph, str(path))


def save_shortlist(model, path: Path) -> None:
    """The shortlist's tables and the output layer's rows and biases (float32), what decoding over the shortlist
    reads in place of the output layer graph."""
    from safetensors.torch import save_file

    tensors = {
        "candidates": model.shortlist.candidates,
        "frequent": model.shortlist.frequent,
        "output_weight": model.lm_head.weight.detach().float(),
        "output_bias": model.final_logits_bias.detach().float().reshape(-1),
    }
    save_file({name: tensor.contiguous().cpu() for name, tensor in tensors.items()}, str(path))


def save_int8_shortlist(source: Path, target: Path) -> None:
    """`save_shortlist`'s file at `source` with the output layer's rows in int8, one float32 scale per row
    (symmetric: a row's largest magnitude maps to 127), about a quarter of its size; `load_shortlist` reads both."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(source))
    output_weight = tensors.pop("output_weight")  # (vocab, d_model) float32
    row_scale = (output_weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)  # (vocab,)
    tensors["output_weight_int8"] = torch.round(output_weight / row_scale[:, None]).clamp(-127, 127).to(torch.int8)
    tensors["output_weight_scale"] = row_scale
    save_file(tensors, str(target))


def earlier_format(decoder_inputs) -> str | None:
    """What makes a decoder step graph (its session's `get_inputs()`) one of an earlier export, which the engine no
    longer runs; None for a graph of `export_decoder_step`."""
    shapes = {node.name: node.shape for node in decoder_inputs}
    if "position" not in shapes:
        return "a decoding state that grows each step"
    if shapes["input_ids"][0] == shapes["encoder_attention_mask"][0]:
        return "the encoder's keys and values repeated for each beam"
    return None


@dataclasses.dataclass
class DecodingContext:
    """What every decoding step of one `generate` call reads besides its tokens and state: the source's
    `attention_mask` and the encoder's `cross.*` outputs (a row per sentence, whatever the beams), and where the
    logits come from: the whole vocabulary (both None), the shortlist's candidates with -inf elsewhere
    (`candidate_rows`, `CandidateRows.get` of the output layer), or the candidates alone (`vocabulary`; the steps'
    tokens are then its candidate indices), whose logits an int8 folder computes in int8 (`candidate_layer`, the
    graph and the candidates' int8 rows)."""

    attention_mask: np.ndarray
    encoder_outputs: dict[str, np.ndarray]
    candidate_rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    vocabulary: CandidateVocabulary | None = None
    candidate_layer: OutputLayer | None = None

    def feeds(self) -> dict[str, np.ndarray]:
        """The decoder step's inputs that stay the same at every step."""
        return {"encoder_attention_mask": self.attention_mask, **self.encoder_outputs}


class OnnxSeq2SeqModel(GenerationMixin):
    """The graphs of `export_onnx` run by ONNX Runtime, with `generate` (greedy or beam search).

    `generate` takes `generate`'s arguments and decodes exactly as transformers' `generate` does with the PyTorch
    model: the same generation config, logits processors, stopping criteria and beam search steps (transformers'
    own), so that equal logits give equal tokens; `use_shortlist=True` decodes over the batch's candidate tokens as
    the PyTorch model does (`vocab_shortlist.py`). Sampling and the other decoding strategies are refused. The
    decoding state stays in buffers written in place and the search over the vocabulary runs in ONNX Runtime
    (`onnx_decoding.py`).
    """

    main_input_name = "input_ids"
    device = torch.device("cpu")
    first_capacity = FIRST_CAPACITY  # the slots of a call's buffers before they grow

    def __init__(self, onnx_dir, session_options=None, providers: list[str] | None = None):
        """`session_options`: ONNX Runtime's, for the graphs; by default the engines' own
        (`onnx_sessions.session_options`: worker threads that do not spin after a run; set
        `session.intra_op.allow_spinning` to "0" in yours)."""
        import onnx

        session_options = default_session_options() if session_options is None else session_options
        onnx_dir = Path(onnx_dir)
        self.onnx_dir = onnx_dir
        self.config = SimpleAttnMarianConfig.from_pretrained(onnx_dir)
        self.generation_config = GenerationConfig.from_pretrained(onnx_dir)
        self.encoder = inference_session(onnx_dir / ENCODER_FILE, session_options, providers)
        self.decoder = inference_session(onnx_dir / DECODER_FILE, session_options, providers)
        earlier = earlier_format(self.decoder.get_inputs())
        if earlier is not None:
            raise ValueError(
                f"{onnx_dir / DECODER_FILE} is a decoder step of an earlier export ({earlier}); export the model "
                "again with export_onnx"
            )
        self.written_in_place = written_in_place(onnx.load(str(onnx_dir / DECODER_FILE), load_external_data=False))
        metadata = self.decoder.get_modelmeta().custom_metadata_map
        self.lookbacks = json.loads(metadata.get("past_lookback", "{}"))  # folders from before it: every slot
        self.output_layer = inference_session(onnx_dir / OUTPUT_FILE, session_options, providers)
        self.vocab_size = self.output_layer.get_outputs()[0].shape[-1]
        self.search_head = SearchHead(session_options, providers)
        self.arrays = ArrayPool()  # a call's buffers, kept for the next call
        shortlist = load_shortlist(self.config, onnx_dir / SHORTLIST_FILE)
        self.shortlist, self.output_weight, self.output_bias, self.output_int8 = shortlist
        self.candidate_layer = None
        if self.output_int8 is not None:
            self.candidate_layer = inference_session(candidate_layer_graph(), session_options, providers)

    @classmethod
    def can_generate(cls) -> bool:
        """What transformers' pipelines ask before they call `generate`."""
        return True

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, np.ndarray]:
        """What the decoder step reads of the encoder graph's outputs: the `cross.*` keys and values, by name."""
        outputs = self.encoder.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})
        return {
            node.name: output
            for node, output in zip(self.encoder.get_outputs(), outputs)
            if node.name.startswith("cross.")
        }

    def decoding_buffers(
        self, context: DecodingContext, rows: int, max_positions: int, prefix: str = ""
    ) -> DecodingBuffers:
        """The decoder step of one call over `rows` rows of `context`, for at most `max_positions` positions (arrays
        named with `prefix` in the engine's pool)."""
        capacity = max(1, min(max_positions, self.first_capacity))
        return DecodingBuffers(
            self.decoder,
            self.written_in_place,
            self.lookbacks,
            context.feeds(),
            rows,
            capacity,
            max_positions,
            context.candidate_layer or OutputLayer(self.output_layer, self.vocab_size),
            self.arrays,
            prefix,
        )

    def step(self, buffers: DecodingBuffers, input_ids: torch.Tensor, context: DecodingContext) -> np.ndarray:
        """One decoder step for the last token of each row of `input_ids` (rows, length): float32 logits (rows,
        vocab; (rows, candidates) with `context.vocabulary`)."""
        last_tokens = input_ids[:, -1]
        if context.vocabulary is not None:
            last_tokens = context.vocabulary.to_vocabulary(last_tokens)
        hidden_states = buffers.step(last_tokens.numpy(), input_ids.shape[1] - 1)
        if context.vocabulary is not None and context.candidate_layer is None:
            return context.vocabulary.logits(torch.from_numpy(hidden_states)).float().numpy()
        if context.candidate_rows is not None:
            rows = context.candidate_rows
            return shortlist_logits(torch.from_numpy(hidden_states), rows, len(self.output_weight)).float().numpy()
        return buffers.logits()

    @torch.no_grad()
    def generate(
        self, input_ids, attention_mask=None, generation_config: GenerationConfig | None = None, **kwargs
    ) -> torch.LongTensor:
        """Token ids (batch * num_return_sequences, length), starting with the decoder start token, as transformers'
        `generate` returns them. input_ids, attention_mask: (batch, source) tensors or arrays; kwargs: generation
        options (`num_beams`, `max_new_tokens`, `length_penalty`, `use_shortlist`, ...)."""
        has_default_max_length = (
            kwargs.get("max_length") is None
            and (generation_config is None or generation_config.max_length is None)
            and self.generation_config.max_length is None
        )
        has_default_min_length = (
            kwargs.get("min_length") is None
            and (generation_config is None or generation_config.min_length is None)
            and self.generation_config.min_length is None
        )
        use_shortlist = kwargs.pop("use_shortlist", None)
        generation_config, unused = self._prepare_generation_config(generation_config, **kwargs)
        if use_shortlist is not None:
            generation_config.use_shortlist = use_shortlist
        if unused:
            raise TypeError(f"generate: unexpected arguments {sorted(unused)}")
        mode = generation_config.get_generation_mode()
        if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.BEAM_SEARCH):
            raise ValueError(f"OnnxSeq2SeqModel.generate runs greedy and beam search, not {mode.value}")
        input_ids = torch.as_tensor(input_ids, dtype=torch.long)
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else torch.as_tensor(attention_mask)
        attention_mask = attention_mask.to(torch.long)
        batch_size = input_ids.shape[0]
        self._prepare_special_tokens(generation_config, True, device=self.device, batch_size=batch_size)
        generation_config = self._prepare_generated_length(
            generation_config, has_default_max_length, has_default_min_length, "input_ids", 1, input_ids
        )
        generation_config = fit_generated_length(self.config, generation_config, has_default_max_length, 1)
        fill_token = beam_fill_token(generation_config)
        candidate_rows = vocabulary = None
        if shortlist_requested(generation_config, self.shortlist):
            candidates = self.shortlist.batch_mask(input_ids, attention_mask)
            candidate_rows = CandidateRows().get(candidates, self.output_weight, self.output_bias)
            vocabulary = CandidateVocabulary(*candidate_rows, len(self.output_weight))
            search_config = vocabulary.search_config(generation_config, self)
            if search_config is None:
                vocabulary = None
            else:
                generation_config, candidate_rows = search_config, None
                fill_token = int(vocabulary.index[fill_token]) if fill_token >= 0 else fill_token
        logits_processor = self._get_logits_processor(
            generation_config, input_ids_seq_length=1, encoder_input_ids=input_ids, device=self.device
        )
        stopping_criteria = self._get_stopping_criteria(generation_config, StoppingCriteriaList())
        encoder_outputs = self.encode(input_ids, attention_mask)
        decoder_input_ids = torch.full((batch_size, 1), int(generation_config._decoder_start_token_tensor))
        context = DecodingContext(attention_mask.numpy(), encoder_outputs, candidate_rows, vocabulary)
        if vocabulary is not None and self.candidate_layer is not None:
            context.candidate_layer = self.int8_candidate_layer(vocabulary)
        search_options = (generation_config, logits_processor, stopping_criteria)
        if mode == GenerationMode.BEAM_SEARCH:
            sequences = self.beam_search(decoder_input_ids, context, *search_options, fill_token)
        else:
            sequences = self.greedy_search(decoder_input_ids, context, *search_options)
        return sequences if vocabulary is None else vocabulary.to_vocabulary(sequences)

    def int8_candidate_layer(self, vocabulary: CandidateVocabulary) -> OutputLayer:
        """`candidate_layer_graph` over the candidates of `vocabulary`, with their int8 rows (an int8 folder's)."""
        weight, scale = self.output_int8
        feeds = {
            "weight": np.ascontiguousarray(weight[vocabulary.ids].numpy().T),  # (d_model, candidates)
            "scale": scale[vocabulary.ids].numpy(),
            "bias": np.ascontiguousarray(vocabulary.bias.numpy(), dtype=np.float32),
        }
        return OutputLayer(self.candidate_layer, len(vocabulary.ids), feeds)

    def first_beam_step(
        self,
        first_buffers: DecodingBuffers,
        buffers: DecodingBuffers,
        input_ids: torch.Tensor,
        context: DecodingContext,
        num_beams: int,
    ) -> np.ndarray:
        """Beam search's first step, whose beams are all the same (the prompt `input_ids` (batch, length) and an empty
        state): run once per sentence on `first_buffers`, its state copied to each beam's row of `buffers` and its
        logits repeated for the beams (an array of the pool), what a step of every beam gives."""
        logits = self.step(first_buffers, input_ids, context)
        buffers.copy_beams_from(first_buffers, num_beams)
        shape = (len(logits) * num_beams, *logits.shape[1:])
        beam_logits = self.arrays.get("first.beam_logits", shape, logits.dtype, zero=False)
        beam_logits.reshape(len(logits), num_beams, *logits.shape[1:])[...] = logits[:, None]
        return beam_logits

    def greedy_search(
        self, input_ids, context: DecodingContext, generation_config, logits_processor, stopping_criteria
    ) -> torch.LongTensor:
        """transformers' greedy `_sample` loop over the ONNX decoder step, the arg-max in the search head."""
        pad_token_id = generation_config._pad_token_tensor
        has_eos_stopping_criteria = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
        unfinished_sequences = torch.ones(input_ids.shape[0], dtype=torch.long)
        buffers = self.decoding_buffers(context, input_ids.shape[0], generation_config.max_length - 1)
        in_graph = takes_processors(logits_processor)
        while True:
            logits = self.step(buffers, input_ids, context)
            if in_graph:
                bias, replace = step_bias(logits_processor, input_ids, logits.shape[-1])
                next_tokens = torch.from_numpy(self.search_head.tokens(logits, bias, replace))
            else:
                next_tokens = torch.argmax(logits_processor(input_ids, torch.from_numpy(logits)), dim=-1)
            if has_eos_stopping_criteria:
                next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, None)
            if unfinished_sequences.max() == 0:
                return input_ids

    def top_continuations(
        self, logits: np.ndarray, input_ids, running_beam_scores, logits_processor, beams_to_keep: int, in_graph: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, indices) (batch, beams_to_keep): the best accumulated log-probabilities of each sentence's
        continuations (index = beam x vocab + token), as transformers' `_get_top_k_continuations` takes them: in the
        search head (`in_graph`: `takes_processors` of the call), or in PyTorch for logits processors it does not
        take."""
        batch_size, num_beams = running_beam_scores.shape
        if in_graph:
            bias, replace = step_bias(logits_processor, input_ids, logits.shape[-1])
            scores, indices = self.search_head.continuations(
                logits, bias, replace, running_beam_scores.numpy(), beams_to_keep
            )
            return torch.from_numpy(scores), torch.from_numpy(indices)
        log_probs = logits_processor(input_ids, nn.functional.log_softmax(torch.from_numpy(logits), dim=-1))
        log_probs = self._unflatten_beam_dim(log_probs, batch_size, num_beams) + running_beam_scores[:, :, None]
        return torch.topk(torch.reshape(log_probs, (batch_size, -1)), k=beams_to_keep)

    def continue_beams(
        self, topk_indices, vocab_size: int, running_sequences, running_beam_indices, cur_len: int, prompt_len: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequences and beam indices of the chosen continuations, as `_get_top_k_continuations` makes them."""
        batch_size, num_beams = running_sequences.shape[:2]
        topk_current_beam_indices = topk_indices // vocab_size
        topk_running_beam_indices = self._gather_beams(running_beam_indices, topk_current_beam_indices)
        topk_running_sequences = self._gather_beams(running_sequences, topk_current_beam_indices)
        topk_running_sequences[:, :, cur_len] = topk_indices % vocab_size
        batch_offset = torch.arange(batch_size).view(-1, 1) * num_beams
        topk_running_beam_indices[:, :, cur_len - prompt_len] = topk_current_beam_indices + batch_offset
        return topk_running_sequences, topk_running_beam_indices

    def beam_search(
        self,
        input_ids,
        context: DecodingContext,
        generation_config,
        logits_processor,
        stopping_criteria,
        fill_token: int,
    ) -> torch.LongTensor:
        """transformers' `_beam_search` loop (its own steps) over the ONNX decoder step, the top-k in the search head;
        the decoding state follows the selected beams, and the first step runs once per sentence (`first_beam_step`).
        `fill_token`: what follows the end of a finished hypothesis (`beam_fill_token`)."""
        num_beams, max_length = generation_config.num_beams, generation_config.max_length
        eos_token_id = generation_config._eos_token_tensor
        early_stopping, length_penalty = generation_config.early_stopping, generation_config.length_penalty
        batch_size, cur_len = input_ids.shape
        decoder_prompt_len = cur_len
        buffers = self.decoding_buffers(context, batch_size * num_beams, max_length - 1)
        first_buffers = self.decoding_buffers(context, batch_size, 1, prefix="first.")
        in_graph = takes_processors(logits_processor)

        n_eos_tokens = eos_token_id.shape[0] if eos_token_id is not None else 0
        beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams
        top_num_beam_mask = torch.cat(
            (torch.ones(num_beams, dtype=torch.bool), torch.zeros(beams_to_keep - num_beams, dtype=torch.bool))
        )
        running_sequences = torch.full((batch_size, num_beams, max_length), fill_token, dtype=torch.int64)
        running_sequences[:, :, :cur_len] = input_ids[:, None, :]
        sequences = running_sequences.clone()
        running_beam_scores = torch.zeros((batch_size, num_beams), dtype=torch.float)
        running_beam_scores[:, 1:] = -1e9
        beam_scores = torch.full((batch_size, num_beams), fill_value=-1e9, dtype=torch.float)
        is_sent_finished = torch.zeros((batch_size, num_beams), dtype=torch.bool)
        is_early_stop_heuristic_unsatisfied = torch.ones((batch_size, 1), dtype=torch.bool)
        running_beam_indices = torch.full((batch_size, num_beams, max_length - cur_len), -1, dtype=torch.int32)
        beam_indices = running_beam_indices.clone()
        while True:
            flat_running_sequences = self._flatten_beam_dim(running_sequences[:, :, :cur_len])
            if cur_len == decoder_prompt_len:
                logits = self.first_beam_step(first_buffers, buffers, input_ids, context, num_beams)
            else:
                logits = self.step(buffers, flat_running_sequences, context)
            topk_log_probs, topk_indices = self.top_continuations(
                logits, flat_running_sequences, running_beam_scores, logits_processor, beams_to_keep, in_graph
            )
            topk_running_sequences, topk_running_beam_indices = self.continue_beams(
                topk_indices, logits.shape[-1], running_sequences, running_beam_indices, cur_len, decoder_prompt_len
            )
            next_token_hits_stopping_criteria = self._unflatten_beam_dim(
                stopping_criteria(self._flatten_beam_dim(topk_running_sequences[:, :, : cur_len + 1]), None),
                batch_size,
                beams_to_keep,
            )
            running_sequences, running_beam_scores, running_beam_indices = self._get_running_beams_for_next_iteration(
                topk_log_probs=topk_log_probs,
                topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=next_token_hits_stopping_criteria,
                num_beams=num_beams,
            )
            sequences, beam_scores, beam_indices, is_sent_finished = self._update_finished_beams(
                sequences=sequences,
                topk_running_sequences=topk_running_sequences,
                beam_scores=beam_scores,
                topk_log_probs=topk_log_probs,
                beam_indices=beam_indices,
                topk_running_beam_indices=topk_running_beam_indices,
                is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
                is_sent_finished=is_sent_finished,
                next_token_hits_stopping_criteria=next_token_hits_stopping_criteria,
                top_num_beam_mask=top_num_beam_mask,
                num_beams=num_beams,
                cur_len=cur_len,
                decoder_prompt_len=decoder_prompt_len,
                length_penalty=length_penalty,
                early_stopping=early_stopping,
            )
            beam_idx = self._flatten_beam_dim(running_beam_indices[..., cur_len - decoder_prompt_len]).numpy()
            buffers.reorder(beam_idx, cur_len)
            cur_len += 1
            is_early_stop_heuristic_unsatisfied = self._check_early_stop_heuristic(
                is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
                running_beam_scores=running_beam_scores,
                beam_scores=beam_scores,
                is_sent_finished=is_sent_finished,
                cur_len=cur_len,
                max_length=max_length,
                decoder_prompt_len=decoder_prompt_len,
                early_stopping=early_stopping,
                length_penalty=length_penalty,
            )
            if not self._beam_search_has_unfinished_sequences(
                is_early_stop_heuristic_unsatisfied,
                is_sent_finished,
                next_token_hits_stopping_criteria,
                early_stopping,
            ):
                break
        num_return_sequences = generation_config.num_return_sequences
        sequences = self._flatten_beam_dim(sequences[:, :num_return_sequences, :])
        beam_indices = self._flatten_beam_dim(beam_indices[:, :num_return_sequences, :])
        return sequences[:, : decoder_prompt_len + (beam_indices + 1).bool().sum(dim=1).max()]


def load_shortlist(
    config, path: Path
) -> tuple[VocabShortlist | None, torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
    """(shortlist, output layer rows (vocab, d_model; float32, from int8 in an int8 folder), biases (vocab,), and
    in an int8 folder the rows as stored (int8 (vocab, d_model), one float32 scale per row (vocab,))) of
    `save_shortlist`'s file; Nones without one."""
    if not path.is_file():
        return None, None, None, None
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    shortlist = VocabShortlist(config)
    shortlist.candidates.copy_(tensors["candidates"])
    shortlist.frequent.copy_(tensors["frequent"])
    output_int8 = None
    if "output_weight_int8" in tensors:
        output_int8 = tensors["output_weight_int8"], tensors["output_weight_scale"]
        output_weight = output_int8[0].float() * output_int8[1][:, None]
    else:
        output_weight = tensors["output_weight"]
    return shortlist, output_weight, tensors["output_bias"], output_int8
