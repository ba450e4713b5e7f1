"""The CLI's preset listing, layout table and export (`hf-simple-attn presets`, `describe`, `export`)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from hf_simple_attn.cli import BROKEN_PIPE_STATUS, main

from conftest import make_model


def test_presets_lists_every_preset_with_its_source(capsys):
    main(["presets", "--kind", "seq2seq"])
    out = capsys.readouterr().out
    assert "sh-x-spread" in out and "HC-SA/-FF" in out


def test_describe_prints_the_layout_table_and_parameter_count(capsys):
    main(["describe", "sh-x", "--size", "small"])
    out = capsys.readouterr().out
    encoder = "4 × hard_coded (offsets -1,+1; sigma 1.0; centre floor)"
    decoder = "4 × hard_coded (offsets -1,+0; sigma 1.0; centre floor)"
    assert f"| 2 | {encoder} | {decoder} | 1 × dot | yes | yes |" in out
    assert f"| 0 | {encoder} | {decoder} | none | yes | yes |" in out
    assert "parameters, of which attention" in out


def test_describe_takes_encoder_presets(capsys):
    main(["describe", "band6", "--size", "small"])  # only an encoder preset
    out = capsys.readouterr().out
    assert "band6 (encoder) at size small:" in out and "parameters, of which attention" in out
    assert "| 2 | 4 × local (masks band-6; query_key_sets 4) | yes |" in out

    main(["describe", "hc-sa", "--size", "small"])  # a preset of both kinds: seq2seq unless asked
    assert "hc-sa (seq2seq) at size small:" in capsys.readouterr().out
    main(["describe", "hc-sa", "--model_kind", "encoder", "--size", "small"])
    out = capsys.readouterr().out
    assert "hc-sa (encoder) at size small:" in out and "| layer | encoder_self | encoder FFN |" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe", "gmm", "--model_kind", "encoder"], "'gmm' is not among the encoder presets"),
        (["describe", "band6", "--size", "opus-mt"], "--size of encoder presets: bert-base, small"),
    ],
)
def test_describe_refuses_a_preset_or_size_of_the_other_kind(capsys, argv, message):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`hf-simple-attn presets | head -1`: the reader is gone before the listing is written."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "hf_simple_attn.cli", "presets"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == BROKEN_PIPE_STATUS
    assert stderr == ""


def test_layout_table_shows_per_head_lists_once():
    from hf_simple_attn import SimpleAttnMarianConfig
    from hf_simple_attn.recipes.layout_table import layout_table

    config = SimpleAttnMarianConfig.from_preset(
        "local-4tied",
        encoder_layers=1,
        decoder_layers=1,
        d_model=64,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
    )
    row = "| 0 | 8 × local (masks identity,band-2; query_key_sets 4) | 8 × dot | 8 × dot | yes | yes |"
    assert row in layout_table(config)


needs_ctranslate2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 missing")
needs_onnxruntime = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "onnxscript")), reason="ONNX missing"
)


def saved_model(preset: str, tokenizer, folder):
    model = make_model(preset)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@needs_ctranslate2
def test_export_ctranslate2_writes_a_model_and_refuses_other_layouts(tmp_path, tiny_tokenizer, capsys):
    main(
        [
            "export",
            str(saved_model("base", tiny_tokenizer, tmp_path / "base")),
            str(tmp_path / "ct2"),
            "--format",
            "ctranslate2",
            "--quantization",
            "int8",
        ]
    )
    assert "ctranslate2 model written to" in capsys.readouterr().out
    assert (tmp_path / "ct2" / "model.bin").is_file()
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "export",
                str(saved_model("hc-sa", tiny_tokenizer, tmp_path / "hc-sa")),
                str(tmp_path / "no"),
                "--format",
                "ctranslate2",
            ]
        )
    assert stop.value.code == 2
    assert "export_onnx" in capsys.readouterr().err and not (tmp_path / "no" / "model.bin").exists()


@needs_onnxruntime
def test_export_onnx_writes_the_encoder_and_decoder_graphs(tmp_path, tiny_tokenizer, capsys):
    main(
        [
            "export",
            str(saved_model("hc-sa", tiny_tokenizer, tmp_path / "hc-sa")),
            str(tmp_path / "onnx"),
            "--format",
            "onnx",
        ]
    )
    assert "onnx model written to" in capsys.readouterr().out
    for graph in ("encoder.onnx", "decoder_with_past.onnx", "output_layer.onnx"):
        assert (tmp_path / "onnx" / graph).is_file()
    main(["export", str(tmp_path / "hc-sa"), str(tmp_path / "onnx8"), "--format", "onnx", "--quantization", "int8"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hc-sa", "onnx", "onnx8"]  # no staging left
    onnx = pytest.importorskip("onnx")
    graph = onnx.load(tmp_path / "onnx8" / "decoder_with_past.onnx").graph
    assert any(weight.data_type == onnx.TensorProto.INT8 for weight in graph.initializer)
    assert (tmp_path / "onnx8" / "tokenizer.json").is_file() and (tmp_path / "onnx8" / "config.json").is_file()
    with pytest.raises(SystemExit) as stop:
        main(
            ["export", str(tmp_path / "hc-sa"), str(tmp_path / "onnx8"), "--format", "onnx", "--quantization", "int8"]
        )
    assert stop.value.code == 2 and "exists" in capsys.readouterr().err
