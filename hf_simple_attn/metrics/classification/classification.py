"""Accuracy, F1 and Matthews correlation in one `evaluate` metric, GLUE style, without the Hub.

`evaluate` copies only this file into its module cache before importing it, so the F1 and MCC
functions are repeated here rather than imported from the `f1` and `matthews_correlation`
modules.
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """\
Accuracy, F1 and the Matthews correlation coefficient (MCC) of integer class labels in one
compute, like the GLUE metric. F1 = 2 TP / (2 TP + FP + FN) per class ("binary": the class
`pos_label`; "macro": the mean over classes). MCC is Gorodkin's multi-class form, equal to the
usual MCC for two classes.
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of predicted integer labels.
    references: list of reference integer labels.
    average: F1 averaging, "binary" (default) or "macro".
    pos_label: the positive class for "binary" F1 (default 1).
    labels: the classes averaged by "macro" F1 (default: all labels seen).
Returns:
    accuracy, f1 and matthews_correlation.
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
    seen = np.union1d(predictions, references)
    if average == "binary":
        if len(seen) > 2:
            raise ValueError(f"average='binary' needs at most two classes, got {seen.tolist()}; use 'macro'")
        return class_f1(predictions, references, pos_label)
    if average == "macro":
        classes = seen if labels is None else labels
        return float(np.mean([class_f1(predictions, references, label) for label in classes]))
    raise ValueError(f"average must be 'binary' or 'macro', got {average!r}")


def matthews_correlation(predictions, references):
    """Multi-class MCC from the confusion matrix (equal to the usual MCC for two classes)."""
    classes, indices = np.unique(np.concatenate([references, predictions]), return_inverse=True)
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    np.add.at(confusion, (indices[: len(references)], indices[len(references) :]), 1.0)
    true_counts = confusion.sum(axis=1)
    predicted_counts = confusion.sum(axis=0)
    total = confusion.sum()
    numerator = np.trace(confusion) * total - true_counts @ predicted_counts
    denominator = np.sqrt(
        (total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts)
    )
    return float(numerator / denominator) if denominator else 0.0


class Classification(evaluate.Metric):
    """Accuracy, F1 and MCC of integer class labels, computed together."""

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
        predictions = np.asarray(predictions)
        references = np.asarray(references)
        return {
            "accuracy": float(np.mean(predictions == references)),
            "f1": f1_score(predictions, references, average=average, pos_label=pos_label, labels=labels),
            "matthews_correlation": matthews_correlation(predictions, references),
        }
