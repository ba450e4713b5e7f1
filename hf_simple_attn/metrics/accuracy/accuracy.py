"""Classification accuracy as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """\
Accuracy: the fraction of predictions equal to their reference label.
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of predicted integer labels.
    references: list of reference integer labels.
Returns:
    accuracy: float in [0, 1].
"""


class Accuracy(evaluate.Metric):
    """Fraction of correct predictions."""

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

    def _compute(self, predictions, references):
        return {"accuracy": float(np.mean(np.asarray(predictions) == np.asarray(references)))}
