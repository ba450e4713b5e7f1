"""The CLI's preset listing and layout table (`hf-simple-attn presets`, `hf-simple-attn describe`)."""

from hf_simple_attn.cli import main


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


def test_layout_table_shows_per_head_lists_once():
    from hf_simple_attn import SimpleAttnMarianConfig
    from hf_simple_attn.analysis import layout_table

    config = SimpleAttnMarianConfig.from_preset("local-4tied", encoder_layers=1, decoder_layers=1, d_model=64,
                                                encoder_attention_heads=8, decoder_attention_heads=8)
    assert "| 0 | 8 × local (masks identity,band-2; query_key_sets 4) | 8 × dot | 8 × dot | yes | yes |" in layout_table(config)
