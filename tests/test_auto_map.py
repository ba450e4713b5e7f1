"""A saved checkpoint lists every Auto class it supports in `auto_map`; each loads without the package."""

import json
import textwrap

import torch

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

from conftest import TINY_BERT, TINY_MARIAN, run_without_package


SEQ2SEQ_AUTO_MAP = {
    "AutoConfig": "configuration_simple_attn.SimpleAttnMarianConfig",
    "AutoModel": "modeling_simple_attn_marian.SimpleAttnMarianModel",
    "AutoModelForSeq2SeqLM": "modeling_simple_attn_marian.SimpleAttnMarianMTModel",
}
BERT_AUTO_MAP = {
    "AutoConfig": "configuration_simple_attn_bert.SimpleAttnBertConfig",
    "AutoModel": "modeling_simple_attn_bert.SimpleAttnBertModel",
    "AutoModelForMaskedLM": "modeling_simple_attn_bert.SimpleAttnBertForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_simple_attn_bert.SimpleAttnBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_simple_attn_bert.SimpleAttnBertForTokenClassification",
}

REMOTE_LOAD = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["hf_simple_attn"] = None  # the package must not be importable here
    import transformers
    loaded = {}
    for name in sorted(os.listdir(sys.argv[1])):
        folder = os.path.join(sys.argv[1], name)
        with open(os.path.join(folder, "config.json")) as f:
            auto_map = json.load(f)["auto_map"]
        for auto_class in sorted(auto_map):
            if auto_class != "AutoConfig":
                model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True)
                loaded[f"{name}:{auto_class}"] = f"{type(model).__module__.split('.')[0]}.{type(model).__name__}"
    print(json.dumps(loaded))
    """
)


def test_every_auto_class_is_listed_and_loads_without_the_package(tmp_path):
    torch.manual_seed(0)
    seq2seq_config = SimpleAttnMarianConfig.from_preset("hc-sa", **TINY_MARIAN)
    models = [SimpleAttnMarianMTModel(seq2seq_config), SimpleAttnMarianModel(seq2seq_config)]
    for model_class in (
        SimpleAttnBertModel,
        SimpleAttnBertForMaskedLM,
        SimpleAttnBertForSequenceClassification,
        SimpleAttnBertForTokenClassification,
    ):
        models.append(model_class(SimpleAttnBertConfig(attention_layout={"encoder_self": "hard_coded"}, **TINY_BERT)))
    root = tmp_path / "checkpoints"
    for model in models:
        model.save_pretrained(root / type(model).__name__)
        auto_map = json.loads((root / type(model).__name__ / "config.json").read_text())["auto_map"]
        expected = SEQ2SEQ_AUTO_MAP if isinstance(model.config, SimpleAttnMarianConfig) else BERT_AUTO_MAP
        assert auto_map == expected, type(model).__name__

    loaded = run_without_package(["-c", REMOTE_LOAD, str(root)], tmp_path)
    expected = {
        f"{type(model).__name__}:{auto_class}": f"transformers_modules.{reference.split('.')[1]}"
        for model in models
        for auto_class, reference in (
            SEQ2SEQ_AUTO_MAP if isinstance(model.config, SimpleAttnMarianConfig) else BERT_AUTO_MAP
        ).items()
        if auto_class != "AutoConfig"
    }
    assert loaded == expected
