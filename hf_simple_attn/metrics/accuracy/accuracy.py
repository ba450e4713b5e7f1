"""Accuracy as an `evaluate` metric that needs no Hub download: `sklearn.metrics.accuracy_score`, with the
arguments of evaluate's own `accuracy` module (`normalize`, `sample_weight`; config "multilabel")."""

import datasets
import evaluate
from sklearn.metrics import accuracy_score


_DESCRIPTION = """\
Accuracy: the fraction of predictions equal to their reference label (with `sample_weight`, the
weighted fraction). With the "multilabel" configuration a prediction counts only when every label matches.
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: predicted integer labels (lists of 0/1 labels with the "multilabel" configuration).
    references: reference labels, in the same form.
    normalize: if False, the number (weighted sum) of correct predictions instead of the fraction. Default True.
    sample_weight: one weight per example. Default None.
Returns:
    accuracy: float.
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


class Accuracy(evaluate.Metric):
    """Fraction of correct predictions, computed by scikit-learn."""

    def _info(self):
        label = datasets.Value("int64")
        if self.config_name == "multilabel":
            label = datasets.Sequence(label)
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features({"predictions": label, "references": label}),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.accuracy_score.html"],
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        score = accuracy_score(references, predictions, normalize=normalize, sample_weight=sample_weight)
        return {"accuracy": float(score)}
