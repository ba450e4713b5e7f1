"""Every encoder (BERT-style) preset: padding, save/load, and trust_remote_code without the package."""

import json
import textwrap

import pytest
import torch
from transformers import AutoModelForMaskedLM

import hf_simple_attn
from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertForMaskedLM

from conftest import TINY_BERT, assert_same_maths, model_reductions, run_without_package


PRESETS = hf_simple_attn.list_presets("encoder")
SENTENCES = [[2, 5, 6, 7, 8, 9, 10, 3], [2, 11, 12, 3]]


def make_model(preset):
    torch.manual_seed(0)
    config = SimpleAttnBertConfig.from_preset(preset, **TINY_BERT, initializer_range=0.3, pad_token_id=0)
    return SimpleAttnBertForMaskedLM(config).eval()


def padded():
    width = max(len(s) for s in SENTENCES)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in SENTENCES])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in SENTENCES])
    return ids, mask


@pytest.mark.numerics
@pytest.mark.parametrize("preset", PRESETS)
def test_padded_batch_equals_each_example_alone(preset):
    model = make_model(preset).double()
    ids, mask = padded()
    with torch.no_grad():
        batch = model(input_ids=ids, attention_mask=mask).logits
        for row, sentence in enumerate(SENTENCES):
            alone = model(input_ids=torch.tensor([sentence])).logits
            assert_same_maths(batch[row, : len(sentence)], alone[0], **model_reductions(model.config))


@pytest.mark.parametrize("preset", PRESETS)
def test_save_and_load_round_trip(preset, tmp_path):
    model = make_model(preset)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "simple_attn_bert" and saved["attention_layout"] == model.config.attention_layout
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is SimpleAttnBertForMaskedLM
    ids, mask = padded()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask).logits,
            model(input_ids=ids, attention_mask=mask).logits,
            atol=0,
            rtol=0,
        )


REMOTE_LOAD = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["hf_simple_attn"] = None  # the package must not be importable here
    import torch
    from transformers import AutoModelForMaskedLM
    torch.set_num_threads(1)
    root = sys.argv[1]
    failures = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        expected = torch.load(os.path.join(folder, "expected.pt"))
        model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert "hf_simple_attn" not in type(model).__module__, type(model).__module__
        with torch.no_grad():
            logits = model(input_ids=expected["ids"], attention_mask=expected["mask"]).logits
        if not torch.equal(logits, expected["logits"]):  # the same code on the same weights: the same floats
            failures.append(name)
    print(json.dumps({"loaded": len(os.listdir(root)), "failures": failures}))
    """
)


def test_trust_remote_code_loads_every_encoder_preset_without_the_package(tmp_path):
    root = tmp_path / "checkpoints"
    ids, mask = padded()
    for preset in PRESETS:
        model = make_model(preset)
        model.save_pretrained(root / preset)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        torch.save({"ids": ids, "mask": mask, "logits": logits}, root / preset / "expected.pt")
    loaded = run_without_package(["-c", REMOTE_LOAD, str(root)], tmp_path, timeout=600)
    assert loaded == {"loaded": len(PRESETS), "failures": []}
