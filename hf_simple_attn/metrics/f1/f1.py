"""F1 score (binary or macro-averaged) as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """\
F1 = 2 TP / (2 TP + FP + FN), the harmonic mean of precision and recall (0 where a class is
never predicted nor present). "binary" scores the class `pos_label`; "macro" averages the
per-class F1 over `labels` (by default every label seen in predictions or references).
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of predicted integer labels.
    references: list of reference integer labels.
    average: "binary" (default) or "macro".
    pos_label: the positive class for "binary" (default 1).
    labels: the classes averaged by "macro" (default: all labels seen).
Returns:
    f1: float in [0, 1].
"""


def class_f1(predictions, references, label):
    """F1 of one class, treating `label` as positive and every other label as negative."""
    predicted = predictions == label
    actual = references == label
    true_positives = np.sum(predicted & actual)
    false_positives = np.sum(predicted & ~actual)
    false_negatives = np.sum(~predicted & actual)
    denominator = 2 * true_positives + false_positives + false_negatives
    return float(2 * true_positives / denominator) if denominator else 0.0


def f1_score(predictions, references, average="binary", pos_label=1, labels=None):
    """Binary F1 of `pos_label`, or the macro average of the per-class F1 over `labels`."""
    predictions = np.asarray(predictions)
    references = np.asarray(references)
    seen = np.union1d(predictions, references)
    if average == "binary":
        if len(seen) > 2:
            raise ValueError(f"average='binary' needs at most two classes, got {seen.tolist()}; use 'macro'")
        return class_f1(predictions, references, pos_label)
    if average == "macro":
        classes = seen if labels is None else labels
        return float(np.mean([class_f1(predictions, references, label) for label in classes]))
    raise ValueError(f"average must be 'binary' or 'macro', got {average!r}")


class F1(evaluate.Metric):
    """Binary or macro-averaged F1 for integer class labels."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            format="numpy",
        )

    def _compute(self, predictions, references, average="binary", pos_label=1, labels=None):
        return {"f1": f1_score(predictions, references, average=average, pos_label=pos_label, labels=labels)}
