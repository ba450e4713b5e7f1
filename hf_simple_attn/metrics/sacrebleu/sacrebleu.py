"""Corpus BLEU computed by sacrebleu, as an `evaluate` metric that needs no Hub download."""

import datasets
import evaluate
import sacrebleu


_DESCRIPTION = """\
Corpus-level BLEU (Papineni et al., 2002) computed by `sacrebleu.BLEU`. The result carries
sacrebleu's signature string, which records the settings (tokenizer, casing, smoothing, number
of references, version) needed to reproduce the score.
"""

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_INPUTS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings.
    references: per prediction, one reference string or a list of reference strings (the
        number of references may differ between predictions).
    smooth_method: "exp" (default), "floor", "add-k" or "none".
    smooth_value: the value used by "floor" and "add-k".
    force: score text that already looks tokenized without a warning.
    lowercase: compare lowercased text.
    tokenize: sacrebleu tokenizer name; None means sacrebleu's default ("13a").
    use_effective_order: skip n-gram orders without any match (meant for single sentences).
Returns:
    score, counts, totals, precisions, bp, sys_len, ref_len and signature.
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


class Sacrebleu(evaluate.Metric):
    """BLEU with sacrebleu's standard tokenization and signature."""

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
        smooth_method="exp",
        smooth_value=None,
        force=False,
        lowercase=False,
        tokenize=None,
        use_effective_order=False,
    ):
        bleu = sacrebleu.BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        result = bleu.corpus_score(list(predictions), reference_streams(references))
        return {
            "score": result.score,
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
            "signature": str(bleu.get_signature()),
        }
