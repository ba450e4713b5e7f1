"""Matthews correlation coefficient as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """\
Matthews correlation coefficient (MCC), the GLUE metric for CoLA. With K classes it is
Gorodkin's generalisation, computed from the confusion matrix C with c = trace(C), s = total,
t = true counts per class and p = predicted counts per class:
MCC = (c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t)); it is 0 when the denominator is 0.
For two classes this is (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
"""

_CITATION = """\
@article{gorodkin-2004-comparing,
    title = "Comparing two K-category assignments by a K-category correlation coefficient",
    author = "Gorodkin, Jan",
    journal = "Computational Biology and Chemistry",
    volume = "28",
    number = "5",
    pages = "367--374",
    year = "2004",
}
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of predicted integer labels.
    references: list of reference integer labels.
Returns:
    matthews_correlation: float in [-1, 1].
"""


def matthews_correlation(predictions, references):
    """Multi-class MCC from the confusion matrix (equal to the usual MCC for two classes)."""
    predictions = np.asarray(predictions)
    references = np.asarray(references)
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


class MatthewsCorrelation(evaluate.Metric):
    """MCC for integer class labels, binary or multi-class."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            format="numpy",
        )

    def _compute(self, predictions, references):
        return {"matthews_correlation": matthews_correlation(predictions, references)}
