"""Matthews correlation as an `evaluate` metric that needs no Hub download: `sklearn.metrics.matthews_corrcoef`,
with the arguments of evaluate's own `matthews_correlation` module (`sample_weight`; config "multilabel" with
`average`)."""

import datasets
import evaluate
import numpy as np
from sklearn.metrics import matthews_corrcoef


_DESCRIPTION = """\
Matthews correlation coefficient (MCC), the GLUE metric for CoLA: +1 for perfect predictions, 0 for
chance, -1 for inverse predictions; with more than two classes, Gorodkin's multi-class form. With the
"multilabel" configuration, one MCC per label (column), or their mean with average="macro".
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: predicted integer labels (lists of 0/1 labels with the "multilabel" configuration).
    references: reference labels, in the same form.
    sample_weight: one weight per example. Default None.
    average: "multilabel" only: None (default, one MCC per label) or "macro" (their mean).
Returns:
    matthews_correlation: float in [-1, 1] (a list of floats for multilabel with average=None).
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


class MatthewsCorrelation(evaluate.Metric):
    """MCC, computed by scikit-learn."""

    def _info(self):
        label = datasets.Value("int64")
        if self.config_name == "multilabel":
            label = datasets.Sequence(label)
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features({"predictions": label, "references": label}),
            reference_urls=[
                "https://scikit-learn.org/stable/modules/generated/sklearn.metrics.matthews_corrcoef.html"
            ],
        )

    def _compute(self, predictions, references, sample_weight=None, average=None):
        if self.config_name != "multilabel":
            score = matthews_corrcoef(references, predictions, sample_weight=sample_weight)
            return {"matthews_correlation": float(score)}
        references, predictions = np.asarray(references), np.asarray(predictions)
        if references.ndim != 2 or predictions.ndim != 2:
            raise ValueError("multilabel: predictions and references must be 2-dimensional (examples x labels)")
        scores = [
            float(matthews_corrcoef(references[:, i], predictions[:, i], sample_weight=sample_weight))
            for i in range(references.shape[1])
        ]
        if average == "macro":
            return {"matthews_correlation": float(np.mean(scores))}
        if average is not None:
            raise ValueError(f"average: expected 'macro' or None, got {average!r}")
        return {"matthews_correlation": scores}
