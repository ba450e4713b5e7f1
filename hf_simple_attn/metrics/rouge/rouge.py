"""ROUGE computed by Google's `rouge_score`, as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import numpy as np
from rouge_score import rouge_scorer


_DESCRIPTION = """\
ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures (Lin, 2004) computed by `rouge_score`.
ROUGE-Lsum treats each line as a sentence, so put one sentence per line (joined with "\\n") in
predictions and references. The default `rouge_score` tokenizer lowercases and keeps only a-z
and 0-9, so it suits English text. Aggregation is the plain mean over examples.
"""

_CITATION = """\
@inproceedings{lin-2004-rouge,
    title = "{ROUGE}: A Package for Automatic Evaluation of Summaries",
    author = "Lin, Chin-Yew",
    booktitle = "Text Summarization Branches Out",
    year = "2004",
    pages = "74--81",
}
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of summaries.
    references: per prediction, one reference string or a list of them (the best-scoring
        reference counts, as in `RougeScorer.score_multi`).
    rouge_types: which scores (default rouge1, rouge2, rougeL, rougeLsum).
    use_aggregator: return the mean F-measure per type (default) or one list per type.
    use_stemmer: apply the Porter stemmer before matching.
Returns:
    one F-measure (or list of them) per ROUGE type.
"""

DEFAULT_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


class Rouge(evaluate.Metric):
    """ROUGE F-measures with the reference `rouge_score` implementation."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=[
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
            ],
            codebase_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
        )

    def _compute(self, predictions, references, rouge_types=None, use_aggregator=True, use_stemmer=False):
        rouge_types = list(rouge_types or DEFAULT_ROUGE_TYPES)
        scorer = rouge_scorer.RougeScorer(rouge_types, use_stemmer=use_stemmer)
        per_example = {rouge_type: [] for rouge_type in rouge_types}
        for prediction, reference in zip(predictions, references):
            if isinstance(reference, str):
                scores = scorer.score(reference, prediction)
            else:
                scores = scorer.score_multi(list(reference), prediction)
            for rouge_type in rouge_types:
                per_example[rouge_type].append(scores[rouge_type].fmeasure)
        if not use_aggregator:
            return per_example
        return {rouge_type: float(np.mean(values)) for rouge_type, values in per_example.items()}
