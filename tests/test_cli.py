"""The CLI's preset listing and layout table (the README's first command)."""

from hf_simple_attn.cli import main


def test_presets_lists_every_preset_with_its_source(capsys):
    main(["presets", "--kind", "seq2seq"])
    out = capsys.readouterr().out
    assert "sh-x-spread" in out and "HC-SA/-FF" in out


def test_describe_prints_the_layout_table_and_parameter_count(capsys):
    main(["describe", "sh-x", "--size", "small"])
    out = capsys.readouterr().out
    assert "| 2 | 4 × hard_coded (offsets -1,+1) | 4 × hard_coded (offsets -1,+0) | 1 × dot | yes | yes |" in out
    assert "| 0 | 4 × hard_coded (offsets -1,+1) | 4 × hard_coded (offsets -1,+0) | none | yes | yes |" in out
    assert "parameters, of which attention" in out
