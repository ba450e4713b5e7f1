"""F1 as an `evaluate` metric that needs no Hub download: `sklearn.metrics.f1_score`, with the arguments of
evaluate's own `f1` module (`labels`, `pos_label`, `average`, `sample_weight`; config "multilabel")."""

import datasets
import evaluate
import numpy as np
from sklearn.metrics import f1_score


_DESCRIPTION = """\
F1 = 2 * precision * recall / (precision + recall), the harmonic mean of precision and recall.
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: predicted integer labels (lists of 0/1 labels with the "multilabel" configuration).
    references: reference labels, in the same form.
    labels: the labels averaged when `average` is not "binary" (and their order when it is None). Default: all seen.
    pos_label: the positive class for "binary". Default 1.
    average: "binary" (default), "micro", "macro", "weighted", "samples" (multilabel) or None (one score per label).
    sample_weight: one weight per example. Default None.
Returns:
    f1: float, or an array of per-label scores when `average` is None.
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


class F1(evaluate.Metric):
    """F1 score, computed by scikit-learn."""

    def _info(self):
        label = datasets.Value("int64")
        if self.config_name == "multilabel":
            label = datasets.Sequence(label)
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features({"predictions": label, "references": label}),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.f1_score.html"],
        )

    def _compute(self, predictions, references, labels=None, pos_label=1, average="binary", sample_weight=None):
        score = f1_score(
            references, predictions, labels=labels, pos_label=pos_label, average=average, sample_weight=sample_weight
        )
        return {"f1": float(score) if np.size(score) == 1 else score}
