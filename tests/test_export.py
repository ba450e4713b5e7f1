"""Every seq2seq preset exports under `torch.export` (the encoder, and the decoder step with its decoding state) and
the programs compute what eager PyTorch computes; representative presets go through ONNX and ONNX Runtime and
generate the same tokens as `generate`."""

import functools
import importlib.util
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from hf_simple_attn import SimpleAttnMarianConfig, TranslationPipeline, list_presets
from hf_simple_attn.deploy.export import (
    DECODER_FILE,
    SHORTLIST_FILE,
    DecoderStepForExport,
    DecodingContext,
    EncoderForExport,
    OnnxSeq2SeqModel,
    OutputLayerForExport,
    beam_rows,
    export_decoder_step,
    export_encoder,
    export_onnx,
    save_onnx,
)
from hf_simple_attn.deploy.onnx_decoding import candidate_layer_graph
from hf_simple_attn.deploy.onnx_sessions import inference_session
from hf_simple_attn.deploy.quantize import quantize_onnx_int8
from hf_simple_attn.modeling.attention import SimpleAttention
from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES
from hf_simple_attn.modeling.candidate_vocabulary import CandidateVocabulary
from hf_simple_attn.modeling.vocab_shortlist import CandidateRows

from conftest import TINY_MARIAN, assert_same_maths, make_model, model_reductions


PAD = TINY_MARIAN["pad_token_id"]
# Two decoder layers keep the layers without cross attention of `sh-x`; one encoder layer is enough for the encoder
# families (tied projections are exercised by the output layer tied to the embeddings).
SIZES = dict(encoder_layers=1, decoder_layers=2)
ONNX_PRESETS = ["base", "hc-sa", "sh-x", "ran-all", "gmm", "hard-dec"]
ENCODER_FIELDS, DECODER_FIELDS = ("encoder_self", "encoder_ffn"), ("decoder_self", "cross", "decoder_ffn")
needs_onnxruntime = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None,
    reason="needs onnxruntime and onnxscript (the `export` extra)",
)


def presets_with_new_layers(fields: tuple[str, ...]) -> list[str]:
    """The presets (ONNX_PRESETS first) with a layer of `fields` at `SIZES` that no earlier one has: exporting these
    exports every distinct layer of every preset."""
    seen, chosen = set(), []
    for name in ONNX_PRESETS + [name for name in list_presets("seq2seq") if name not in ONNX_PRESETS]:
        layout = SimpleAttnMarianConfig.from_preset(name, **{**TINY_MARIAN, **SIZES}).attention_layout
        layers = {json.dumps([layout[field][index] for field in fields]) for index in range(len(layout[fields[0]]))}
        if not layers <= seen:
            seen |= layers
            chosen.append(name)
    return chosen


@functools.cache
def exported(preset: str, graph: str, dtype: torch.dtype = torch.float32):
    """(model, program) of `export_encoder` or `export_decoder_step` for a tiny `preset` in `dtype`, exported once."""
    model = make_model(preset, **SIZES).to(dtype)
    return model, (export_encoder if graph == "encoder" else export_decoder_step)(model)


def source_batch(batch_size: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sentences, the third (when there is one) padded after 5 tokens: other sizes than the export's."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, PAD, (batch_size, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if batch_size > 2:
        input_ids[2, 5:], attention_mask[2, 5:] = PAD, 0
    return input_ids, attention_mask


@pytest.mark.numerics
@pytest.mark.parametrize("preset", presets_with_new_layers(ENCODER_FIELDS))
def test_encoder_exports_and_equals_eager(preset):
    model, program = exported(preset, "encoder", torch.float64)
    program = program.module()
    encoder = EncoderForExport(model)
    reductions = model_reductions(model.config)
    for batch_size, length in ((3, 9), (1, 2)):
        input_ids, attention_mask = source_batch(batch_size, length)
        with torch.no_grad():
            expected = encoder(input_ids, attention_mask)
            assert_same_maths(
                expected[0],
                model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state,
                **reductions,
            )
            for output, expected_output in zip(program(input_ids, attention_mask), expected, strict=True):
                assert_same_maths(output, expected_output, **reductions)


@pytest.mark.numerics
@pytest.mark.parametrize("preset", presets_with_new_layers(DECODER_FIELDS))
def test_decoder_step_exports_and_equals_the_full_forward(preset):
    """Stepping the exported program from zero buffers, two beams a sentence with targets of their own, gives
    (through the output layer) the logits of the teacher-forced forward of each beam's row, and the same decoding
    state as the eager step (family states, one sentence included); each step writes its own position of the buffers
    and nothing else. (The program's guards refuse one beam a sentence, from checks of the query's rows: the ONNX graph
    takes it, `test_onnx_runtime_logits_and_tokens_equal_pytorch`.)"""
    model, program = exported(preset, "decoder", torch.float64)
    program = program.module()
    step, output_layer = DecoderStepForExport(model), OutputLayerForExport(model)
    reductions = model_reductions(model.config)
    for sentences, length, slots in ((3, 9, 8), (1, 2, 6)):
        input_ids, attention_mask = source_batch(sentences, length, seed=1)
        rows = 2 * sentences
        target = torch.randint(1, PAD, (rows, 6), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            full = model(
                input_ids=beam_rows(input_ids, rows),
                attention_mask=beam_rows(attention_mask, rows),
                decoder_input_ids=target,
            ).logits
            cross = EncoderForExport(model)(input_ids, attention_mask)[1:]
            past = [
                torch.zeros(rows, *(slots if size is None else size for size in spec.shape), dtype=model.dtype)
                for spec in step.past
            ]
            for position in range(target.shape[1]):
                args = (target[:, position : position + 1], torch.tensor(position), attention_mask, *cross, *past)
                hidden_states, *present = program(*args)
                eager_hidden_states, *eager_present = step(*args)
                assert_same_maths(output_layer(hidden_states), full[:, position], **reductions)
                assert_same_maths(hidden_states, eager_hidden_states, **reductions)
                for spec, before, state, eager_state in zip(step.past, past, present, eager_present, strict=True):
                    assert_same_maths(state, eager_state, **reductions)
                    if None in spec.shape:  # a buffer: only the step's slot changes
                        others = torch.ones(slots, dtype=torch.bool)
                        others[position] = False
                        assert torch.equal(state[:, :, others], before[:, :, others])
                past = present


def beam_steps(step, model, sentences: int, beams: int, slots: int = 8):
    """Decoder steps of `step` (the eager module or an exported program) over `beams` rows per sentence, each row its
    own tokens: [(hidden states, present state)] at every position, fed the encoder's outputs once per sentence."""
    input_ids, attention_mask = source_batch(sentences, 9, seed=1)
    rows = sentences * beams
    target = torch.randint(1, PAD, (rows, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cross = EncoderForExport(model)(input_ids, attention_mask)[1:]
    past = [
        torch.zeros(rows, *(slots if size is None else size for size in spec.shape), dtype=model.dtype)
        for spec in DecoderStepForExport(model).past
    ]
    outputs = []
    for position in range(target.shape[1]):
        with torch.no_grad():
            hidden_states, *past = step(
                target[:, position : position + 1], torch.tensor(position), attention_mask, *cross, *past
            )
        outputs.append((hidden_states, past))
    return outputs


def assert_same_steps(actual, expected, reductions) -> None:
    for (hidden_states, state), (expected_hidden_states, expected_state) in zip(actual, expected, strict=True):
        assert_same_maths(hidden_states, expected_hidden_states, **reductions)
        for tensor, expected_tensor in zip(state, expected_state, strict=True):
            assert_same_maths(tensor, expected_tensor, **reductions)


class BeamRowsStep:
    """A decoder step fed the encoder's outputs repeated for each beam (`beam_rows`): every beam a row of its own, as
    the PyTorch model decodes beams (the step then has one beam per sentence)."""

    def __init__(self, step: DecoderStepForExport):
        self.step = step

    def __call__(self, input_ids, position, attention_mask, *tensors):
        rows, cross_count = input_ids.shape[0], len(tensors) - len(self.step.past)
        cross = [beam_rows(tensor, rows) for tensor in tensors[:cross_count]]
        return self.step(input_ids, position, beam_rows(attention_mask, rows), *cross, *tensors[cross_count:])


@pytest.mark.numerics
@pytest.mark.parametrize(
    "kind", sorted(kind for kind, family in ATTENTION_FAMILIES.items() if "cross" in family.sites)
)
def test_every_cross_family_runs_a_sentence_beams_as_with_a_row_each(kind):
    """The decoder step takes the encoder's outputs once per sentence: cross attention with the beams as its queries
    (families that compute each query alone, `independent_queries`) or a row per beam (the others) gives each beam
    what a row of its own over repeated keys and values gives (float64, eager)."""
    model = make_model(
        layout={"cross": {"groups": [{"kind": kind, "num_heads": 2}, {"kind": "dot"}]}}, **SIZES
    ).double()
    step = DecoderStepForExport(model)
    reductions = model_reductions(model.config)
    assert_same_steps(beam_steps(step, model, 3, 4), beam_steps(BeamRowsStep(step), model, 3, 4), reductions)


@pytest.mark.numerics
@pytest.mark.parametrize("preset", presets_with_new_layers(DECODER_FIELDS))
def test_exported_decoder_step_runs_a_sentence_beams_over_its_keys_and_values_once(preset):
    """The exported program takes any number of beams per sentence (rows // sentences; 2 or more, see above) with
    the encoder's outputs once per sentence, and gives each beam what the eager step gives a row of its own."""
    model, program = exported(preset, "decoder", torch.float64)
    # The step swaps its wrappers in for the trace and the model's own modules back (not the tracer's proxies).
    assert all(type(layer.encoder_attn) in (SimpleAttention, type(None)) for layer in model.get_decoder().layers)
    step = DecoderStepForExport(model)
    reductions = model_reductions(model.config)
    for sentences, beams in ((3, 4), (1, 2)):
        expected = beam_steps(BeamRowsStep(step), model, sentences, beams)
        assert_same_steps(beam_steps(program.module(), model, sentences, beams), expected, reductions)


def test_decoding_state_layout_follows_the_families():
    """Hard-coded decoder self-attention keeps values only; GMM's synthesis network its running means; a layer
    without self attention nothing. Buffers have the slots the engine gives them (None)."""
    hard_coded = DecoderStepForExport(make_model("hc-sa", **SIZES))
    assert [(spec.name, spec.shape, spec.lookback) for spec in hard_coded.past] == [
        ("past.0.self.value", (4, None, 8), 6),  # a step reads its kernel's reach: 6 positions back in float32
        ("past.1.self.value", (4, None, 8), 6),
    ]
    assert [(spec.name, spec.shape) for spec in DecoderStepForExport(make_model("gmm-synthesis", **SIZES)).past] == [
        ("past.0.self.key", (4, None, 8)),
        ("past.0.self.value", (4, None, 8)),
        ("past.0.cross.state.group0", (4, 4)),
        ("past.1.self.key", (4, None, 8)),
        ("past.1.self.value", (4, None, 8)),
        ("past.1.cross.state.group0", (4, 4)),
    ]
    # Cross attention over each sentence's keys and values with its beams as the queries, except where a family keeps
    # a state per beam (the synthesis network's running means).
    for preset, beams_as_queries in (("base", [True, True]), ("hc-all", [True, True]), ("gmm-synthesis", [False] * 2)):
        step = DecoderStepForExport(make_model(preset, **SIZES))
        assert [wrapper.beams_as_queries for wrapper in step.cross_attentions.values()] == beams_as_queries, preset
    no_self = DecoderStepForExport(make_model("sh-x-no-sa", **SIZES))
    assert no_self.past == [] and no_self.input_names == [
        "input_ids",
        "position",
        "encoder_attention_mask",
        "cross.1.key",
        "cross.1.value",
    ]


# --- ONNX and ONNX Runtime ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    """{preset: (PyTorch model, OnnxSeq2SeqModel)}, written once per preset from the programs exported above."""
    models = {}

    def get(preset):
        if preset not in models:
            model, decoder_program = exported(preset, "decoder")
            encoder_program = exported(preset, "encoder")[1]
            onnx_dir = tmp_path_factory.mktemp(preset)
            save_onnx(model, encoder_program, decoder_program, onnx_dir)
            models[preset] = model, OnnxSeq2SeqModel(onnx_dir)
        return models[preset]

    return get


@pytest.mark.numerics
@needs_onnxruntime
@pytest.mark.parametrize("preset", ONNX_PRESETS)
def test_onnx_runtime_logits_and_tokens_equal_pytorch(preset, onnx_models):
    model, onnx_model = onnx_models(preset)
    input_ids, attention_mask = source_batch(4, 9, seed=3)
    target = torch.randint(1, PAD, (4, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target).logits
    context = DecodingContext(attention_mask.numpy(), onnx_model.encode(input_ids, attention_mask))
    buffers = onnx_model.decoding_buffers(context, 4, max_positions=target.shape[1])
    for position in range(target.shape[1]):
        logits = onnx_model.step(buffers, target[:, : position + 1], context)
        assert_same_maths(torch.from_numpy(logits), full[:, position], **model_reductions(model.config))  # float32
    for options in (
        dict(num_beams=1, max_new_tokens=12),
        dict(num_beams=4, max_new_tokens=12),
        dict(num_beams=3, max_new_tokens=8, num_return_sequences=2, length_penalty=0.6),
    ):
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
        assert torch.equal(onnx_model.generate(input_ids, attention_mask, **options), expected), options
    # Buffers smaller than the call: they grow (twice here) and decode the same.
    onnx_model.first_capacity = 3
    options = dict(num_beams=2, max_new_tokens=10, min_new_tokens=10)
    expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
    assert torch.equal(onnx_model.generate(input_ids, attention_mask, **options), expected)
    onnx_model.first_capacity = OnnxSeq2SeqModel.first_capacity
    # The graphs also take a one-token source (the `torch.export` programs do not).
    one_token = torch.tensor([[0], [0]])
    assert torch.equal(onnx_model.generate(one_token, max_new_tokens=4), model.generate(one_token, max_new_tokens=4))


@needs_onnxruntime
@pytest.mark.parametrize(
    "preset", [name for name in presets_with_new_layers(DECODER_FIELDS) if name not in ONNX_PRESETS]
)
def test_every_decoder_layer_decodes_as_generate_in_onnx_runtime(preset, onnx_models):
    """The presets whose decoder layers the ONNX_PRESETS do not have: greedy and beam search give `generate`'s
    tokens (float32), so that every layer any preset has decodes in the engine."""
    model, onnx_model = onnx_models(preset)
    input_ids, attention_mask = source_batch(4, 9, seed=3)
    for options in (dict(num_beams=1, max_new_tokens=10), dict(num_beams=4, max_new_tokens=10)):
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
        assert torch.equal(onnx_model.generate(input_ids, attention_mask, **options), expected), options


@needs_onnxruntime
def test_export_onnx_from_a_saved_folder_translates_through_the_pipeline(tmp_path, tiny_tokenizer):
    """`export_onnx` on a checkpoint folder writes what `OnnxSeq2SeqModel` and the tokenizer load, and our
    `TranslationPipeline` translates with it as with the PyTorch model."""
    model = make_model("sh-x-no-sa", **SIZES)
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    onnx_dir = export_onnx(tmp_path / "model", tmp_path / "onnx")
    sentences = ["the cat sat on the mat", "a big red car runs fast", "the dog"]
    expected = TranslationPipeline(model=model, tokenizer=tiny_tokenizer)(sentences, num_beams=3, max_new_tokens=8)
    tokenizer = AutoTokenizer.from_pretrained(onnx_dir)
    translator = TranslationPipeline(model=OnnxSeq2SeqModel(onnx_dir), tokenizer=tokenizer)
    assert translator(sentences, num_beams=3, max_new_tokens=8, batch_size=2) == expected


@needs_onnxruntime
def test_beam_reorder_moves_only_the_slots_the_next_steps_read(onnx_models):
    """The decoder step graph says which buffers a step reads only the last few slots of (`past_lookback`, from
    `decoding_lookback`: a hard-coded layer's kernel reach); beam search's reorder moves those slots of them and every
    written slot of the others."""
    assert onnx_models("base")[1].lookbacks == {}
    model, onnx_model = onnx_models("hc-sa")
    assert onnx_model.lookbacks == {spec.name: 6 for spec in DecoderStepForExport(model).past}
    input_ids, attention_mask = source_batch(2, 9, seed=3)
    context = DecodingContext(attention_mask.numpy(), onnx_model.encode(input_ids, attention_mask))
    buffers = onnx_model.decoding_buffers(context, 4, max_positions=12)
    for index, buffer in enumerate(buffers.past.values()):
        buffer[...] = index + np.arange(4, dtype=buffer.dtype)[:, None, None, None]  # row r holds r
    buffers.reorder(np.array([1, 0, 3, 3], dtype=np.int32), length=10)
    for index, buffer in enumerate(buffers.past.values()):
        rows = buffer[:, 0, :, 0] - index  # (rows, slots)
        np.testing.assert_array_equal(rows[:, 4:10], np.array([1, 0, 3, 3])[:, None].repeat(6, axis=1))
        np.testing.assert_array_equal(rows[:, :4], np.arange(4)[:, None].repeat(4, axis=1))  # never read again
        np.testing.assert_array_equal(rows[:, 10:], np.arange(4)[:, None].repeat(2, axis=1))  # not written yet


@needs_onnxruntime
def test_onnx_int8_graphs_store_int8_weights_and_stay_close_to_float32(tmp_path, onnx_models):
    onnx = pytest.importorskip("onnx")
    model, onnx_model = onnx_models("sh-x")
    int8_dir = quantize_onnx_int8(onnx_model.onnx_dir, tmp_path / "int8")
    int8_model = OnnxSeq2SeqModel(int8_dir)
    graph = onnx.load(int8_dir / "decoder_with_past.onnx")
    assert any(node.op_type == "DynamicQuantizeLinear" for node in graph.graph.node)
    assert any(weight.data_type == onnx.TensorProto.INT8 for weight in graph.graph.initializer)
    input_ids, attention_mask = source_batch(4, 9, seed=3)
    target = torch.randint(1, PAD, (4, 1), generator=torch.Generator().manual_seed(4))
    context = DecodingContext(attention_mask.numpy(), int8_model.encode(input_ids, attention_mask))
    logits = torch.from_numpy(int8_model.step(int8_model.decoding_buffers(context, 4, 1), target, context))
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target).logits[:, -1]
    assert (logits - expected).abs().max() < 0.05 * expected.abs().max()
    output = int8_model.generate(input_ids, attention_mask, num_beams=2, max_new_tokens=6)
    assert output.shape[0] == 4 and output[:, 0].eq(model.config.decoder_start_token_id).all()
    with pytest.raises(FileExistsError, match="exists"):
        quantize_onnx_int8(onnx_model.onnx_dir, int8_dir)
    with pytest.raises(FileNotFoundError, match="export_onnx first"):
        quantize_onnx_int8(tmp_path / "nothing", tmp_path / "other")
    assert not (tmp_path / "other").exists()


@needs_onnxruntime
def test_onnx_int8_computes_the_tied_output_layer_in_int8(tmp_path):
    """The output layer shares the embeddings' table; exported as the transpose of that table (too large for the
    exporter to fold: 300 x 32 entries), ONNX Runtime's quantisation left it a float32 MatMul on the dequantised
    table. It must be an int8 GEMM like every other weight."""
    onnx = pytest.importorskip("onnx")
    vocab_size = 300
    model = make_model(
        "base", vocab_size=vocab_size, pad_token_id=vocab_size - 1, decoder_start_token_id=vocab_size - 1
    )
    assert model.lm_head.weight is model.get_input_embeddings().weight
    int8_dir = quantize_onnx_int8(export_onnx(model, tmp_path / "float32"), tmp_path / "int8")
    graph = onnx.load(int8_dir / "output_layer.onnx").graph
    dequantized = {output for node in graph.node if node.op_type == "DequantizeLinear" for output in node.output}
    assert not [node.name for node in graph.node if node.op_type == "MatMul" and dequantized & set(node.input)]
    int8_weights = {tuple(weight.dims) for weight in graph.initializer if weight.data_type == onnx.TensorProto.INT8}
    assert (model.config.d_model, vocab_size) in int8_weights


@needs_onnxruntime
def test_onnx_shortlist_decodes_as_the_pytorch_shortlist(tmp_path):
    """A model with a vocabulary shortlist exports its tables and output rows; `use_shortlist=True` then gives the
    PyTorch model's logits and tokens (greedy and beam), in float32 and in the int8 folder's own graphs."""
    model = make_model("sh-x", **SIZES)
    vocab_size = model.config.vocab_size
    generator = torch.Generator().manual_seed(5)
    candidates = torch.randint(0, vocab_size - 1, (vocab_size, 2), generator=generator, dtype=torch.int32)
    model.set_vocab_shortlist(candidates, torch.arange(3, dtype=torch.int32))
    onnx_dir = export_onnx(model, tmp_path / "float32")
    onnx_model = OnnxSeq2SeqModel(onnx_dir)
    input_ids, attention_mask = source_batch(4, 9, seed=6)
    for options in (dict(num_beams=1, max_new_tokens=10), dict(num_beams=4, max_new_tokens=10)):
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, use_shortlist=True, **options)
        assert not torch.equal(expected, model.generate(input_ids=input_ids, attention_mask=attention_mask, **options))
        assert torch.equal(onnx_model.generate(input_ids, attention_mask, use_shortlist=True, **options), expected)
    allowed = candidates[input_ids[attention_mask.bool()]].flatten().tolist() + [0, 1, 2, *model.shortlist.special_ids]
    assert set(expected.flatten().tolist()) <= set(allowed)
    # Without `use_shortlist` the folder decodes over the whole vocabulary, as the PyTorch model does.
    assert torch.equal(
        onnx_model.generate(input_ids, attention_mask, max_new_tokens=10),
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10),
    )
    int8_model = OnnxSeq2SeqModel(quantize_onnx_int8(onnx_dir, tmp_path / "int8"))
    output = int8_model.generate(input_ids, attention_mask, use_shortlist=True, num_beams=2, max_new_tokens=10)
    assert set(output.flatten().tolist()) <= set(allowed)
    # The int8 folder keeps the output rows in int8 with one scale per row: each within half a step of float32.
    int8_tensors = load_file(str(tmp_path / "int8" / SHORTLIST_FILE))
    assert int8_tensors["output_weight_int8"].dtype == torch.int8 and "output_weight" not in int8_tensors
    row_step = onnx_model.output_weight.abs().amax(dim=1, keepdim=True) / 127
    assert ((int8_model.output_weight - onnx_model.output_weight).abs() <= row_step / 2 + 1e-7).all()
    assert torch.equal(int8_model.shortlist.candidates, onnx_model.shortlist.candidates)
    assert torch.equal(int8_model.output_bias, onnx_model.output_bias)
    # The int8 folder computes the candidates' logits in int8 (`candidate_layer_graph`): close to float32 over the
    # same rows, apart by the hidden states' quantisation; the float32 folder keeps float32.
    assert onnx_model.candidate_layer is None and int8_model.candidate_layer is not None
    mask = int8_model.shortlist.batch_mask(input_ids, attention_mask)
    rows = CandidateRows().get(mask, int8_model.output_weight, int8_model.output_bias)
    vocabulary = CandidateVocabulary(*rows, vocab_size)
    context = DecodingContext(attention_mask.numpy(), int8_model.encode(input_ids, attention_mask), None, vocabulary)
    context.candidate_layer = int8_model.int8_candidate_layer(vocabulary)
    buffers = int8_model.decoding_buffers(context, 4, 1)
    first_tokens = torch.zeros((4, 1), dtype=torch.long)  # candidate indices
    logits = torch.from_numpy(int8_model.step(buffers, first_tokens, context).copy())
    float_logits = vocabulary.logits(torch.from_numpy(buffers.hidden_states))
    assert logits.shape == float_logits.shape == (4, len(vocabulary.ids))
    assert not torch.equal(logits, float_logits)
    torch.testing.assert_close(logits, float_logits, rtol=0, atol=0.02 * float_logits.abs().max().item())


@needs_onnxruntime
def test_int8_candidate_layer_is_onnx_runtime_dynamic_quantisation():
    """The int8 logits of the candidates: the hidden states quantised at each step as ONNX Runtime's
    `DynamicQuantizeLinear` defines it (uint8 over [min(0, x), max(0, x)] with a zero point, ties to even), times
    the candidates' int8 rows, scaled per candidate, plus the bias; here against that definition in numpy."""
    session = inference_session(candidate_layer_graph())
    rng = np.random.default_rng(0)
    hidden_states = rng.standard_normal((5, 16), dtype=np.float32)
    weight = rng.integers(-127, 128, (16, 7), dtype=np.int8)
    scale = rng.uniform(0.001, 0.01, 7).astype(np.float32)
    bias = rng.standard_normal(7, dtype=np.float32)
    feeds = {"hidden_states": hidden_states, "weight": weight, "scale": scale, "bias": bias}
    (logits,) = session.run(None, feeds)
    low, high = min(hidden_states.min(), 0.0), max(hidden_states.max(), 0.0)
    step = np.float32((high - low) / 255)
    zero_point = np.clip(np.round(-low / step), 0, 255)
    quantised = np.clip(np.round(hidden_states / step) + zero_point, 0, 255)
    expected = (quantised - zero_point) @ weight.astype(np.float64) * step * scale + bias
    # tolerance: ONNX Runtime sums the int32 products exactly and rounds float32 twice (the scales' product, then
    # the bias), against the float64 definition: a few float32 ulps of logits of magnitude ~1-10.
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


@needs_onnxruntime
def test_engine_sessions_leave_out_the_slower_skip_layer_norm_fusion(tmp_path, onnx_models):
    """ONNX Runtime fuses each residual `Add` + `LayerNormalization` of the graphs into `SkipLayerNormalization`, a
    kernel 7x slower on the CPU: the engines' sessions (`inference_session`) leave that fusion out, where a plain
    session makes it."""
    import onnx
    import onnxruntime

    graph = onnx_models("base")[1].onnx_dir / DECODER_FILE

    def optimised_ops(open_session, name: str) -> set[str]:
        options = onnxruntime.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / name)
        open_session(graph, options)
        return {node.op_type for node in onnx.load(tmp_path / name, load_external_data=False).graph.node}

    plain = optimised_ops(lambda path, options: onnxruntime.InferenceSession(str(path), options), "plain.onnx")
    assert "SkipLayerNormalization" in plain
    engine = optimised_ops(inference_session, "engine.onnx")
    assert "SkipLayerNormalization" not in engine and "LayerNormalization" in engine


@needs_onnxruntime
def test_onnx_shortlist_searches_the_candidates_with_every_generation_option(tmp_path, monkeypatch):
    """With the shortlist, ONNX Runtime searches over the batch's candidates alone (the logits of no other token are
    made), with the generation options' token ids carried into the candidates; tokens and the fill after finished
    hypotheses equal the PyTorch model's whole-vocabulary search. An option that cannot be carried (a forced token
    outside the candidates) searches the whole vocabulary, with the same result. Token ids: pad 1 and eos 5, so
    that pad is the first candidate while beam search fills with pad (transformers fills with eos for pad id 0)."""
    model = make_model(
        "hc-sa", **SIZES, pad_token_id=1, decoder_start_token_id=1, eos_token_id=5, forced_eos_token_id=5
    )
    vocab_size = model.config.vocab_size
    generator = torch.Generator().manual_seed(7)
    candidates = torch.randint(2, vocab_size, (vocab_size, 3), generator=generator, dtype=torch.int32)
    model.set_vocab_shortlist(candidates, torch.tensor([6, 7], dtype=torch.int32))
    with torch.no_grad():
        model.final_logits_bias[0, 5] = 1.0  # some hypotheses end early, others run to the end
    onnx_model = OnnxSeq2SeqModel(export_onnx(model, tmp_path / "onnx"))
    input_ids, attention_mask = source_batch(4, 9, seed=8)
    input_ids[2, 5:] = 1
    source = dict(input_ids=input_ids, attention_mask=attention_mask, use_shortlist=True)
    frequent = model.generate(**source, max_new_tokens=12).flatten().bincount(minlength=vocab_size)
    common = [token for token in frequent.argsort(descending=True).tolist() if token not in (1, 5)][:3]

    def whole_vocabulary_logits(*args):
        raise AssertionError("searched the whole vocabulary")

    with monkeypatch.context() as patch:
        patch.setattr("hf_simple_attn.deploy.export.shortlist_logits", whole_vocabulary_logits)
        for options in (
            dict(num_beams=1, max_new_tokens=12, bad_words_ids=[[common[0]], [common[1], common[2]]]),
            dict(num_beams=1, max_new_tokens=12, min_new_tokens=6, no_repeat_ngram_size=2),
            dict(num_beams=4, max_new_tokens=12, repetition_penalty=1.5, suppress_tokens=[common[1]]),
            dict(num_beams=3, max_new_tokens=10, num_return_sequences=2, length_penalty=0.3, early_stopping=True),
        ):
            expected = model.generate(**source, **options)
            assert torch.equal(onnx_model.generate(input_ids, attention_mask, use_shortlist=True, **options), expected)
    finished_early = expected[:, -1] == 1
    assert finished_early.any() and not finished_early.all()

    outside = [
        token
        for token in range(2, vocab_size)
        if not model.shortlist.candidate_mask(input_ids, attention_mask).any(dim=0)[token]
    ][0]
    options = dict(num_beams=2, max_new_tokens=8, forced_bos_token_id=outside)
    expected = model.generate(**source, **options)
    assert expected[0, 1] == outside
    assert torch.equal(onnx_model.generate(input_ids, attention_mask, use_shortlist=True, **options), expected)


@needs_onnxruntime
def test_onnx_model_refuses_a_decoder_step_with_cross_keys_and_values_per_beam(onnx_models, tmp_path):
    """A decoder step of an earlier export took the encoder's outputs repeated for each beam (one batch dimension
    for all its inputs): the engine, which feeds them once per sentence, refuses it."""
    onnx = pytest.importorskip("onnx")
    _, onnx_model = onnx_models("base")
    folder = shutil.copytree(onnx_model.onnx_dir, tmp_path / "earlier")
    graph = onnx.load(folder / DECODER_FILE)
    inputs = {node.name: node.type.tensor_type.shape.dim for node in graph.graph.input}
    for name in ["encoder_attention_mask"] + [name for name in inputs if name.startswith("cross.")]:
        inputs[name][0].dim_param = inputs["input_ids"][0].dim_param
    onnx.save(graph, folder / DECODER_FILE)
    with pytest.raises(ValueError, match=r"earlier export \(the encoder's keys and values repeated for each beam\)"):
        OnnxSeq2SeqModel(folder)


@needs_onnxruntime
def test_onnx_shortlist_needs_one(onnx_models):
    _, onnx_model = onnx_models("base")
    assert not (onnx_model.onnx_dir / SHORTLIST_FILE).exists()
    with pytest.raises(ValueError, match="no vocabulary shortlist"):
        onnx_model.generate(torch.tensor([[3, 4, 0]]), use_shortlist=True)
    with pytest.raises(ValueError, match="use_shortlist: expected True or False"):
        onnx_model.generate(torch.tensor([[3, 4, 0]]), use_shortlist="yes")


@needs_onnxruntime
def test_onnx_model_refuses_sampling(onnx_models):
    _, onnx_model = onnx_models("base")
    with pytest.raises(ValueError, match="greedy and beam search, not sample"):
        onnx_model.generate(torch.tensor([[3, 4, 0]]), do_sample=True)
