"""Griffe extension (mkdocs.yml, mkdocstrings `extensions:`): the reference entries of transformers-style configs.

transformers' configs are `@strict` dataclasses (`huggingface_hub.dataclasses.strict`) whose `__init__` exists only
at run time, so griffe, reading the source, finds no signature; and their docstrings follow transformers' style,
`name (`type`, *optional*, defaults to `value`):`, whose parenthesis griffe's Google parser would show as the type.
For each class so decorated, this gives griffe the `__init__` that `inspect.signature` reads from the imported class,
and shortens each `Args:` entry to `name:`, so that the parameter table takes each type and default from that
signature (tests/test_docs_reference.py checks that the docstring states the same defaults).
"""

import importlib
import inspect
import re

from griffe import Class, Expr, Extension, Function, Parameter, ParameterKind, Parameters


STRICT = "huggingface_hub.dataclasses.strict"
# An `Args:` entry in transformers' style: `    name (`type`, *optional*, defaults to `value`):`.
TRANSFORMERS_ARGUMENT = re.compile(r"^([ \t]+)(\w+) \(`.*\):[ \t]*$", re.M)
PARAMETER_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: ParameterKind.var_keyword,
}


def is_strict_dataclass(cls: Class) -> bool:
    return any(
        isinstance(decorator.value, Expr) and decorator.value.canonical_path == STRICT for decorator in cls.decorators
    )


def runtime_parameters(cls: Class) -> Parameters:
    """The parameters of the imported class's `__init__`, `self` first, annotations and defaults as source text."""
    runtime_class = getattr(importlib.import_module(cls.module.path), cls.name)
    parameters = [Parameter("self", kind=ParameterKind.positional_or_keyword)]
    for parameter in inspect.signature(runtime_class.__init__).parameters.values():
        if parameter.name == "self":
            continue
        annotation = parameter.annotation
        if annotation is not inspect.Parameter.empty and not isinstance(annotation, str):
            annotation = inspect.formatannotation(annotation)
        parameters.append(
            Parameter(
                parameter.name,
                annotation=None if annotation is inspect.Parameter.empty else annotation,
                kind=PARAMETER_KINDS[parameter.kind],
                default=None if parameter.default is inspect.Parameter.empty else repr(parameter.default),
            )
        )
    return Parameters(*parameters)


class StrictDataclassConfigs(Extension):
    def on_class(self, *, cls: Class, **kwargs) -> None:
        if not is_strict_dataclass(cls) or "__init__" in cls.members:
            return
        cls.set_member("__init__", Function("__init__", parameters=runtime_parameters(cls), returns="None"))
        if cls.docstring is not None:
            cls.docstring.value = TRANSFORMERS_ARGUMENT.sub(r"\1\2:", cls.docstring.value)
