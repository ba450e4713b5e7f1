"""The ONNX engine's decoding step: the decoding state in buffers written in place, and the search inside graphs.

`DecodingBuffers` holds one `generate` call's decoding state as the PyTorch static caches do (`SimpleAttnStaticLayer`):
self-attention buffers of `capacity` slots, allocated once (and kept for the next call of the same shapes,
`ArrayPool`) and written by the decoder step graph at the step's position. The graph's inputs and outputs are bound
once (ONNX Runtime I/O binding of `OrtValue`s over these arrays): a buffer whose only reader in the graph is the
write of the new position (`ScatterND`, see `export.StepCacheLayer`) is both the graph's input and its output, so
ONNX Runtime writes one position into it and copies nothing; any other state (a family's running means) has two
buffers that swap roles after each step. Beam search reorders rows inside the buffers; a call longer than the
capacity doubles it (attention reads every slot, so the buffers start at the call's length, at most
`FIRST_CAPACITY` slots).

`SearchHead` keeps the vocabulary inside ONNX Runtime: a small graph takes a step's logits and returns, for beam
search, the best `2 x beams` continuations of each sentence (log-softmax, the logits processors, each row's top-k,
the beams' scores, the sentence's top-k: transformers' beam search step) and, for greedy search with processors,
each row's token (without processors, one PyTorch arg-max over the logits' array does it). The processors enter as
one row of biases for the step (`step_bias`), which is exact for those that mask or force tokens by the step's
length alone (`takes_processors`); a call with any other processor searches in PyTorch.
"""

import dataclasses
import threading

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from transformers.generation.logits_process import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from .onnx_sessions import inference_session


FIRST_CAPACITY = 64
ONNX_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
WRITES = ("ScatterElements", "ScatterND")


def written_in_place(model: onnx.ModelProto) -> set[str]:
    """The `past.*` inputs of a decoder step graph whose only reader (besides their shape) is a scatter whose output
    is the matching `present.*`: binding both to one buffer makes ONNX Runtime write the new position into it and
    copy nothing."""
    readers = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    aliased = set()
    for graph_input in model.graph.input:
        name = graph_input.name
        nodes = [node for node in readers.get(name, []) if node.op_type != "Shape"]  # a shape is not the content
        if name.startswith("past.") and len(nodes) == 1 and nodes[0].op_type in WRITES:
            if nodes[0].input[0] == name and nodes[0].output[0] == "present" + name[len("past") :]:
                aliased.add(name)
    return aliased


class ArrayPool:
    """Arrays kept from one `generate` call to the next, one per name and thread: a call of the same shapes reuses
    the last call's memory instead of fresh pages, which the system maps at their first write (25 ms for each
    10 MB buffer at the first step of a beam-4 call at batch 64, measured: a tenth of the call)."""

    def __init__(self):
        self.local = threading.local()

    def get(self, name: str, shape, dtype, zero: bool = True) -> np.ndarray:
        """The array `name` of `shape` and `dtype`, zeros unless `zero` is False (an output the call overwrites)."""
        arrays = self.local.__dict__.setdefault("arrays", {})
        array, shape = arrays.get(name), tuple(shape)
        if array is None or array.shape != shape or array.dtype != dtype:
            array = arrays[name] = np.zeros(shape, dtype=dtype)
        elif zero:
            array.fill(0)
        return array


@dataclasses.dataclass
class OutputLayer:
    """A graph from a step's `hidden_states` (rows, d_model) to its `logits` (rows, `width`) and the arrays it takes
    besides, the same at every step of a call: the output layer graph (none), or `candidate_layer_graph` over a
    call's candidates (their int8 rows)."""

    session: object
    width: int
    feeds: dict = dataclasses.field(default_factory=dict)


def candidate_layer_graph() -> bytes:
    """The output layer over a call's candidates for an int8 folder, in int8 as its graphs' other matrix products
    (ONNX Runtime's `DynamicQuantizeMatMul`: the hidden states quantised at each step): `hidden_states` (rows,
    d_model) float32, `weight` (d_model, candidates) int8 with one `scale` per candidate (candidates,) and `bias`
    (candidates,) float32 -> `logits` (rows, candidates). 4x faster than float32 at opus-mt size (256 rows, 4,100
    candidates: 1.6 ms against 6.8 ms), a tenth of a beam-4 call."""
    value = helper.make_tensor_value_info
    inputs = [
        value("hidden_states", TensorProto.FLOAT, ["rows", "d_model"]),
        value("weight", TensorProto.INT8, ["d_model", "candidates"]),
        value("scale", TensorProto.FLOAT, ["candidates"]),
        value("bias", TensorProto.FLOAT, ["candidates"]),
    ]
    node = helper.make_node(
        "DynamicQuantizeMatMul", ["hidden_states", "weight", "scale", "", "bias"], ["logits"], domain="com.microsoft"
    )
    outputs = [value("logits", TensorProto.FLOAT, ["rows", "candidates"])]
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(helper.make_graph([node], "candidate_layer", inputs, outputs), opset_imports=opsets)
    onnx.checker.check_model(model)
    return model.SerializeToString()


class DecodingBuffers:
    """One call's decoder step, bound once (see the module docstring): `step(tokens, position)` runs the graph for
    `tokens` (rows,) at `position` (the number of earlier tokens) and returns its `hidden_states` (rows, d_model),
    the same array each step; `logits()` runs the output layer (`OutputLayer`) on it, into one (rows, width) array
    kept for the call; `reorder(beam_idx, length)` moves rows for beam search, `copy_beams_from(first, beams)` copies
    the state of a call's first step run once per sentence.

    session: the decoder step graph's `InferenceSession`; aliased: `written_in_place` of its graph; lookbacks: for a
    buffer of which a step reads only the last few slots besides its own, how many (`export.PastSpec.lookback`);
    feeds: the encoder's `encoder_attention_mask` and `cross.*` arrays, one row per sentence; capacity: the slots to
    start with; max_positions: the most positions the call decodes; output_layer: the graph `logits()` runs; prefix:
    of the names of its arrays in `pool`, for a second set in one call."""

    def __init__(
        self,
        session,
        aliased: set[str],
        lookbacks: dict[str, int],
        feeds: dict,
        rows: int,
        capacity: int,
        max_positions: int,
        output_layer: OutputLayer,
        pool: ArrayPool,
        prefix: str = "",
    ):
        self.session, self.aliased, self.lookbacks = session, aliased, lookbacks
        self.rows, self.max_positions = rows, max_positions
        self.output_layer, self.output_binding, self.output_logits = output_layer, None, None
        self.pool, self.prefix = pool, prefix
        self.input_ids = self.array("input_ids", (rows, 1), np.int64)
        self.position = self.array("position", (), np.int64)
        output = session.get_outputs()[0]
        self.hidden_states = self.array(
            "hidden_states", (rows, output.shape[-1]), ONNX_DTYPES[output.type], zero=False
        )
        self.feeds = feeds
        self.past_nodes = [node for node in session.get_inputs() if node.name.startswith("past.")]
        # The buffers with slots (self attention's keys and values); the others are a family's fixed-size states.
        self.slotted = {
            node.name for node in self.past_nodes if not all(isinstance(size, int) for size in node.shape[1:])
        }
        self.past = {node.name: self.zeros(node, capacity, node.name) for node in self.past_nodes}
        self.present = {
            name: self.zeros(node, capacity, "present" + name[len("past") :])
            for node in self.past_nodes
            if (name := node.name) not in aliased
        }
        self.capacity = capacity
        self.bind()

    def array(self, name: str, shape, dtype, zero: bool = True) -> np.ndarray:
        """The pool's array `name` (under the prefix): `ArrayPool.get`."""
        return self.pool.get(self.prefix + name, shape, dtype, zero)

    def zeros(self, node, capacity: int, name: str) -> np.ndarray:
        """A zero buffer for a `past.*` input: its symbolic dimension (the slots) at `capacity`."""
        shape = [self.rows, *(size if isinstance(size, int) else capacity for size in node.shape[1:])]
        return self.array(name, shape, ONNX_DTYPES[node.type])

    def bind(self) -> None:
        """Bind every input and output to its array (an `OrtValue` over the array's memory, no copy): one binding,
        and with two-buffer states a second one for the steps after each swap, so that no step binds anew."""
        both = {**self.past, **self.present}  # the states' second buffers in place of their first
        self.bindings = [self.binding_for(self.past, both)]
        if self.present:
            self.bindings.append(self.binding_for(both, self.past))
        self.phase = 0

    def binding_for(self, inputs: dict, outputs: dict):
        """A binding reading the `past.*` arrays of `inputs` and writing the `present.*` ones into `outputs`."""
        from onnxruntime import OrtValue

        binding = self.session.io_binding()
        feeds = {"input_ids": self.input_ids, "position": self.position, **self.feeds, **inputs}
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, OrtValue.ortvalue_from_numpy(array))
        binding.bind_ortvalue_output("hidden_states", OrtValue.ortvalue_from_numpy(self.hidden_states))
        for name, array in outputs.items():
            binding.bind_ortvalue_output("present" + name[len("past") :], OrtValue.ortvalue_from_numpy(array))
        return binding

    def step(self, tokens: np.ndarray, position: int) -> np.ndarray:
        if position >= self.capacity:
            self.grow(min(2 * self.capacity, self.max_positions))
        self.input_ids[:, 0] = tokens
        self.position[...] = position
        self.session.run_with_iobinding(self.bindings[self.phase])
        if self.present:  # the states written to their second buffers are the next step's inputs
            for name in self.present:
                self.past[name], self.present[name] = self.present[name], self.past[name]
            self.phase = 1 - self.phase
        return self.hidden_states

    def logits(self) -> np.ndarray:
        """The output layer over the last step's hidden states: (rows, width), the same array each step."""
        from onnxruntime import OrtValue

        if self.output_binding is None:
            session = self.output_layer.session
            dtype = ONNX_DTYPES[session.get_outputs()[0].type]
            self.output_logits = self.array("logits", (self.rows, self.output_layer.width), dtype, zero=False)
            self.output_binding = session.io_binding()
            feeds = {"hidden_states": self.hidden_states, **self.output_layer.feeds}
            for name, array in feeds.items():
                self.output_binding.bind_ortvalue_input(name, OrtValue.ortvalue_from_numpy(array))
            self.output_binding.bind_ortvalue_output("logits", OrtValue.ortvalue_from_numpy(self.output_logits))
        self.output_layer.session.run_with_iobinding(self.output_binding)
        return self.output_logits

    def grow(self, capacity: int) -> None:
        """Buffers of `capacity` slots holding the current ones' positions."""
        for node in self.past_nodes:
            for prefix, buffers in (("past", self.past), ("present", self.present)):
                if node.name in buffers and node.name in self.slotted:
                    grown = self.zeros(node, capacity, prefix + node.name[len("past") :])
                    grown[:, :, : self.capacity] = buffers[node.name]
                    buffers[node.name] = grown
        self.capacity = capacity
        self.bind()

    def reorder(self, beam_idx: np.ndarray, length: int) -> None:
        """Row i becomes the old row `beam_idx[i]`, in place, for the rows whose beam changed: of the self-attention
        buffers the `length` slots written, or the last `lookbacks[name]` of them where the next steps read no
        others, the whole of a state."""
        moved = np.flatnonzero(beam_idx != np.arange(len(beam_idx)))
        if not len(moved):
            return
        sources, moved = torch.from_numpy(beam_idx[moved]), torch.from_numpy(moved)
        for name, buffer in self.past.items():
            rows = torch.from_numpy(buffer)  # the buffer's memory: PyTorch's gather and scatter use both cores
            if name in self.slotted:
                rows = rows[:, :, max(0, length - self.lookbacks.get(name, length)) : length]
            rows.index_copy_(0, moved, rows.index_select(0, sources))

    def copy_beams_from(self, first: "DecodingBuffers", beams: int) -> None:
        """The state that `first`, a row per sentence, holds after the call's first step, in each of the sentence's
        `beams` rows here (the sentence's beams in adjacent rows): the slots `first` has, the whole of a state."""
        for name, buffer in self.past.items():
            source = first.past[name]
            by_sentence = buffer.reshape(len(source), beams, *buffer.shape[1:])  # a view: the buffer is contiguous
            if name in self.slotted:
                by_sentence[:, :, :, : first.capacity] = source[:, None]
            else:
                by_sentence[...] = source[:, None]


# Processors whose effect on a step's scores depends on the step's length alone: each either adds a bias to some
# tokens (-inf masks them) or, at its step, replaces every score (forcing a token).
LENGTH_ONLY_PROCESSORS = (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    SuppressTokensLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
)


def takes_processors(logits_processor: LogitsProcessorList) -> bool:
    """Whether `step_bias` computes this list's effect exactly: length-only processors and biases of single tokens
    (`bad_words_ids` of one token each, `sequence_bias` of one-token sequences)."""
    for processor in logits_processor:
        if isinstance(processor, SequenceBiasLogitsProcessor):
            if any(len(sequence) != 1 for sequence in processor.sequence_bias):
                return False
        elif not isinstance(processor, LENGTH_ONLY_PROCESSORS):
            return False
    return True


def step_bias(logits_processor: LogitsProcessorList, input_ids: torch.Tensor, vocab_size: int):
    """(bias (1, vocab) float32, replace () bool) for this step of `input_ids` (rows, length): the processors map
    scores s to s + bias, or, where `replace`, to bias itself (a forced token). Found by processing two constant
    rows: a list that replaced the scores gives the same row for both. (None, False) without processors."""
    if not logits_processor:
        return None, np.array(False)
    zeros = torch.zeros(1, vocab_size)
    bias = logits_processor(input_ids[:1], zeros.clone())
    replace = torch.equal(logits_processor(input_ids[:1], zeros - 1.0), bias)
    return bias.numpy(), np.array(replace)


def head_graph(beam: bool, biased: bool) -> bytes:
    """A search head (see the module docstring). Inputs: `logits` (rows, vocab); when `biased`, the processors'
    `bias` (1, vocab) and `replace` () bool; for beam search also `beam_scores` (batch, beams) and `keep` (1,)
    int64. Outputs: `tokens` (rows,) int64, the arg-max of the processed logits; or `scores`, `indices` (batch,
    keep): the best accumulated log-probabilities of each sentence over its beams x vocab continuations (index =
    beam x vocab + token), in transformers' order (ties: the lower index first).

    Beam search takes each row's best `keep` first, then the best `keep` of a sentence's rows: the sentence's best
    are among its rows' best, and only (rows, keep) values get the beams' scores, not the whole vocabulary."""
    value = helper.make_tensor_value_info
    inputs = [value("logits", TensorProto.FLOAT, ["rows", "vocab"])]
    if biased:
        inputs += [value("bias", TensorProto.FLOAT, [1, "vocab"]), value("replace", TensorProto.BOOL, [])]
    scores = "logits"
    nodes = []
    if beam:
        nodes.append(helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1))
        scores = "log_probs"
    if biased:
        nodes += [
            helper.make_node("Add", [scores, "bias"], ["biased"]),
            helper.make_node("Where", ["replace", "bias", "biased"], ["processed"]),
        ]
        scores = "processed"
    if not beam:
        nodes.append(helper.make_node("ArgMax", [scores], ["tokens"], axis=-1, keepdims=0))
        outputs = [value("tokens", TensorProto.INT64, ["rows"])]
    else:
        inputs += [value("beam_scores", TensorProto.FLOAT, ["batch", "beams"]), value("keep", TensorProto.INT64, [1])]
        nodes += [
            helper.make_node("Shape", ["logits"], ["vocab"], start=1, end=2),
            helper.make_node("Min", ["keep", "vocab"], ["row_keep"]),
            helper.make_node("TopK", [scores, "row_keep"], ["row_best", "row_tokens"], axis=-1),
            helper.make_node("Constant", [], ["column"], value_ints=[-1, 1]),
            helper.make_node("Reshape", ["beam_scores", "column"], ["row_scores"]),
            helper.make_node("Add", ["row_best", "row_scores"], ["accumulated"]),
            helper.make_node("Shape", ["beam_scores"], ["batch"], end=1),
            helper.make_node("Constant", [], ["rest"], value_ints=[-1]),
            helper.make_node("Concat", ["batch", "rest"], ["per_sentence"], axis=0),
            helper.make_node("Reshape", ["accumulated", "per_sentence"], ["sentences"]),
            helper.make_node("Reshape", ["row_tokens", "per_sentence"], ["sentence_tokens"]),
            helper.make_node("TopK", ["sentences", "keep"], ["scores", "positions"], axis=-1),
            helper.make_node("GatherElements", ["sentence_tokens", "positions"], ["tokens"], axis=1),
            helper.make_node("Div", ["positions", "row_keep"], ["beam"]),
            helper.make_node("Mul", ["beam", "vocab"], ["beam_start"]),
            helper.make_node("Add", ["beam_start", "tokens"], ["indices"]),
        ]
        outputs = [
            value("scores", TensorProto.FLOAT, ["batch", "keep"]),
            value("indices", TensorProto.INT64, ["batch", "keep"]),
        ]
    name = f"{'beam' if beam else 'greedy'}_head{'_biased' if biased else ''}"
    model = helper.make_model(
        helper.make_graph(nodes, name, inputs, outputs), opset_imports=[helper.make_opsetid("", 18)]
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


class SearchHead:
    """The greedy and beam search heads of one engine: `tokens(logits, bias, replace)` -> (rows,) int64;
    `continuations(logits, bias, replace, beam_scores, keep)` -> (scores, indices), (batch, keep) each. A step
    whose processors change nothing (no bias, or a zero one) runs the heads without the bias, two passes over the
    vocabulary fewer; greedy search's is then one arg-max, PyTorch's."""

    def __init__(self, session_options, providers: list[str]):
        self.sessions = {
            (beam, biased): inference_session(head_graph(beam, biased), session_options, providers)
            for beam, biased in ((False, True), (True, False), (True, True))
        }

    @staticmethod
    def biased(bias: np.ndarray | None, replace: np.ndarray) -> bool:
        """Whether the processors change this step's scores."""
        return bias is not None and (bool(replace) or bool(bias.any()))

    def run(self, beam: bool, feeds: dict, bias: np.ndarray | None, replace: np.ndarray) -> list[np.ndarray]:
        biased = self.biased(bias, replace)
        if biased:
            feeds = {**feeds, "bias": bias, "replace": replace}
        return self.sessions[beam, biased].run(None, feeds)

    def tokens(self, logits: np.ndarray, bias: np.ndarray | None, replace: np.ndarray) -> np.ndarray:
        if not self.biased(bias, replace):  # one arg-max: PyTorch's, without a graph's call
            return torch.from_numpy(logits).argmax(dim=-1).numpy()
        (tokens,) = self.run(False, {"logits": logits}, bias, replace)
        return tokens

    def continuations(
        self, logits: np.ndarray, bias: np.ndarray, replace: np.ndarray, beam_scores: np.ndarray, keep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        feeds = {"logits": logits, "beam_scores": beam_scores, "keep": np.array([keep], dtype=np.int64)}
        scores, indices = self.run(True, feeds, bias, replace)
        return scores, indices


__all__ = [
    "ArrayPool",
    "DecodingBuffers",
    "OutputLayer",
    "SearchHead",
    "candidate_layer_graph",
    "step_bias",
    "takes_processors",
    "written_in_place",
]
