"""Accuracy, F1 and Matthews correlation in one `evaluate` metric, GLUE style, without the Hub.

Each is computed by scikit-learn (`accuracy_score`, `f1_score`, `matthews_corrcoef`) with the arguments
of evaluate's own modules; `sample_weight` applies to all three.
"""

import datasets
import evaluate
import numpy as np
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


_DESCRIPTION = """\
Accuracy, F1 and the Matthews correlation coefficient (MCC) of integer class labels in one compute,
like the GLUE metric.
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: predicted integer labels.
    references: reference integer labels.
    normalize: accuracy as a fraction (default True) or the number of correct predictions.
    labels, pos_label, average: as for F1 (`sklearn.metrics.f1_score`; average "binary" by default).
    sample_weight: one weight per example, for all three metrics. Default None.
Returns:
    accuracy, f1 and matthews_correlation.
"""

_CITATION = """\
@article{scikit-learn,
  title={Scikit-learn: Machine Learning in {P}ython},
  author={Pedregosa, F. and Varoquaux, G. and Gramfort, A. and Michel, V. and Thirion, B. and Grisel, O. and
          Blondel, M. and Prettenhofer, P. and Weiss, R. and Dubourg, V. and Vanderplas, J. and Passos, A. and
          Cournapeau, D. and Brucher, M. and Perrot, M. and Duchesnay, E.},
  journal={Journal of Machine Learning Research},
  volume={12},
  pages={2825--2830},
  year={2011}
}
"""


class Classification(evaluate.Metric):
    """Accuracy, F1 and MCC of integer class labels, computed together by scikit-learn."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(
        self, predictions, references, normalize=True, labels=None, pos_label=1, average="binary", sample_weight=None
    ):
        accuracy = accuracy_score(references, predictions, normalize=normalize, sample_weight=sample_weight)
        f1 = f1_score(
            references, predictions, labels=labels, pos_label=pos_label, average=average, sample_weight=sample_weight
        )
        return {
            "accuracy": float(accuracy),
            "f1": float(f1) if np.size(f1) == 1 else f1,
            "matthews_correlation": float(matthews_corrcoef(references, predictions, sample_weight=sample_weight)),
        }
