"""transformers' own common model tests (`ModelTesterMixin` of its `tests/test_modeling_common.py`) on our models:
`base` and a covering set of layouts, for the seq2seq model and for the BERT-style encoder. The covering set has
every structural feature of a layout that some preset has (`layout_features`: each family at each site, absent
sublayers and feed-forward blocks, ties, query/key projections shared, without keys or absent, head groups, the
options that change what a family builds); `test_covering_set_has_every_preset_feature` fails when a preset gains one
that it lacks.

transformers does not ship its tests in the wheel; the sdist of the installed version holds the top-level
`tests/*.py` (not `tests/utils/`, which its `ConfigTester` needs, so the config tests are not run).
`scripts/install.sh` unpacks them into `build/transformers-<version>/tests`, or set `TRANSFORMERS_TESTS_DIR` to such
a folder; without it (or without `parameterized`, which those tests import) this module is skipped. Nothing of
transformers' tests is copied here: the model testers below follow its `MarianModelTester` and `BertModelTester`.

The sdist lacks `tests/generation/` and `tests/exporters/`: `GenerationTesterMixin` and `ExportTesterMixin` are
empty stand-ins, so transformers' generation and export tests are not run (`test_user_caches.py` runs greedy and
beam search with every kind of cache, `test_export.py` our export). The tests skipped on purpose are listed in
`NEEDS_LEARNED_HEADS`, `NOT_RUNNABLE` and `skipped_tests`, each with its reason.
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
    list_presets,
)
from hf_simple_attn.modeling.attention_heads import SITES
from hf_simple_attn.modeling.attention_registry import get_attention_family
from hf_simple_attn.modeling.layout import query_key_slots, query_slots


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


# Tests that read the attention map of the first layer of every site: `test_attention_outputs` its shape, which an
# absent sublayer does not return, and `test_retain_grad_hidden_states_attentions` its gradient, which does not reach
# the maps of several head groups (joined apart from their outputs) nor those of heads whose weights are no
# differentiable function of their input.
FIRST_LAYER_MAPS = {
    "absent": "the first layer has no {site} sublayer, so it returns no attention map there",
    "groups": (
        "the first {site} layer has several head groups, whose maps are joined apart from their outputs, so no "
        "gradient reaches the joined map"
    ),
    "fixed": (
        "{family} heads have no input-dependent, differentiable attention weights: {why}, so no gradient reaches the "
        "attention maps they return"
    ),
}
WHY = {
    "hard_coded": "their Gaussian weights are fixed",
    "recurrent": "their weights are learned position tables, the same for every input",
    "random_synthesizer": "their weights are learned position tables, the same for every input",
    "hard_retrieval": "each query attends to the argmax key, a one-hot choice",
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

# An absent decoder sublayer returns an attention map of zero heads (batch, 0, q_len, k_len), the shape `generate`'s
# assisted decoding splits per token; transformers' test formats its failure message (`torch.max` of the difference)
# before asserting, which raises on an empty tensor even when the outputs are equal.
ZERO_HEAD_MAPS = (
    "an absent decoder sublayer returns an attention map of zero heads, on which the test's failure message "
    "(torch.max of the difference, formatted before the assertion) raises; `base` runs it for every model class"
)


def skipped_tests(attention_layout: dict) -> dict[str, str]:
    """{test: reason} of transformers' tests that do not apply to a model of this (expanded) attention layout."""
    skipped = dict(NOT_RUNNABLE)
    if any(spec is None for site in ("decoder_self", "cross") for spec in attention_layout.get(site, [])):
        skipped["test_model_outputs_equivalence"] = ZERO_HEAD_MAPS
    for site in SITES:
        if site not in attention_layout:
            continue
        first_layer = attention_layout[site][0]
        if first_layer is None:
            reason = FIRST_LAYER_MAPS["absent"].format(site=site)
            skipped.setdefault("test_attention_outputs", reason)
        elif len(first_layer["groups"]) > 1:
            reason = FIRST_LAYER_MAPS["groups"].format(site=site)
        elif first_layer["groups"][0]["kind"] in WHY:
            family = first_layer["groups"][0]["kind"]
            reason = FIRST_LAYER_MAPS["fixed"].format(family=family, why=WHY[family])
        else:
            continue
        skipped.setdefault("test_retain_grad_hidden_states_attentions", reason)
    return skipped


def with_skips(test_class: type, attention_layout: dict) -> type:
    """Replace each test of `skipped_tests(attention_layout)` by a skip that gives its reason."""
    for name, reason in skipped_tests(attention_layout).items():
        assert hasattr(test_class, name), f"{name} is not a test of transformers' common suite any more"
        setattr(test_class, name, unittest.skip(reason)(lambda self: None))
    return test_class


def group_features(group: dict, site: str) -> set[str]:
    """The structural features of one head group: its family at its site, and the options that change what the
    family builds (modules, parameters or buffers) or how far its heads reach (a window: the decoder's cache keeps
    only what they read)."""
    kind = group["kind"]
    features = {f"{kind} at {site}"}
    if kind == "recurrent":
        features.add("recurrent: fixed initial logits (a buffer)" if group["freeze_initial"] else "recurrent: learned")
        if group["transition"] == "ffn":
            features.add("recurrent: feed-forward transition")
        elif not group["layer_norm_residual"]:
            features.add("recurrent: transition without LayerNorm")
    elif kind == "gaussian_mixture":
        features.add(f"gaussian_mixture: fusion {group['fusion']}")  # `gate` builds a net, `gmm_only` no keys
    elif kind == "hard_coded" and (group["window"] is not None or group["indexing"]):
        features.add("hard_coded: window")  # indexing is a window of one
    elif kind == "local" and any(mask.startswith("band-") for mask in group["masks"]):
        features.add("local: band mask")
    return features


def layout_features(layout: dict) -> set[str]:
    """The structural features of a resolved (expanded) `attention_layout`: what a model of it builds and how its
    sublayers are wired, beyond the sizes."""
    features = set()
    for site in SITES:
        layers = layout.get(site, [])
        if None in layers:
            features.add(f"absent sublayer at {site}")
        present = [spec for spec in layers if spec is not None]
        if len({tuple(group["kind"] for group in spec["groups"]) for spec in present}) > 1:
            features.add("families mixed across the layers of a site")
        for spec in present:
            if len(spec["groups"]) > 1:
                features.add("head groups in a layer")
            if spec["share_query_key_with"] is not None:
                features.add("query/key projections tied across layers")
            queries, keys = query_slots(spec), query_key_slots(spec)
            if queries == 0:
                features.add("value-only sublayer (no query or key projection)")
            if keys < queries:
                features.add("queries without keys (no key projection for them)")
            for group in spec["groups"]:
                slots = get_attention_family(group["kind"]).num_query_key_slots(group)
                if 0 < slots < group["num_heads"]:
                    features.add("query/key projections shared by several heads")
                if slots == 0 and queries > 0:
                    features.add("value-only heads beside query/key heads")
                features |= group_features(group, site)
    for stack in ("encoder", "decoder"):
        if not all(layout.get(f"{stack}_ffn", [True])):
            features.add(f"no feed-forward block in some {stack} layer")
    return features


def position_tables_sized(layout: dict, size: int) -> dict:
    """The expanded `layout` with every learned position table (`max_positions`) of `size` positions."""
    resized = {}
    for site, layers in layout.items():
        if site not in SITES:
            resized[site] = layers
            continue
        resized[site] = [
            None
            if spec is None
            else {
                **spec,
                "groups": [
                    {**group, "max_positions": size} if "max_positions" in group else group for group in spec["groups"]
                ],
            }
            for spec in layers
        ]
    return resized


class TinyModelTester:
    """The sizes and inputs transformers' model testers share (`MarianModelTester`, `BertModelTester`), for a tiny
    model of one preset (with `layout` replacing its attention layout site by site where given).

    Learned position tables (recurrent and random-synthesizer heads) get `max_position_embeddings` positions, as
    transformers' testers size every position table to their tiny models. The models keep their own sizing: a table
    covers the longest sentence its heads read, `max_positions` in the layout, 256 by default (the RAN paper's
    longest training sentence and its code's tables, SPEC.md), not `max_position_embeddings` (Marian's 512 would
    make the tables four times larger). At 256 the tiny models have over 1M parameters, more than
    `test_model_is_small` allows.
    """

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

    def get_config(self):
        config = self.config_of_layout(self.layout)
        resized = position_tables_sized(config.attention_layout, self.max_position_embeddings)
        return config if resized == config.attention_layout else self.config_of_layout(resized)

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class SimpleAttnMarianModelTester(TinyModelTester):
    """A tiny seq2seq model of one preset and its inputs, as transformers' `MarianModelTester` makes them."""

    eos_token_id = 2
    pad_token_id = 1
    bos_token_id = 0
    decoder_start_token_id = 3

    def config_of_layout(self, layout: dict | None) -> SimpleAttnMarianConfig:
        return SimpleAttnMarianConfig.from_preset(
            self.preset,
            attention_layout=layout,
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

    def config_of_layout(self, layout: dict | None) -> SimpleAttnBertConfig:
        return SimpleAttnBertConfig.from_preset(
            self.preset,
            attention_layout=layout,
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
    model_tester_class = SimpleAttnMarianModelTester
    preset: str
    layout: dict | None

    def setUp(self):
        self.model_tester = self.model_tester_class(self, self.preset, self.layout)


class SimpleAttnBertCommonTests(ModelTesterMixin):
    all_model_classes = (
        SimpleAttnBertModel,
        SimpleAttnBertForMaskedLM,
        SimpleAttnBertForSequenceClassification,
        SimpleAttnBertForTokenClassification,
    )
    model_tester_class = SimpleAttnBertModelTester
    preset: str
    layout: dict | None

    def setUp(self):
        self.model_tester = self.model_tester_class(self, self.preset, self.layout)


def common_test_case(base: type, case: str, preset: str, layout: dict | None) -> type:
    """The test case `case` (`preset`, its layout replaced by `layout` site by site where given): every model class
    for `base`; for another case the head that holds the whole model (the bare model and the other heads run the same
    attention code, which `base` tests with them)."""
    name = f"Test{base.__name__.removesuffix('CommonTests')}_{case.replace('-', '_')}"
    attention_layout = base.model_tester_class(None, preset, layout).get_config().attention_layout
    test_case = with_skips(
        type(name, (base, unittest.TestCase), {"preset": preset, "layout": layout}), attention_layout
    )
    if case != "base":
        test_case.all_model_classes = base.all_model_classes[1:2]
        # Only `dot` heads read `attn_implementation`; `base` compares the two implementations for every class.
        for test_name in dir(test_case):
            if test_name.startswith("test_eager_matches_sdpa"):
                setattr(test_case, test_name, unittest.skip(ONLY_DOT_HEADS_READ_IT)(lambda self: None))
    return test_case


# Layouts with what no preset has but a layout may (head groups of several families in one layer, queries without
# keys beside keys, value-only heads beside query/key heads, RAN's feed-forward transition), and the family options
# no other case has, at the testers' two layers.
MIXED_SEQ2SEQ_LAYOUT = {
    "encoder_self": [
        {"groups": [{"kind": "hard_coded", "num_heads": 2, "window": 3}, {"kind": "dot"}]},
        {"kind": "recurrent", "transition": "ffn", "transition_ffn_dim": 8},
    ],
    "decoder_self": [
        {"kind": "recurrent", "layer_norm_residual": False},
        {"groups": [{"kind": "hard_coded", "num_heads": 2}, {"kind": "dot"}]},
    ],
    "cross": [
        {
            "groups": [
                {"kind": "gaussian_mixture", "num_heads": 1, "fusion": "gmm_only"},
                {"kind": "gaussian_mixture", "num_heads": 1, "fusion": "average"},
                {"kind": "gaussian_mixture", "num_heads": 1},
                {"kind": "hard_coded", "num_heads": 1},
            ]
        },
        "dot",
    ],
    "encoder_ffn": [True, False],
    "decoder_ffn": [False, True],
}
MIXED_ENCODER_LAYOUT = {
    "encoder_self": [
        {
            "groups": [
                {"kind": "hard_coded", "num_heads": 1, "window": 3},
                {"kind": "recurrent", "num_heads": 1, "layer_norm_residual": False},
                {"kind": "dot"},
            ]
        },
        {"groups": [{"kind": "random_synthesizer", "num_heads": 2}, {"kind": "hard_retrieval"}]},
    ],
    "encoder_ffn": [True, False],
}
# The covering set: {case: (preset, attention layout replacing the preset's site by site, or None)}. `base` runs every
# model class; the other cases the head that holds the whole model.
SEQ2SEQ_CASES = {
    "base": ("base", None),
    "gmm-only": ("gmm-only", None),
    "local-fully-tied": ("local-fully-tied", None),
    "ran-all-fixed": ("ran-all-fixed", None),
    "syn-r": ("syn-r", None),
    "sh-x-no-sa": ("sh-x-no-sa", None),
    "hard-all": ("hard-all", None),
    "mixed": ("base", MIXED_SEQ2SEQ_LAYOUT),
}
ENCODER_CASES = {
    "base": ("base", None),
    "band6-alltied": ("band6-alltied", None),
    "local-fully-tied": ("local-fully-tied", None),
    "ran-all-fixed": ("ran-all-fixed", None),
    "mixed": ("base", MIXED_ENCODER_LAYOUT),
}
COMMON_TESTS = {
    "seq2seq": (SimpleAttnMarianCommonTests, SEQ2SEQ_CASES),
    "encoder": (SimpleAttnBertCommonTests, ENCODER_CASES),
}
# Presets build at any size, their layer selectors scaling with depth: their features are checked at the testers'
# sizes and at the papers'.
PAPER_SIZES = {
    "seq2seq": dict(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8
    ),
    "encoder": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12),
}
PRESET_CONFIGS = {"seq2seq": SimpleAttnMarianConfig, "encoder": SimpleAttnBertConfig}


def test_covering_set_has_every_preset_feature():
    """Every structural feature of every preset (at the testers' sizes and the papers') is in some case of the
    covering set, so that transformers' common tests exercise it."""
    missing = []
    for model_kind, (base, cases) in COMMON_TESTS.items():
        covered = set()
        for preset, layout in cases.values():
            covered |= layout_features(base.model_tester_class(None, preset, layout).get_config().attention_layout)
        for preset in list_presets(model_kind):
            features = layout_features(base.model_tester_class(None, preset).get_config().attention_layout)
            paper = PRESET_CONFIGS[model_kind].from_preset(preset, **PAPER_SIZES[model_kind])
            for feature in sorted((features | layout_features(paper.attention_layout)) - covered):
                missing.append(f"{model_kind} preset {preset!r}: {feature}")
    assert missing == [], (
        "features of presets that no case of the covering set (SEQ2SEQ_CASES, ENCODER_CASES) has; add a preset with "
        "them, or a layout: " + "; ".join(missing)
    )


for _model_kind, (_base, _cases) in COMMON_TESTS.items():
    for _case, (_preset, _layout) in _cases.items():
        _test_case = common_test_case(_base, _case, _preset, _layout)
        globals()[_test_case.__name__] = _test_case
del _model_kind, _base, _cases, _case, _preset, _layout, _test_case, _mapping, _names
