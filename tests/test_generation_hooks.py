"""transformers' private generation methods that we override or call still exist and still take our arguments.

`SimpleAttnMarianGenerationMixin` overrides private methods of transformers' `GenerationMixin` (each of its methods
whose name starts with "_"), and it and the ONNX engine call others. transformers may rename, drop or change them in
any release: an override of a method that no longer exists is silently never called, and a call with arguments it no
longer takes fails only in the decoding path that makes it. The checks read the classes themselves (their methods,
their `super()` and `self` calls) and compare with `inspect.signature`, so a new override or call is checked without
being listed here.
"""

import ast
import inspect
import re
import textwrap

import pytest
import transformers.generation.utils
from transformers import GenerationMixin
from transformers.masking_utils import create_masks_for_generate

from hf_simple_attn import SimpleAttnMarianMTModel
from hf_simple_attn.modeling.generation_simple_attn_marian import SimpleAttnMarianGenerationMixin


POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def overridden_private_methods(cls) -> list[str]:
    """The methods `cls` itself defines whose names start with "_", dunders aside."""
    return sorted(
        name
        for name, value in vars(cls).items()
        if name.startswith("_") and not name.startswith("__") and callable(value)
    )


def as_called(owner, name: str) -> inspect.Signature:
    """The signature of `owner`'s method `name` as `self.name(...)` sees it (without `self` or `cls`)."""
    attribute = inspect.getattr_static(owner, name)
    signature = inspect.signature(getattr(attribute, "__func__", attribute))
    if isinstance(attribute, staticmethod):
        return signature
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def accepts(signature: inspect.Signature, positional: int, keywords: list[str], partial: bool = False) -> bool:
    """Whether a call with `positional` positional arguments and `keywords` binds to `signature`; `partial`: the call
    also passes `*args` or `**kwargs`, so that parameters may be left unbound."""
    bind = signature.bind_partial if partial else signature.bind
    try:
        bind(*[None] * positional, **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def transformers_calls_accepted(ours: inspect.Signature, theirs: inspect.Signature) -> bool:
    """Whether an override takes the arguments of the method it overrides: all positionally, all by name (what can
    be), and the required ones alone."""
    parameters = list(theirs.parameters.values())
    positional_only = sum(parameter.kind == inspect.Parameter.POSITIONAL_ONLY for parameter in parameters)
    required = [parameter for parameter in parameters if parameter.default is inspect.Parameter.empty]
    return (
        accepts(ours, sum(parameter.kind in POSITIONAL for parameter in parameters), [])
        and accepts(ours, positional_only, [parameter.name for parameter in parameters if parameter.kind in NAMED])
        and accepts(
            ours,
            sum(parameter.kind == inspect.Parameter.POSITIONAL_ONLY for parameter in required),
            [parameter.name for parameter in required if parameter.kind in NAMED],
        )
    )


def private_calls(cls) -> list[tuple[str, str, ast.Call]]:
    """(receiver, method name, call) of every `super().name(...)` and `self._name(...)` call in the source of
    `cls`."""
    calls = []
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver, name = node.func.value, node.func.attr
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            calls.append(("super", name, node))
        elif isinstance(receiver, ast.Name) and receiver.id == "self" and name.startswith("_"):
            if not name.startswith("__"):
                calls.append(("self", name, node))
    return calls


def hook_problems(source_class, model_class) -> list[str]:
    """What no longer fits transformers' `GenerationMixin` in `source_class`: a private method it defines that
    `GenerationMixin` lacks (transformers never calls it) or whose arguments it no longer takes; a `super()` or
    private `self` call (resolved on `model_class`, the class whose instances run it) to a method that no longer
    exists or no longer takes the call's arguments."""
    problems = []
    for name in overridden_private_methods(source_class):
        if inspect.getattr_static(GenerationMixin, name, None) is None:
            problems.append(f"{source_class.__name__}.{name} overrides a method GenerationMixin no longer has")
        elif not transformers_calls_accepted(as_called(source_class, name), as_called(GenerationMixin, name)):
            problems.append(
                f"{source_class.__name__}.{name} does not take the arguments of GenerationMixin.{name}"
                f"{as_called(GenerationMixin, name)}"
            )
    for receiver, name, call in private_calls(source_class):
        if receiver == "super":
            owner = next((base for base in source_class.__mro__[1:] if name in vars(base)), None)
        else:
            owner = model_class if inspect.getattr_static(model_class, name, None) is not None else None
        if owner is None:
            problems.append(f"{source_class.__name__} calls {ast.unparse(call.func)}, which no longer exists")
            continue
        positional = [argument for argument in call.args if not isinstance(argument, ast.Starred)]
        keywords = [keyword.arg for keyword in call.keywords if keyword.arg is not None]
        partial = len(positional) < len(call.args) or len(keywords) < len(call.keywords)
        if not accepts(as_called(owner, name), len(positional), keywords, partial):
            problems.append(
                f"{source_class.__name__} calls {ast.unparse(call)}, which {owner.__name__}.{name}"
                f"{as_called(owner, name)} does not take"
            )
    return problems


def onnx_engine():
    pytest.importorskip("onnx", reason="the ONNX engine needs the `export` extra")
    from hf_simple_attn.deploy.export import OnnxSeq2SeqModel

    return OnnxSeq2SeqModel


@pytest.mark.parametrize(
    "classes",
    [
        pytest.param(lambda: (SimpleAttnMarianGenerationMixin, SimpleAttnMarianMTModel), id="pytorch-model"),
        pytest.param(lambda: (onnx_engine(), onnx_engine()), id="onnx-engine"),
    ],
)
def test_the_generation_methods_we_override_and_call_still_fit_transformers(classes):
    assert hook_problems(*classes()) == []


def test_the_mixin_overrides_private_hooks():
    """The hooks this file checks are found, not an empty list that would pass whatever transformers does."""
    assert {
        "_prepare_generation_config",
        "_maybe_prepare_encoder_kwargs_for_generation",
        "_prepare_cache_for_generation",
        "_valid_auto_compile_criteria",
        "_prepare_generated_length",
    } <= set(overridden_private_methods(SimpleAttnMarianGenerationMixin))
    assert {"_prepare_special_tokens", "_prepare_generation_config"} <= {
        name for _, name, _ in private_calls(SimpleAttnMarianGenerationMixin)
    }


@pytest.mark.parametrize("name", overridden_private_methods(SimpleAttnMarianGenerationMixin))
def test_each_private_override_says_why_in_one_line(name):
    docstring = inspect.cleandoc(vars(SimpleAttnMarianGenerationMixin)[name].__doc__ or "")
    lines = docstring.splitlines()
    assert lines and lines[0] and (len(lines) == 1 or not lines[1]), f"{name}: a one-line summary first"


def test_generate_still_asks_the_model_for_its_decoder_masks():
    """`create_masks_for_generate` is no `GenerationMixin` method: `generate` looks it up on the model by name, with
    transformers' function of that name as the fallback, and calls it with that function's arguments, by name."""
    source = inspect.getsource(transformers.generation.utils)
    assert re.search(r"""getattr\(\s*self,\s*["']create_masks_for_generate["']""", source)
    parameters = inspect.signature(create_masks_for_generate).parameters.values()
    assert accepts(
        as_called(SimpleAttnMarianGenerationMixin, "create_masks_for_generate"),
        0,
        [parameter.name for parameter in parameters if parameter.kind in NAMED],
    )


class DriftedMixin(GenerationMixin):
    """What the checks must report: what transformers would have renamed, dropped or changed."""

    def _prepare_generation_configuration(self, generation_config, **kwargs):
        """Renamed in transformers: `generate` never calls it."""
        return super()._prepare_generation_config(generation_config, **kwargs)

    def _prepare_generated_length(self, generation_config):
        """Takes fewer arguments than transformers passes."""
        return generation_config

    def _valid_auto_compile_criteria(self, model_kwargs, generation_config):
        """Calls transformers' method with an argument it does not take."""
        return super()._valid_auto_compile_criteria(model_kwargs, generation_config, True)

    def candidate_search(self, generation_config):
        return self._prepare_special_token(generation_config)


@pytest.mark.parametrize(
    "drift",
    [
        "DriftedMixin._prepare_generation_configuration overrides a method GenerationMixin no longer has",
        "DriftedMixin._prepare_generated_length does not take the arguments of GenerationMixin",
        "DriftedMixin calls super()._valid_auto_compile_criteria(model_kwargs, generation_config, True), which",
        "DriftedMixin calls self._prepare_special_token, which no longer exists",
    ],
)
def test_the_checks_report_a_renamed_dropped_or_changed_method(drift):
    problems = hook_problems(DriftedMixin, DriftedMixin)
    assert len(problems) == 4 and [problem for problem in problems if problem.startswith(drift)], problems
