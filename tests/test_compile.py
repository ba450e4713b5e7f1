"""Every preset compiles: no forward (training with labels, evaluation, a cached decoding step) breaks the graph
or reads a tensor's value on the host, and `torch.compile(model, fullgraph=True)` trains and decodes as eager does.

`torch._dynamo.explain` traces without compiling, so it runs over every preset, each at the fewest layers that hold
every distinct layer of its layout (tracing takes about a second a layer); the compiled steps use the
`aot_eager` backend (dynamo and AOTAutograd's forward and backward graphs, without inductor's code generation, which
takes a minute per model on the CPU) for one preset of each family. Inductor itself compiles a training run of
`training/run_translation.py --torch_compile` (tests/test_training_translation.py).
"""

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import CompileConfig

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertForSequenceClassification, SimpleAttnMarianConfig
from hf_simple_attn.modeling.presets import list_presets

from conftest import TINY_BERT, TINY_MARIAN, assert_same_maths, make_model, model_reductions, padded_bert_batch


# One preset of each family (dot, hard_coded, recurrent, random_synthesizer, local, gaussian_mixture, hard_retrieval).
FAMILY_PRESETS = ["base", "hc-all", "ran-all", "syn-r", "local-all", "gmm", "hard-dec"]


def distinct_layers(config) -> dict[str, set[str]]:
    """{site: its distinct layer specs} of a config's attention layout."""
    return {
        site: {json.dumps(spec, sort_keys=True) for spec in specs} for site, specs in config.attention_layout.items()
    }


def fewest_layers(config_class, preset: str, depth_fields: tuple[str, ...], **size) -> dict[str, int]:
    """The fewest layers a stack at which `preset` still holds every distinct layer (head groups, sharing, sublayers)
    it has at its default depth, as config overrides: the depth at which tracing it runs all of its code."""
    default_config = config_class.from_preset(preset, **size)
    all_layers = distinct_layers(default_config)
    default_depth = max(getattr(default_config, field) for field in depth_fields)
    for depth in range(1, default_depth):
        depth_overrides = dict.fromkeys(depth_fields, depth)
        if distinct_layers(config_class.from_preset(preset, **size, **depth_overrides)) == all_layers:
            return depth_overrides
    return dict.fromkeys(depth_fields, default_depth)


def shallowest_model(preset: str, **overrides):
    """`make_model(preset)` at the fewest layers that hold all of the preset's code."""
    size = {name: value for name, value in TINY_MARIAN.items() if not name.endswith("_layers")}
    depth = fewest_layers(SimpleAttnMarianConfig, preset, ("encoder_layers", "decoder_layers"), **size)
    return make_model(preset, **depth, **overrides)


def seq2seq_batch():
    """Sources (2, 7) with the second row padded by 2, targets (2, 6) with one ignored label."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(2, 38, (2, 7), generator=generator)
    mask = torch.ones_like(source)
    source[1, -2:], mask[1, -2:] = 39, 0
    labels = torch.randint(2, 38, (2, 6), generator=generator)
    labels[1, -1] = -100
    return source, mask, labels


def graph_breaks(function, *args) -> list[str]:
    """Each graph break of `function(*args)` as its reason and the line of ours that caused it."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(function)(*args)
    breaks = []
    for graph_break in explanation.break_reasons:
        frame = graph_break.user_stack[-1] if graph_break.user_stack else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        breaks.append(graph_break.reason.splitlines()[0] + where)
    return breaks


class HostReads(TorchDispatchMode):
    """Records the operators that make the host wait for the device: reads of a tensor's value (`.item()`,
    `int()`, `bool()`, `.tolist()` all reach `_local_scalar_dense`; `nonzero` and boolean indexing size their
    output from the values), and tensors made from Python lists (`torch.tensor([...], device=...)`: `lift_fresh`),
    which on a GPU are a blocking copy from host memory. A Python scalar set into a tensor (`x[:, 0] = 3`,
    transformers' `shift_tokens_right`) lifts a 0-dim tensor that the device fills without a copy: not counted."""

    SYNCHRONISING = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique")

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name in self.SYNCHRONISING or (name == "aten.lift_fresh" and args[0].dim() > 0):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def cached_step_inputs(model, source, mask, labels):
    """The encoder output and a cache after two decoder positions, and the next decoder input."""
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=source, attention_mask=mask)
        prefix = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=labels[:, :2].abs())
    return encoder_outputs, prefix.cache, labels[:, 2:3].abs()


@pytest.mark.parametrize("preset", list_presets("seq2seq"))
def test_seq2seq_forwards_have_no_graph_break_and_no_host_read(preset):
    model = shallowest_model(preset, dropout=0.1, attention_dropout=0.1)
    source, mask, labels = seq2seq_batch()

    def train(source, mask, labels):
        return model(input_ids=source, attention_mask=mask, labels=labels).loss

    def evaluate(source, mask, labels):
        return model(input_ids=source, attention_mask=mask, labels=labels).logits

    model.train()
    train(source, mask, labels).backward()  # builds what a model keeps from one forward to the next
    with HostReads() as training_reads:
        train(source, mask, labels).backward()
    assert graph_breaks(train, source, mask, labels) == []
    model.eval()
    assert graph_breaks(evaluate, source, mask, labels) == []
    encoder_outputs, cache, next_token = cached_step_inputs(model, source, mask, labels)

    def step(next_token):
        return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=next_token, cache=cache)

    with torch.no_grad(), HostReads() as decoding_reads:
        step(next_token)
        assert graph_breaks(step, next_token) == []
    assert training_reads.reads == decoding_reads.reads == []


@pytest.mark.parametrize("preset", list_presets("encoder"))
def test_encoder_forwards_have_no_graph_break_and_no_host_read(preset):
    torch.manual_seed(0)
    size = {name: value for name, value in TINY_BERT.items() if name != "num_hidden_layers"}
    depth = fewest_layers(SimpleAttnBertConfig, preset, ("num_hidden_layers",), **size)
    config = SimpleAttnBertConfig.from_preset(preset, **size, **depth, num_labels=3)
    model = SimpleAttnBertForSequenceClassification(config)
    input_ids, attention_mask = padded_bert_batch([6, 4])
    labels = torch.tensor([0, 2])

    def classify(input_ids, attention_mask, labels):
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    classify(input_ids, attention_mask, labels).backward()  # builds what a model keeps from one forward to the next
    with HostReads() as reads:
        classify(input_ids, attention_mask, labels).backward()
    assert reads.reads == []
    # Training mode only: evaluation runs the same code without dropout (hard retrieval's arg-max path is traced in
    # evaluation by the seq2seq test of `hard-all`).
    assert graph_breaks(classify, input_ids, attention_mask, labels) == []


def compiled_and_eager_training_steps(model, backend: str):
    """(loss, gradients) of one training step, eager and compiled with `fullgraph=True`, from the same RNG state."""
    source, mask, labels = seq2seq_batch()
    results = []
    for runner in (model, torch.compile(model, fullgraph=True, backend=backend)):
        model.zero_grad()
        torch.manual_seed(1)
        loss = runner(input_ids=source, attention_mask=mask, labels=labels).loss
        loss.backward()
        gradients = {
            name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None
        }
        results.append((loss.detach(), gradients))
    return results


@pytest.mark.numerics
@pytest.mark.parametrize("preset", FAMILY_PRESETS)
def test_fullgraph_compiled_training_step_equals_eager(preset):
    torch._dynamo.reset()
    model = shallowest_model(preset, dropout=0.0).train().double()
    (eager_loss, eager_gradients), (compiled_loss, compiled_gradients) = compiled_and_eager_training_steps(
        model, "aot_eager"
    )
    assert_same_maths(compiled_loss, eager_loss, **model_reductions(model.config))
    assert compiled_gradients.keys() == eager_gradients.keys()
    for name, gradient in eager_gradients.items():
        assert_same_maths(compiled_gradients[name], gradient, **model_reductions(model.config))


@pytest.mark.numerics
@pytest.mark.parametrize("preset", FAMILY_PRESETS)
def test_fullgraph_compiled_cached_decoding_steps_equal_eager(preset):
    torch._dynamo.reset()
    model = shallowest_model(preset).double()
    source, mask, labels = seq2seq_batch()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    steps = []
    for runner in (model, compiled):
        encoder_outputs, cache, next_token = cached_step_inputs(model, source, mask, labels)
        logits = []
        with torch.no_grad():
            for position in range(2, 5):  # three steps: the cache's length changes under the compiled graph
                step = runner(
                    encoder_outputs=encoder_outputs,
                    attention_mask=mask,
                    decoder_input_ids=labels[:, position : position + 1].abs(),
                    cache=cache,
                )
                logits.append(step.logits)
        steps.append(torch.cat(logits, dim=1))
    assert_same_maths(steps[1], steps[0], **model_reductions(model.config))


def test_generate_with_a_compile_config_runs_compiled_decoding_steps_and_equals_eager():
    torch._dynamo.reset()
    model = make_model("hc-sa")  # windowed decoder caches: the cache's kept length changes under the graph
    source, mask, _ = seq2seq_batch()
    compile_config = CompileConfig(backend="aot_eager", mode=None, fullgraph=True)
    for num_beams in (1, 4):
        expected = model.generate(source, attention_mask=mask, max_new_tokens=6, num_beams=num_beams)
        compiled = model.generate(
            source, attention_mask=mask, max_new_tokens=6, num_beams=num_beams, compile_config=compile_config
        )
        torch.testing.assert_close(compiled, expected, rtol=0, atol=0)
    assert model._last_compile_config == compile_config  # the steps went through the compiled call
    # without a compile config `generate` stays eager, as for transformers' own models with a dynamic cache
    assert not model._valid_auto_compile_criteria({}, model.generation_config)
