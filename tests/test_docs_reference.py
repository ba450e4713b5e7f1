"""The API reference lists every config field (issue 38).

The configs' docstrings document every `__init__` parameter in transformers' style, with the defaults the code has,
and reach mkdocstrings as a signature and a parameter table (`docs/griffe_configs.py`).
"""

import ast
import importlib.util
import inspect
import logging
import re
from pathlib import Path

import pytest

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnMarianConfig


REPO = Path(__file__).resolve().parent.parent
CONFIGS = [SimpleAttnMarianConfig, SimpleAttnBertConfig]
# An `Args:` entry in transformers' style: `name (`type`, *optional*, defaults to `value`):`.
ARGUMENT = re.compile(r"^    (\w+) \(`[^`]+`(?:, \*optional\*)?(?:, defaults to `(.+)`)?\):$", re.M)


@pytest.fixture(scope="module")
def griffe_package():
    """`hf_simple_attn` as mkdocstrings loads it: griffe's static view, with the docs' extension."""
    import griffe

    spec = importlib.util.spec_from_file_location("griffe_configs", REPO / "docs" / "griffe_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    extensions = griffe.load_extensions(module.StrictDataclassConfigs())
    return griffe.load("hf_simple_attn", extensions=extensions, docstring_parser="google", search_paths=[str(REPO)])


def documented_arguments(config_class) -> list[tuple[str, str | None]]:
    """(name, stated default or None) of each entry of the docstring's `Args:` section."""
    arguments = inspect.getdoc(config_class).split("\nArgs:\n", 1)[1]
    return ARGUMENT.findall(arguments)


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda config_class: config_class.__name__)
def test_config_docstrings_document_every_parameter_with_its_default(config_class):
    documented = documented_arguments(config_class)
    parameters = inspect.signature(config_class).parameters
    names = [name for name, _ in documented]
    assert len(names) == len(set(names)), "a parameter documented twice"
    assert sorted(names) == sorted(parameters)
    for name, stated in documented:
        default = parameters[name].default
        if default is None:
            assert not stated, f"{name}: the docstring states a default, the code has None"
        else:
            assert stated and ast.literal_eval(stated) == default, (
                f"{name}: stated {stated!r}, the code has {default!r}"
            )


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda config_class: config_class.__name__)
def test_the_reference_shows_each_configs_signature_and_parameter_table(griffe_package, config_class, caplog):
    """What mkdocstrings renders: the run-time signature, and a parameter per `Args:` entry whose type and default
    are the signature's; no warning from griffe (which fails `mkdocs build --strict`)."""
    path = f"{config_class.__module__}.{config_class.__name__}".removeprefix("hf_simple_attn.")
    with caplog.at_level(logging.WARNING):
        cls = griffe_package[path]
        sections = cls.docstring.parsed
    assert not [record for record in caplog.records if record.name.startswith("griffe")]
    signature = inspect.signature(config_class).parameters
    assert [parameter.name for parameter in cls.parameters][1:] == list(signature)
    table = next(section.value for section in sections if section.kind.value == "parameters")
    assert [parameter.name for parameter in table] == [name for name, _ in documented_arguments(config_class)]
    for parameter in table:
        assert parameter.annotation is not None and parameter.annotation == cls.parameters[parameter.name].annotation
        assert parameter.value == repr(signature[parameter.name].default)
