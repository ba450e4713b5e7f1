"""Corpus chrF / chrF++ computed by sacrebleu, as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import sacrebleu


_DESCRIPTION = """\
Character n-gram F-score (chrF, Popović 2015) computed by `sacrebleu.CHRF`; with word_order=2
it is chrF++ (Popović 2017). The result carries sacrebleu's signature string.
"""

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings.
    references: per prediction, one reference string or a list of reference strings (the
        number of references may differ between predictions).
    char_order: longest character n-gram (default 6).
    word_order: longest word n-gram (default 0; 2 gives chrF++).
    beta: weight of recall against precision (default 2).
    lowercase: compare lowercased text.
    whitespace: keep whitespace in character n-grams.
    eps_smoothing: use the smoothing of the original chrF++ script instead of sacrebleu's.
Returns:
    score, char_order, word_order, beta and signature.
"""


def reference_streams(references):
    """Turn per-prediction references into sacrebleu's reference streams.

    sacrebleu takes one list per reference position, each as long as the predictions; a
    prediction with fewer references gets None there, which sacrebleu skips.
    """
    per_prediction = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
    if not per_prediction or min(len(refs) for refs in per_prediction) == 0:
        raise ValueError("every prediction needs at least one reference")
    n_streams = max(len(refs) for refs in per_prediction)
    return [[refs[i] if i < len(refs) else None for refs in per_prediction] for i in range(n_streams)]


class Chrf(evaluate.Metric):
    """chrF and chrF++ with sacrebleu's implementation and signature."""

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
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(
        self,
        predictions,
        references,
        char_order=6,
        word_order=0,
        beta=2,
        lowercase=False,
        whitespace=False,
        eps_smoothing=False,
    ):
        chrf = sacrebleu.CHRF(
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
            eps_smoothing=eps_smoothing,
        )
        result = chrf.corpus_score(list(predictions), reference_streams(references))
        return {
            "score": result.score,
            "char_order": result.char_order,
            "word_order": result.word_order,
            "beta": result.beta,
            "signature": str(chrf.get_signature()),
        }
