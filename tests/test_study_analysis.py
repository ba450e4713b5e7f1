"""The papers' analyses (`hf_simple_attn.studies.analysis`): entropy, locality, GMM gates, retrieval agreement,
BLEU by length, plots, `analyze_checkpoint`, `analyze_run` and `hf-simple-attn analyze`."""

import json
import math

import pytest
import torch

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.cli import main
from hf_simple_attn.data.files import DataFileError
from hf_simple_attn.studies.analysis import (
    TokenizationMismatch,
    analyze_checkpoint,
    analyze_run,
    attention_entropy,
    attention_maps,
    base_run_dir_for,
    bleu_by_length,
    check_same_tokenization,
    encode_pairs,
    gmm_gates,
    locality,
    read_pairs,
    retrieval_agreement,
    row_statistics,
    site_masks,
)
from hf_simple_attn.studies.runner import Run, Study

from conftest import TINY_MARIAN


# N(d; 0, 1) at distance d = 0..4 (SPEC); hard-coded rows are not renormalised.
GAUSSIAN = [0.398942, 0.241971, 0.053991, 0.004432, 0.000134]
NINE_TOKENS = "the cat sat on the mat is big"  # 8 words + </s>
PAIRS = [
    ("the cat sat on the mat", "a dog runs fast"),
    ("the dog", "the red car is big and slow"),
    ("a big red tree and a small blue house", "the green tree"),
]


def tiny_config(preset, **options):
    """A preset at TINY_MARIAN's vocabulary, d_model 16, one layer per stack, 2 heads (options override)."""
    sizes = {
        "d_model": 16,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
    }
    return SimpleAttnMarianConfig.from_preset(preset, **{**TINY_MARIAN, **sizes, **options})


def tiny_model(preset, seed=0, **options):
    torch.manual_seed(seed)
    return SimpleAttnMarianMTModel(tiny_config(preset, **options)).eval()


def expected_row(centre, query, length):
    """Renormalised statistics of a σ=1 hard-coded row centred on `centre`, by hand from GAUSSIAN (0 beyond 4)."""
    weights = {j: GAUSSIAN[abs(j - centre)] for j in range(length) if abs(j - centre) <= 4}
    mass = sum(weights.values())
    p = {j: w / mass for j, w in weights.items()}
    return {
        "mass": mass,
        "entropy": -sum(v * math.log(v) for v in p.values()),
        "within_1": sum(v for j, v in p.items() if abs(j - query) <= 1),
        "within_2": sum(v for j, v in p.items() if abs(j - query) <= 2),
        "distance": sum(v * abs(j - query) for j, v in p.items()),
    }


def test_hard_coded_rows_have_the_hand_computed_entropy_and_locality(tiny_tokenizer):
    model = tiny_model("hc-sa")  # encoder heads: offsets -1 (head 0), +1 (head 1), σ = 1
    batch = encode_pairs(tiny_tokenizer, [(NINE_TOKENS, "a dog")])
    weights = attention_maps(model, batch)["encoder_self"][0]
    _, keys, centres = site_masks(batch, "encoder_self")
    stats = row_statistics(weights, keys, centres)
    # Interior rows whose Gaussian centre is position 4 of 0..8: the row holds exactly distances -4..4.
    # Head 0 (offset -1) at i = 5 and head 1 (offset +1) at i = 3: the diagonal is one position from the centre.
    expected = expected_row(centre=4, query=5, length=9)
    assert expected["mass"] == pytest.approx(0.999998, abs=1e-6)  # not renormalised, but the whole Gaussian
    assert expected["within_1"] == pytest.approx((0.398942 + 0.241971 + 0.053991) / 0.999998, abs=1e-6)
    for head, query in ((0, 5), (1, 3)):
        for name, value in expected.items():
            assert stats[name][0, head, query].item() == pytest.approx(value, abs=1e-5), (head, name)
    # The public means run over every row, the border rows cut (mass < 1, not renormalised).
    rows = [[expected_row(i + offset, i, 9) for i in range(9)] for offset in (-1, 1)]
    entropy, near = attention_entropy(model, batch), locality(model, batch)
    for head in (0, 1):
        for name in ("entropy", "mass"):
            mean = sum(row[name] for row in rows[head]) / 9
            assert entropy["encoder_self"][0][name][head] == pytest.approx(mean, abs=2e-4)
        for name in ("within_1", "within_2", "distance"):
            mean = sum(row[name] for row in rows[head]) / 9
            assert near["encoder_self"][0][name][head] == pytest.approx(mean, abs=2e-4)


def test_uniform_heads_have_entropy_log_n_over_real_rows_only(tiny_tokenizer):
    model = tiny_model("base")
    layer = model.model.decoder.layers[0]
    for attention in (model.model.encoder.layers[0].self_attn, layer.self_attn, layer.encoder_attn):
        torch.nn.init.zeros_(attention.q_proj.weight)
        torch.nn.init.zeros_(attention.q_proj.bias)  # all scores 0: softmax is uniform over the allowed keys
    pairs = [("the cat sat", "a dog"), ("the red car is big and slow", "a small blue tree runs")]
    batch = encode_pairs(tiny_tokenizer, pairs)
    (n1, n2), (i1, i2) = batch["attention_mask"].sum(-1).tolist(), batch["decoder_attention_mask"].sum(-1).tolist()
    assert (n1, n2, i1, i2) == (4, 8, 3, 6)
    entropy = attention_entropy(model, batch)
    expected = {
        "encoder_self": (n1 * math.log(n1) + n2 * math.log(n2)) / (n1 + n2),
        "decoder_self": (sum(map(math.log, range(1, i1 + 1))) + sum(map(math.log, range(1, i2 + 1)))) / (i1 + i2),
        "cross": (i1 * math.log(n1) + i2 * math.log(n2)) / (i1 + i2),
    }
    for site, value in expected.items():
        assert entropy[site][0]["entropy"] == pytest.approx([value, value], abs=1e-5)
        assert entropy[site][0]["mass"] == pytest.approx([1.0, 1.0], abs=1e-6)


def test_gmm_gates_are_distributions_over_the_real_target_rows(tiny_tokenizer):
    model = tiny_model("gmm", decoder_layers=2)
    batch = encode_pairs(tiny_tokenizer, PAIRS)
    layers = gmm_gates(model, batch)
    real_rows = int(batch["decoder_attention_mask"].sum())
    assert len(layers) == 2
    for layer in layers:
        gate = layer["gate"]
        assert layer["fusion"] == "gate" and sum(gate["counts"]) == 2 * real_rows  # 2 heads
        assert len(gate["counts"]) == 10 and gate["bin_edges"][0] == 0.0 and gate["bin_edges"][-1] == 1.0
        assert 0.0 <= gate["mean"] <= 1.0 and 0.0 <= gate["std"] <= 0.5
        trend = layer["mean_position"]
        assert sum(trend["count"]) == 2 * real_rows and -1.0 <= trend["correlation"] <= 1.0
        assert all(0.0 < mean < 1.0 for mean in trend["mean"] if mean is not None)  # μ ∈ (0, J)
    assert gmm_gates(tiny_model("gmm-average"), batch)[0]["gate"] is None  # no gate to report


def test_retrieval_agreement_is_total_where_hard_and_dot_heads_see_the_same_states(tiny_tokenizer):
    # One decoder layer, hard retrieval in cross attention only: a dot model with the same weights has the same
    # encoder output and cross queries, and argmax of the scores is argmax of their softmax.
    hard = tiny_model("hard-cross", decoder_attention_heads=4)
    base = tiny_model("base", seed=1, decoder_attention_heads=4)
    base.load_state_dict(hard.state_dict())
    batch = encode_pairs(tiny_tokenizer, PAIRS)
    agreement = retrieval_agreement(hard, base, batch)
    assert list(agreement) == ["cross"]
    assert agreement["cross"][0] == {"heads": [0, 1, 2, 3], "agreement": [1.0] * 4, "mean": 1.0}
    other = retrieval_agreement(hard, tiny_model("base", seed=2, decoder_attention_heads=4), batch)
    assert other["cross"][0]["mean"] < 1.0


def test_different_tokenizations_are_refused(tiny_tokenizer):
    batch = encode_pairs(tiny_tokenizer, PAIRS)
    check_same_tokenization(batch, encode_pairs(tiny_tokenizer, PAIRS))
    with pytest.raises(TokenizationMismatch, match="tokenize the test sentences differently"):
        check_same_tokenization(batch, encode_pairs(tiny_tokenizer, [("the cat sat on a mat", p[1]) for p in PAIRS]))


def test_bleu_by_length_buckets_sources_by_words():
    sources = ["one two three", "w " * 12, "w " * 25, "w " * 10]
    references = ["the cat sat on the mat", "a dog runs fast", "the red car is big", "a small blue house"]
    predictions = [references[0], "completely unrelated words here", references[2], references[3]]
    scores = bleu_by_length(sources, predictions, references, buckets=(10, 20))
    assert list(scores) == ["0-10", "11-20", "21+"]
    assert scores["0-10"] == {"count": 2, "bleu": pytest.approx(100.0)}
    assert scores["11-20"]["count"] == 1 and scores["11-20"]["bleu"] == pytest.approx(0.0)
    assert scores["21+"]["count"] == 1
    empty = {"count": 0, "bleu": None}
    assert bleu_by_length([], [], [], buckets=(5,)) == {"0-5": empty, "6+": empty}
    with pytest.raises(ValueError, match="1 sources, 0 predictions"):
        bleu_by_length(["a"], [], ["a"])


def save(model, tokenizer, folder, predictions=None):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if predictions is not None:
        (folder / "generated_predictions.txt").write_text("\n".join(predictions) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_tokenizer):
    """A checkpoint with GMM and hard retrieval cross heads (hard-coded self attention), and a `base` one."""
    folder = tmp_path_factory.mktemp("runs")
    cross = {"groups": [{"kind": "gaussian_mixture", "num_heads": 2}, {"kind": "hard_retrieval"}]}
    mixed = tiny_model("hc-sa", decoder_attention_heads=4, attention_layout={"cross": cross})
    base = tiny_model("base", decoder_attention_heads=4)
    predictions = [target for _, target in PAIRS]
    return save(mixed, tiny_tokenizer, folder / "mixed", predictions), save(base, tiny_tokenizer, folder / "base")


def test_analyze_checkpoint_writes_every_analysis_and_plot(checkpoints, tmp_path):
    run_dir, base_dir = checkpoints
    analysis = analyze_checkpoint(run_dir, PAIRS, tmp_path / "out", max_sentences=2, base_run_dir=base_dir)
    assert json.loads((tmp_path / "out" / "analysis.json").read_text()) == analysis
    assert analysis["sentences"] == 2 and analysis["base_run_dir"] == str(base_dir)
    assert analysis["retrieval_agreement"]["cross"][0]["heads"] == [2, 3]
    assert len(analysis["entropy"]["cross"][0]["entropy"]) == 4 and analysis["locality"]["encoder_self"][0]
    assert analysis["gmm_gates"][0]["gate"]["mean"] is not None
    assert analysis["bleu_by_length"]["0-10"] == {"count": 3, "bleu": pytest.approx(100.0)}  # all 3 pairs
    assert set(analysis["plots"]) == {
        "entropy.png",
        "locality.png",
        "gmm_gates.png",
        "heatmap-encoder_self-layer0.png",
        "heatmap-decoder_self-layer0.png",
        "heatmap-cross-layer0.png",
    }
    for name in analysis["plots"]:
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_run_writes_json_next_to_the_result_and_plots_apart(checkpoints, tmp_path, monkeypatch, caplog):
    study = Study(
        name="toy",
        task="translation",
        arguments={},
        presets=["hc-sa"],
        seeds={"default": [1]},
        spec_path=tmp_path / "toy.json",
    )
    run = Run("hc-sa", 1)
    study.runs_dir.mkdir(parents=True)
    (study.runs_dir / run.name).symlink_to(checkpoints[0])
    monkeypatch.setattr(
        "hf_simple_attn.studies.analysis.evaluation_texts", lambda study, split: tuple(map(list, zip(*PAIRS)))
    )
    result = study.results_dir / "hc-sa--seed1.json"
    path = analyze_run(study, run, result)
    assert path == study.results_dir / "hc-sa--seed1.analysis.json"
    analysis = json.loads(path.read_text())
    assert analysis["sentences"] == 3 and "retrieval_agreement" not in analysis  # the study has no base run
    assert "hard retrieval heads but no `base` checkpoint" in caplog.text
    assert sorted(p.name for p in study.results_dir.iterdir()) == ["hc-sa--seed1.analysis.json", "plots"]
    assert {p.name for p in (study.results_dir / "plots" / "hc-sa--seed1").iterdir()} == set(analysis["plots"])
    summarization = Study(name="s", task="summarization", arguments={}, presets=["base"], seeds={"default": [1]})
    assert analyze_run(summarization, run, result) is None


def test_a_hard_retrieval_run_is_compared_with_a_base_run_of_another_seed_when_its_own_is_gone(tmp_path):
    study = Study(
        name="toy",
        task="translation",
        arguments={},
        presets=["base", "hard-dec"],
        seeds={"default": [1, 2]},
        spec_path=tmp_path / "toy.json",
    )
    assert base_run_dir_for(study, Run("hard-dec", 1)) is None  # no base run finished
    for seed in (1, 2):
        (study.runs_dir / f"base--seed{seed}").mkdir(parents=True)
    (study.runs_dir / "base--seed2" / "all_results.json").write_text('{"predict_runtime": 1.0}')
    assert base_run_dir_for(study, Run("hard-dec", 1)) == study.runs_dir / "base--seed2"
    (study.runs_dir / "base--seed1" / "all_results.json").write_text('{"predict_runtime": 1.0}')
    assert base_run_dir_for(study, Run("hard-dec", 1)) == study.runs_dir / "base--seed1"
    assert base_run_dir_for(study, Run("hard-dec", 2)) == study.runs_dir / "base--seed2"


def test_cli_analyze_reads_a_jsonl_test_file(checkpoints, tmp_path, capsys):
    test_file = tmp_path / "test.jsonl"
    lines = [json.dumps({"translation": {"en": source, "de": target}}) for source, target in PAIRS]
    test_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    main(
        [
            "analyze",
            str(checkpoints[0]),
            "--test_file",
            str(test_file),
            "--output_dir",
            str(tmp_path / "cli"),
            "--max_sentences",
            "1",
        ]
    )
    assert "1 sentences analysed" in capsys.readouterr().out
    analysis = json.loads((tmp_path / "cli" / "analysis.json").read_text())
    assert analysis["sentences"] == 1 and "retrieval_agreement" not in analysis

    # Bad input: a CLI error naming the file, line and field (or the folder), no traceback.
    missing_folder = tmp_path / "no-such-run"
    for arguments, message in (
        (["--target_lang", "fr"], f"{test_file} line 1: field 'translation.fr' is missing"),
        (["--base_run_dir", str(missing_folder)], f"base_run_dir: {missing_folder} is not a saved checkpoint"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["analyze", str(checkpoints[0]), "--test_file", str(test_file), *arguments])
        assert exit_.value.code == 2 and f"hf-simple-attn analyze: error: {message}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["analyze", str(checkpoints[0]), "--test_file", str(tmp_path / "absent.jsonl")])
    assert f"error: {tmp_path / 'absent.jsonl'}: no such file" in capsys.readouterr().err


def test_read_pairs_reads_the_data_files_the_training_scripts_read(tmp_path):
    flat = tmp_path / "test.tsv"
    flat.write_text("en\tde\nthe house\tdas Haus\n", encoding="utf-8")
    assert read_pairs(flat, "en", "de") == [("the house", "das Haus")]
    nested = tmp_path / "test.jsonl"
    nested.write_text(
        '{"translation": {"en": "a cat", "de": "eine Katze"}}\n{"translation": {"en": "x", "de": " "}}\n'
    )
    with pytest.raises(DataFileError, match=r"test.jsonl line 2: field 'translation.de' is empty"):
        read_pairs(nested, "en", "de")
