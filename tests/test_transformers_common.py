"""transformers' own common model tests (`ModelTesterMixin` of its `tests/test_modeling_common.py`) on our models:
`base` and one preset of each attention family, for the seq2seq model and for the BERT-style encoder.

transformers does not ship its tests in the wheel; the sdist of the installed version holds the top-level
`tests/*.py` (not `tests/utils/`, which its `ConfigTester` needs, so the config tests are not run).
`scripts/install.sh` unpacks them into `build/transformers-<version>/tests`, or set `TRANSFORMERS_TESTS_DIR` to such
a folder; without it (or without `parameterized`, which those tests import) this module is skipped. Nothing of
transformers' tests is copied here: the model testers below follow its `MarianModelTester` and `BertModelTester`.

The sdist lacks `tests/generation/` and `tests/exporters/`: `GenerationTesterMixin` and `ExportTesterMixin` are
empty stand-ins, so transformers' generation and export tests are not run (`test_user_caches.py` runs greedy and
beam search with every kind of cache, `test_export.py` our export). The tests skipped on purpose are listed in
`NEEDS_LEARNED_HEADS` and `NOT_RUNNABLE`, each with its reason.
"""

import importlib
import os
import sys
import types
import unittest
from pathlib import Path

import pytest
import torch
import transformers

from hf_simple_attn import (
    SimpleAttnBertConfig,
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertForTokenClassification,
    SimpleAttnBertModel,
    SimpleAttnMarianConfig,
    SimpleAttnMarianModel,
    SimpleAttnMarianMTModel,
)


REPO = Path(__file__).resolve().parents[1]
PACKAGE = "transformers_common_tests"
# Modules `test_modeling_common.py` imports that the sdist does not ship: {module: the class it needs from it}.
NOT_IN_SDIST = {"exporters.test_export": "ExportTesterMixin", "generation.test_utils": "GenerationTesterMixin"}


def common_tests_dir() -> Path | None:
    """The folder holding transformers' `test_modeling_common.py` for the installed version, if there is one."""
    candidates = [
        os.environ.get("TRANSFORMERS_TESTS_DIR"),
        REPO / "build" / f"transformers-{transformers.__version__}",
    ]
    for candidate in filter(None, candidates):
        for folder in (Path(candidate), Path(candidate) / "tests"):
            if (folder / "test_modeling_common.py").is_file():
                return folder
    return None


def import_common_tests(tests_dir: Path) -> types.ModuleType:
    """transformers' `test_modeling_common`, imported from `tests_dir` as the package `transformers_common_tests`,
    with empty stand-ins for the mixins of the sub-packages the sdist lacks."""
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(tests_dir)]
        sys.modules[PACKAGE] = package
        for module_name, class_name in NOT_IN_SDIST.items():
            if (tests_dir / (module_name.replace(".", "/") + ".py")).is_file():
                continue
            subpackage, _ = module_name.split(".")
            sys.modules.setdefault(
                f"{PACKAGE}.{subpackage}", types.ModuleType(f"{PACKAGE}.{subpackage}")
            ).__path__ = []
            stand_in = types.ModuleType(f"{PACKAGE}.{module_name}")
            setattr(stand_in, class_name, type(class_name, (), {"__doc__": "Not in the sdist: no tests."}))
            sys.modules[f"{PACKAGE}.{module_name}"] = stand_in
    return importlib.import_module(f"{PACKAGE}.test_modeling_common")


TESTS_DIR = common_tests_dir()
if TESTS_DIR is None:
    pytest.skip(
        f"transformers {transformers.__version__}'s common model tests not found: run scripts/install.sh (it unpacks "
        f"the sdist's tests into build/transformers-{transformers.__version__}/tests) or set TRANSFORMERS_TESTS_DIR",
        allow_module_level=True,
    )
pytest.importorskip("parameterized", reason="transformers' common tests import `parameterized` (scripts/install.sh)")
modeling_common = import_common_tests(TESTS_DIR)
ModelTesterMixin = modeling_common.ModelTesterMixin
ids_tensor = modeling_common.ids_tensor

# transformers' tests tell a bare model (no loss, no labels) from a head, and which labels a head takes, by the class
# names of its Auto mappings: ours are added to the copies the test module reads (transformers' own are untouched).
OUR_AUTO_NAMES = {
    "MODEL_MAPPING_NAMES": {"simple_attn_marian": "SimpleAttnMarianModel", "simple_attn_bert": "SimpleAttnBertModel"},
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": {"simple_attn_marian": "SimpleAttnMarianMTModel"},
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": {"simple_attn_bert": "SimpleAttnBertForMaskedLM"},
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": {"simple_attn_bert": "SimpleAttnBertForSequenceClassification"},
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": {"simple_attn_bert": "SimpleAttnBertForTokenClassification"},
}
for _mapping, _names in OUR_AUTO_NAMES.items():
    setattr(modeling_common, _mapping, {**getattr(modeling_common, _mapping), **_names})


# Tests that assume every head's attention weights are differentiable functions of its input (learned query/key
# projections), which the weights of hard-coded, recurrent, random-synthesizer and hard-retrieval heads are not:
# {family: {test: reason}}.
RETURNED_MAPS_HAVE_NO_GRADIENT = {
    "test_retain_grad_hidden_states_attentions": (
        "{family} heads have no input-dependent, differentiable attention weights: {why}, so no gradient reaches the "
        "attention maps they return"
    )
}
WHY = {
    "hard_coded": "their Gaussian weights are fixed",
    "recurrent": "their weights are learned position tables, the same for every input",
    "random_synthesizer": "their weights are learned position tables, the same for every input",
    "hard_retrieval": "each query attends to the argmax key, a one-hot choice",
}
NEEDS_LEARNED_HEADS: dict[str, dict[str, str]] = {
    family: {test: reason.format(family=family, why=why) for test, reason in RETURNED_MAPS_HAVE_NO_GRADIENT.items()}
    for family, why in WHY.items()
}

# Tests of transformers' common suite that cannot run here, for every model: {test: reason}.
NOT_RUNNABLE = {
    "test_generation_tester_mixin_inheritance": (
        "GenerationTesterMixin (tests/generation/test_utils.py) is not in transformers' sdist; test_user_caches.py "
        "runs generate with every kind of cache"
    ),
}


ONLY_DOT_HEADS_READ_IT = (
    "eager and SDPA differ only in the dot heads, which the base preset compares for every model class (the other "
    "families compute their weights their own way under either)"
)


def skipped_tests(family: str) -> dict[str, str]:
    return {**NOT_RUNNABLE, **NEEDS_LEARNED_HEADS.get(family, {})}


def with_skips(test_class: type) -> type:
    """Replace each test of `skipped_tests(test_class.family)` by a skip that gives its reason."""
    for name, reason in skipped_tests(test_class.family).items():
        assert hasattr(test_class, name), f"{name} is not a test of transformers' common suite any more"
        setattr(test_class, name, unittest.skip(reason)(lambda self: None))
    return test_class


class TinyModelTester:
    """The sizes and inputs transformers' model testers share (`MarianModelTester`, `BertModelTester`), for a tiny
    model of one preset (with `layout` replacing its attention layout where given)."""

    batch_size = 3
    seq_length = encoder_seq_length = decoder_seq_length = 7
    is_training = True
    vocab_size = 99
    hidden_size = 16
    num_hidden_layers = 2
    num_attention_heads = 4
    intermediate_size = 20
    dropout = 0.1
    max_position_embeddings = 64

    def __init__(self, parent, preset: str, layout: dict | None = None):
        self.parent = parent
        self.preset = preset
        self.layout = layout

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class SimpleAttnMarianModelTester(TinyModelTester):
    """A tiny seq2seq model of one preset and its inputs, as transformers' `MarianModelTester` makes them."""

    eos_token_id = 2
    pad_token_id = 1
    bos_token_id = 0
    decoder_start_token_id = 3

    def get_config(self) -> SimpleAttnMarianConfig:
        return SimpleAttnMarianConfig.from_preset(
            self.preset,
            attention_layout=self.layout,
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.dropout,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            forced_eos_token_id=None,
        )

    def prepare_config_and_inputs(self):
        # No padding token inside the ids (>= 3), the source ending with </s>.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        inputs_dict = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": input_ids.ne(self.pad_token_id),
            "decoder_attention_mask": decoder_input_ids.ne(self.pad_token_id),
        }
        return self.get_config(), inputs_dict


class SimpleAttnBertModelTester(TinyModelTester):
    """A tiny encoder of one preset and its inputs, as transformers' `BertModelTester` makes them (right padding)."""

    type_vocab_size = 2
    num_labels = 3

    def get_config(self) -> SimpleAttnBertConfig:
        return SimpleAttnBertConfig.from_preset(
            self.preset,
            attention_layout=self.layout,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            num_labels=self.num_labels,
            pad_token_id=0,
        )

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(1)
        lengths = torch.randint(1, self.seq_length + 1, (self.batch_size,))
        lengths[0] = self.seq_length
        attention_mask = (torch.arange(self.seq_length) < lengths[:, None]).long()
        input_ids = input_ids.masked_fill(attention_mask == 0, 0)
        token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size) * attention_mask
        inputs_dict = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
        return self.get_config(), inputs_dict


class SimpleAttnMarianCommonTests(ModelTesterMixin):
    all_model_classes = (SimpleAttnMarianModel, SimpleAttnMarianMTModel)
    is_encoder_decoder = True
    test_missing_keys = False  # as MarianModelTest: the sinusoidal position tables are not saved
    preset: str
    family: str
    layout: dict | None

    def setUp(self):
        self.model_tester = SimpleAttnMarianModelTester(self, self.preset, self.layout)


class SimpleAttnBertCommonTests(ModelTesterMixin):
    all_model_classes = (
        SimpleAttnBertModel,
        SimpleAttnBertForMaskedLM,
        SimpleAttnBertForSequenceClassification,
        SimpleAttnBertForTokenClassification,
    )
    preset: str
    family: str
    layout: dict | None

    def setUp(self):
        self.model_tester = SimpleAttnBertModelTester(self, self.preset, self.layout)


def common_test_case(base: type, preset: str, family: str, layout: dict | None) -> type:
    """The test case of `preset`: every model class for `base`; for another preset the head that holds the whole
    model (the bare model and the other heads run the same attention code, which `base` tests with them)."""
    name = f"Test{base.__name__.removesuffix('CommonTests')}_{preset.replace('-', '_')}"
    attributes = {"preset": preset, "family": family, "layout": layout}
    test_case = with_skips(type(name, (base, unittest.TestCase), attributes))
    if preset != "base":
        test_case.all_model_classes = base.all_model_classes[1:2]
        # Only `dot` heads read `attn_implementation`; `base` compares the two implementations for every class.
        for test_name in dir(test_case):
            if test_name.startswith("test_eager_matches_sdpa"):
                setattr(test_case, test_name, unittest.skip(ONLY_DOT_HEADS_READ_IT)(lambda self: None))
    return test_case


# Learned position tables sized to the testers' inputs (the default, 256 positions, makes a model of over 1M
# parameters, more than `test_model_is_small` allows).
SMALL_TABLES = {"max_positions": 16}
# `base` and one preset of each family: {preset: (family, attention_layout override or None)}.
SEQ2SEQ_PRESETS = {
    "base": ("dot", None),
    "hc-sa": ("hard_coded", None),
    "ran-all": (
        "recurrent",
        {site: {"kind": "recurrent", **SMALL_TABLES} for site in ("encoder_self", "decoder_self")},
    ),
    "syn-r": (
        "random_synthesizer",
        {site: {"kind": "random_synthesizer", **SMALL_TABLES} for site in ("encoder_self", "decoder_self")},
    ),
    "local-all": ("local", None),
    "gmm": ("gaussian_mixture", None),
    "hard-dec": ("hard_retrieval", None),
}
ENCODER_PRESETS = {
    "base": ("dot", None),
    "band6": ("local", None),
    "hc-sa": ("hard_coded", None),
    "ran-e": ("recurrent", {"encoder_self": {"kind": "recurrent", **SMALL_TABLES}}),
}

for _base, _presets in ((SimpleAttnMarianCommonTests, SEQ2SEQ_PRESETS), (SimpleAttnBertCommonTests, ENCODER_PRESETS)):
    for _preset, (_family, _layout) in _presets.items():
        _case = common_test_case(_base, _preset, _family, _layout)
        globals()[_case.__name__] = _case
del _base, _presets, _preset, _family, _layout, _case, _mapping, _names
