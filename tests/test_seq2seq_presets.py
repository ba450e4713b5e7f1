"""Every seq2seq preset (and a mixed layout): causality, padding, cache, save/load, remote code.

Every registered family, alone and side by side, is covered by `test_family_contract.py`.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_simple_attn
from hf_simple_attn import SimpleAttnMarianMTModel

from conftest import TINY_MARIAN, assert_same_maths, cached_steps, make_model, model_reductions


PAD = TINY_MARIAN["pad_token_id"]
MIXED_LAYOUT = {
    "encoder_self": {"groups": [{"kind": "dot", "num_heads": 2}, {"kind": "hard_coded", "offsets": [-1, 1]}]},
    "decoder_self": [
        {"groups": [{"kind": "hard_coded", "num_heads": 3, "offsets": [-1, 0]}, {"kind": "dot"}]},
        "none",
        {"kind": "hard_coded", "indexing": True, "offsets": [-1]},
    ],
    "cross": {
        "default": {"kind": "hard_coded", "centre": "continuous"},
        "layers": {"last": {"kind": "dot", "num_heads": 2}},
    },
    "decoder_ffn": [True, False, True],
}
LAYOUTS = [(name, None) for name in hf_simple_attn.list_presets("seq2seq")] + [
    ("mixed", MIXED_LAYOUT),
]
IDS = [name for name, _ in LAYOUTS]


SOURCES = [[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0]]
TARGETS = [[PAD, 14, 15, 16, 17, 18], [PAD, 19, 20, 21]]


def right_padded(rows):
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    return ids, mask


@pytest.mark.numerics
@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
def test_decoder_never_sees_later_tokens(preset, layout):
    model = make_model(preset, layout).double()
    source = torch.tensor([SOURCES[0]])
    target = torch.tensor([TARGETS[0]])
    changed = target.clone()
    changed[0, 3:] = torch.tensor([25, 26, 27])
    with torch.no_grad():
        logits = model(input_ids=source, decoder_input_ids=target).logits
        changed_logits = model(input_ids=source, decoder_input_ids=changed).logits
    assert_same_maths(logits[:, :3], changed_logits[:, :3], **model_reductions(model.config))
    assert not torch.allclose(logits[:, 3:], changed_logits[:, 3:])


@pytest.mark.numerics
@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
def test_padded_batch_equals_each_example_alone(preset, layout):
    model = make_model(preset, layout).double()
    source, source_mask = right_padded(SOURCES)
    target, target_mask = right_padded(TARGETS)
    with torch.no_grad():
        batch_logits = model(
            input_ids=source, attention_mask=source_mask, decoder_input_ids=target, decoder_attention_mask=target_mask
        ).logits
        for row, (src, tgt) in enumerate(zip(SOURCES, TARGETS)):
            alone = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits
            assert_same_maths(batch_logits[row, : len(tgt)], alone[0], **model_reductions(model.config))


@pytest.mark.numerics
@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
def test_cached_decoding_equals_full_forward(preset, layout):
    model = make_model(preset, layout).double()
    source, source_mask = right_padded(SOURCES)
    target = torch.tensor([TARGETS[0], TARGETS[1] + [22, 23]])
    with torch.no_grad():
        full = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target).logits
        steps, _ = cached_steps(model, source, source_mask, target)
    assert_same_maths(steps, full, **model_reductions(model.config))


@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_cache_equals_without(preset, layout, num_beams):
    model = make_model(preset, layout)
    source, source_mask = right_padded(SOURCES)
    kwargs = dict(input_ids=source, attention_mask=source_mask, max_new_tokens=8, num_beams=num_beams, do_sample=False)
    with torch.no_grad():
        cached = model.generate(use_cache=True, **kwargs)
        uncached = model.generate(use_cache=False, **kwargs)
    assert cached.tolist() == uncached.tolist()


@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
def test_save_and_load_round_trip(preset, layout, tmp_path):
    model = make_model(preset, layout)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "simple_attn_marian"
    assert saved["attention_layout"] == model.config.attention_layout
    assert saved["auto_map"]["AutoModelForSeq2SeqLM"].endswith("SimpleAttnMarianMTModel")
    assert saved["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"
    for module in ("modeling_simple_attn_marian.py", "attention_hard_coded.py", "pipeline_translation.py"):
        assert (tmp_path / module).exists()
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is SimpleAttnMarianMTModel
    source = torch.tensor([SOURCES[0]])
    target = torch.tensor([TARGETS[0]])
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=source, decoder_input_ids=target).logits,
            model(input_ids=source, decoder_input_ids=target).logits,
            atol=0,
            rtol=0,
        )


@pytest.mark.parametrize("preset, layout", LAYOUTS, ids=IDS)
def test_resize_token_embeddings_resizes_the_logits_bias(preset, layout, tmp_path):
    # Special tokens at low ids, so they survive shrinking the vocabulary below its original 40 entries.
    model = make_model(preset, layout, pad_token_id=2, decoder_start_token_id=2)
    with torch.no_grad():
        model.final_logits_bias.normal_()
    bias = model.final_logits_bias.clone()
    source = torch.tensor([[5, 6, 7, 8, 0]])
    for size in (48, 30):
        model.resize_token_embeddings(size)
        kept = min(size, bias.shape[-1])
        assert model.final_logits_bias.shape == (1, size) and model.config.decoder_vocab_size == size
        torch.testing.assert_close(model.final_logits_bias[:, :kept], bias[:, :kept], rtol=0, atol=0)
        with torch.no_grad():
            logits = model(input_ids=source, decoder_input_ids=torch.tensor([[2, 9, 10]])).logits
            generated = model.generate(input_ids=source, max_new_tokens=3, num_beams=1, do_sample=False)
        assert logits.shape == (1, 3, size) and generated.shape[1] <= 4 and generated.max() < size
    model.save_pretrained(tmp_path)
    reloaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded.final_logits_bias, model.final_logits_bias, rtol=0, atol=0)


REMOTE_LOAD = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["hf_simple_attn"] = None  # the package must not be importable here
    import torch
    from transformers import AutoModelForSeq2SeqLM
    torch.set_num_threads(1)
    root = sys.argv[1]
    failures = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        expected = torch.load(os.path.join(folder, "expected.pt"))
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert "hf_simple_attn" not in type(model).__module__, type(model).__module__
        with torch.no_grad():
            logits = model(input_ids=expected["source"], decoder_input_ids=expected["target"]).logits
            generated = model.generate(input_ids=expected["source"], max_new_tokens=6, num_beams=2)
        if not torch.equal(logits, expected["logits"]) or generated.tolist() != expected["generated"].tolist():
            failures.append(name)
    print(json.dumps({"loaded": len(os.listdir(root)), "failures": failures}))
    """
)


def test_trust_remote_code_loads_every_preset_without_the_package(tmp_path):
    root = tmp_path / "checkpoints"
    for preset, layout in LAYOUTS:
        model = make_model(preset, layout)
        folder = root / preset
        model.save_pretrained(folder)
        source, target = torch.tensor([SOURCES[0]]), torch.tensor([TARGETS[0]])
        with torch.no_grad():
            expected = {
                "source": source,
                "target": target,
                "logits": model(input_ids=source, decoder_input_ids=target).logits,
                "generated": model.generate(input_ids=source, max_new_tokens=6, num_beams=2),
            }
        torch.save(expected, folder / "expected.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    env["HF_HOME"] = str(tmp_path / "hf_home")
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_LOAD, str(root)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"loaded": len(LAYOUTS), "failures": []}
