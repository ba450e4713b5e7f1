"""Offline metrics: shipped `evaluate` modules agree with sacrebleu, rouge_score, scikit-learn and hand counts."""

import math
import os
import time


os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_EVALUATE_OFFLINE"] = "1"

import pytest


HYPOTHESES = [
    "The cat sat on the mat.",
    "There is a dog in the garden today.",
    "Open the file menu and choose Save As.",
    "He reads a book every evening",
]
REFERENCES = [
    "The cat sat on a mat.",
    "A dog is in the garden today.",
    "Open the File menu and select Save As.",
    "Every evening he reads a book.",
]
SECOND_REFERENCES = [
    "A cat was sitting on the mat.",
    "Today there is a dog in the garden.",
    "Choose Save As from the File menu.",
    "He reads a book each evening.",
]

# Binary example, counted by hand: TP = 3 (positions 1, 4, 5), TN = 3 (0, 3, 7),
# FP = 1 (6), FN = 1 (2). accuracy = 6/8; F1 = 2*3 / (2*3 + 1 + 1) = 0.75;
# MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (9 - 1) / sqrt(4*4*4*4) = 0.5.
BINARY_PREDICTIONS = [0, 1, 0, 0, 1, 1, 1, 0]
BINARY_REFERENCES = [0, 1, 1, 0, 1, 1, 0, 0]

# Three classes, counted by hand: correct at positions 0, 2, 3, 4, so accuracy = 4/6.
# Per-class F1 = 2TP / (2TP + FP + FN): class 0: 2/4, class 1: 4/5, class 2: 2/3; macro = 59/90.
# MCC (Gorodkin): c = 4 correct, s = 6, true counts t = (2, 2, 2), predicted counts p = (2, 3, 1);
# (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)) = (24 - 12) / sqrt((36 - 14)(36 - 12)) = 12 / sqrt(528).
MULTI_PREDICTIONS = [0, 1, 1, 1, 2, 0]
MULTI_REFERENCES = [0, 0, 1, 1, 2, 2]
MULTI_WEIGHTS = [0.5, 2.0, 1.0, 0.25, 1.5, 3.0]
BINARY_WEIGHTS = [1.0, 0.5, 2.0, 1.0, 0.25, 1.0, 3.0, 0.5]
# Multi-label (the "multilabel" configurations): one 0/1 column per label.
MULTILABEL_PREDICTIONS = [[0, 1, 1], [1, 1, 0], [0, 0, 1], [1, 0, 0], [1, 1, 1]]
MULTILABEL_REFERENCES = [[0, 1, 1], [0, 1, 0], [0, 1, 1], [1, 0, 1], [1, 0, 1]]


@pytest.fixture(scope="module")
def evaluate():
    """`evaluate` itself, imported once here because the import takes about ten seconds."""
    import evaluate

    return evaluate


@pytest.fixture(scope="module")
def metrics(evaluate):
    """The package's metrics module, imported after `evaluate`."""
    from hf_simple_attn import metrics

    return metrics


def test_every_metric_loads_by_name_offline_and_fast(metrics):
    for name in metrics.METRIC_NAMES:
        assert (metrics.metric_path(name) / "__init__.py").is_file()
        start = time.perf_counter()
        metric = metrics.load_metric(name)
        assert time.perf_counter() - start < 5.0
        assert metric.name == name


def test_prefer_hub_does_not_touch_the_hub_when_offline(metrics):
    start = time.perf_counter()
    metric = metrics.load_metric("accuracy", prefer_hub=True)
    assert time.perf_counter() - start < 5.0
    assert metric.compute(predictions=[1, 0], references=[1, 1]) == {"accuracy": 0.5}


def test_unknown_metric_name_is_refused(metrics):
    with pytest.raises(ValueError, match="Unknown metric"):
        metrics.load_metric("bleurt")


def test_bleu_equals_sacrebleu_and_has_signature(metrics):
    import sacrebleu

    result = metrics.load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=REFERENCES)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert result["score"] == pytest.approx(expected.score)
    assert result["counts"] == expected.counts
    assert result["totals"] == expected.totals
    assert result["precisions"] == pytest.approx(expected.precisions)
    assert result["bp"] == pytest.approx(expected.bp)
    assert (result["sys_len"], result["ref_len"]) == (expected.sys_len, expected.ref_len)
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_bleu_with_several_and_variable_references(metrics):
    import sacrebleu

    bleu = metrics.load_metric("sacrebleu")
    both = [[first, second] for first, second in zip(REFERENCES, SECOND_REFERENCES)]
    result = bleu.compute(predictions=HYPOTHESES, references=both)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES, SECOND_REFERENCES])
    assert result["score"] == pytest.approx(expected.score)
    assert result["signature"].startswith("nrefs:2|")

    ragged = [both[0], [REFERENCES[1]], both[2], [REFERENCES[3]]]
    second_stream = [SECOND_REFERENCES[0], None, SECOND_REFERENCES[2], None]
    result = bleu.compute(predictions=HYPOTHESES, references=ragged, lowercase=True)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES, second_stream], lowercase=True)
    assert result["score"] == pytest.approx(expected.score)
    assert result["signature"].startswith("nrefs:var|case:lc|")


def test_chrf_and_chrf_plus_plus_equal_sacrebleu(metrics):
    import sacrebleu

    chrf = metrics.load_metric("chrf")
    result = chrf.compute(predictions=HYPOTHESES, references=REFERENCES)
    assert result["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|")

    result = chrf.compute(predictions=HYPOTHESES, references=[[r] for r in REFERENCES], word_order=2)
    expected = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=2)
    assert result["score"] == pytest.approx(expected.score)
    assert "|nw:2|" in result["signature"]


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_equals_rouge_score(metrics, use_stemmer):
    from rouge_score import rouge_scorer

    # Sentences on separate lines, the second summary's in swapped order: rougeLsum matches
    # each reference line on its own, so it scores the swap higher than rougeL does.
    predictions = ["the cats were sitting\non the mat today", "then they slept\ndogs ran in the park"]
    references = [
        "the cat sat on the mat\ntoday it was sunny",
        "the dog was running in a park\nthen they slept",
    ]
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=use_stemmer)
    scores = [scorer.score(ref, pred) for ref, pred in zip(references, predictions)]
    expected = {t: sum(s[t].fmeasure for s in scores) / len(scores) for t in types}

    result = metrics.load_metric("rouge").compute(
        predictions=predictions, references=references, use_stemmer=use_stemmer
    )
    assert result == pytest.approx(expected)
    assert result["rougeLsum"] > result["rougeL"]

    per_example = metrics.load_metric("rouge").compute(
        predictions=predictions, references=references, rouge_types=["rouge1"], use_aggregator=False
    )
    plain = rouge_scorer.RougeScorer(["rouge1"])
    assert per_example["rouge1"] == pytest.approx(
        [plain.score(ref, pred)["rouge1"].fmeasure for ref, pred in zip(references, predictions)]
    )


def test_rouge_with_several_references_takes_the_best(metrics):
    from rouge_score import rouge_scorer

    references = [[REFERENCES[i], SECOND_REFERENCES[i]] for i in range(len(HYPOTHESES))]
    scorer = rouge_scorer.RougeScorer(["rouge2"])
    best = [scorer.score_multi(refs, pred)["rouge2"].fmeasure for refs, pred in zip(references, HYPOTHESES)]
    result = metrics.load_metric("rouge").compute(predictions=HYPOTHESES, references=references)
    assert result["rouge2"] == pytest.approx(sum(best) / len(best))


def test_classification_metrics_on_hand_checked_examples(metrics):
    binary = {"predictions": BINARY_PREDICTIONS, "references": BINARY_REFERENCES}
    assert metrics.load_metric("accuracy").compute(**binary)["accuracy"] == pytest.approx(0.75)
    assert metrics.load_metric("f1").compute(**binary)["f1"] == pytest.approx(0.75)
    mcc = metrics.load_metric("matthews_correlation")
    assert mcc.compute(**binary)["matthews_correlation"] == pytest.approx(0.5)
    assert metrics.load_metric("classification").compute(**binary) == pytest.approx(
        {"accuracy": 0.75, "f1": 0.75, "matthews_correlation": 0.5}
    )

    multi = {"predictions": MULTI_PREDICTIONS, "references": MULTI_REFERENCES}
    expected = {"accuracy": 4 / 6, "f1": 59 / 90, "matthews_correlation": 12 / math.sqrt(528)}
    assert metrics.load_metric("classification").compute(**multi, average="macro") == pytest.approx(expected)
    assert metrics.load_metric("f1").compute(**multi, average="macro")["f1"] == pytest.approx(59 / 90)
    assert mcc.compute(**multi)["matthews_correlation"] == pytest.approx(12 / math.sqrt(528))


def test_classification_metrics_equal_scikit_learn_with_evaluate_arguments(metrics):
    from sklearn import metrics as sk

    multi = {"predictions": MULTI_PREDICTIONS, "references": MULTI_REFERENCES}
    binary = {"predictions": BINARY_PREDICTIONS, "references": BINARY_REFERENCES}
    accuracy = metrics.load_metric("accuracy")
    references, predictions = MULTI_REFERENCES, MULTI_PREDICTIONS
    for kwargs in (
        {"sample_weight": MULTI_WEIGHTS},
        {"normalize": False},
        {"normalize": False, "sample_weight": [2] * 6},
    ):
        expected = sk.accuracy_score(references, predictions, **kwargs)
        assert accuracy.compute(**multi, **kwargs)["accuracy"] == pytest.approx(expected)
    assert accuracy.compute(**multi, normalize=False)["accuracy"] == 4.0

    f1 = metrics.load_metric("f1")
    for kwargs in (
        {"average": "macro"},
        {"average": "micro"},
        {"average": "weighted", "sample_weight": MULTI_WEIGHTS},
        {"average": "macro", "labels": [0, 2]},
    ):
        assert f1.compute(**multi, **kwargs)["f1"] == pytest.approx(sk.f1_score(references, predictions, **kwargs))
    per_class = f1.compute(**multi, average=None)["f1"]
    assert list(per_class) == pytest.approx(list(sk.f1_score(references, predictions, average=None)))
    for kwargs in ({"pos_label": 0}, {"sample_weight": BINARY_WEIGHTS}):
        expected = sk.f1_score(BINARY_REFERENCES, BINARY_PREDICTIONS, **kwargs)
        assert f1.compute(**binary, **kwargs)["f1"] == pytest.approx(expected)

    mcc = metrics.load_metric("matthews_correlation")
    for example, weights in ((multi, MULTI_WEIGHTS), (binary, BINARY_WEIGHTS)):
        expected = sk.matthews_corrcoef(example["references"], example["predictions"], sample_weight=weights)
        assert mcc.compute(**example, sample_weight=weights)["matthews_correlation"] == pytest.approx(expected)

    result = metrics.load_metric("classification").compute(
        **multi, average="macro", normalize=False, sample_weight=MULTI_WEIGHTS
    )
    assert result == pytest.approx(
        {
            "accuracy": sk.accuracy_score(references, predictions, normalize=False, sample_weight=MULTI_WEIGHTS),
            "f1": sk.f1_score(references, predictions, average="macro", sample_weight=MULTI_WEIGHTS),
            "matthews_correlation": sk.matthews_corrcoef(references, predictions, sample_weight=MULTI_WEIGHTS),
        }
    )


def test_multilabel_configurations_equal_scikit_learn(metrics):
    import numpy as np
    from sklearn import metrics as sk

    example = {"predictions": MULTILABEL_PREDICTIONS, "references": MULTILABEL_REFERENCES}
    references, predictions = np.array(MULTILABEL_REFERENCES), np.array(MULTILABEL_PREDICTIONS)
    accuracy = metrics.load_metric("accuracy", config_name="multilabel").compute(**example)["accuracy"]
    assert accuracy == pytest.approx(sk.accuracy_score(references, predictions))
    f1 = metrics.load_metric("f1", config_name="multilabel").compute(**example, average="macro")["f1"]
    assert f1 == pytest.approx(sk.f1_score(references, predictions, average="macro"))
    mcc = metrics.load_metric("matthews_correlation", config_name="multilabel")
    per_label = [sk.matthews_corrcoef(references[:, i], predictions[:, i]) for i in range(references.shape[1])]
    assert mcc.compute(**example)["matthews_correlation"] == pytest.approx(per_label)
    assert mcc.compute(**example, average="macro")["matthews_correlation"] == pytest.approx(np.mean(per_label))


def test_binary_f1_refuses_more_than_two_classes(metrics):
    with pytest.raises(ValueError, match="macro"):
        metrics.load_metric("f1").compute(predictions=MULTI_PREDICTIONS, references=MULTI_REFERENCES)


def test_add_batch_then_compute_equals_one_compute(metrics):
    bleu = metrics.load_metric("sacrebleu")
    whole = bleu.compute(predictions=HYPOTHESES, references=REFERENCES)
    bleu.add_batch(predictions=HYPOTHESES[:2], references=REFERENCES[:2])
    bleu.add_batch(predictions=HYPOTHESES[2:], references=REFERENCES[2:])
    assert bleu.compute() == whole

    classification = metrics.load_metric("classification")
    whole = classification.compute(predictions=BINARY_PREDICTIONS, references=BINARY_REFERENCES)
    for start in range(0, len(BINARY_PREDICTIONS), 3):
        classification.add_batch(
            predictions=BINARY_PREDICTIONS[start : start + 3], references=BINARY_REFERENCES[start : start + 3]
        )
    assert classification.compute() == whole


def test_combine_matches_the_classification_metric(evaluate, metrics):
    names = ("accuracy", "f1", "matthews_correlation")
    combined = evaluate.combine([metrics.load_metric(name) for name in names])
    combined.add_batch(predictions=BINARY_PREDICTIONS[:5], references=BINARY_REFERENCES[:5])
    combined.add_batch(predictions=BINARY_PREDICTIONS[5:], references=BINARY_REFERENCES[5:])
    expected = metrics.load_metric("classification").compute(
        predictions=BINARY_PREDICTIONS, references=BINARY_REFERENCES
    )
    assert combined.compute() == pytest.approx(expected)

    translation = evaluate.combine([metrics.load_metric("sacrebleu"), metrics.load_metric("chrf")], force_prefix=True)
    result = translation.compute(predictions=HYPOTHESES, references=REFERENCES)
    assert {"sacrebleu_score", "sacrebleu_signature", "chrf_score", "chrf_signature"} <= set(result)
