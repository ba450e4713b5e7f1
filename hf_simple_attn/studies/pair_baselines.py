"""What a sentence-pair study's data allows a local encoder, on the study's own data and tokenizer.

- Reach: a band-k encoder of L layers lets a token read at most L * k positions away. The share of validation pairs
  whose first sentence ([CLS] and [SEP] included) is within that reach (every token of the second sentence can then
  read the first sentence's token at its own offset), and whose whole pair is (the first token then reads them all).
- The length rule: one threshold on |log(words1 / words2)|, chosen on the training pairs, scored on validation and
  test: what a classifier scores from the two lengths alone, without comparing a word.
"""

import math

from transformers import AutoTokenizer

from .runner import Study, script_data_arguments


def length_gap(first: str, second: str) -> float:
    """|log(words of first / words of second)|: 0 for equal lengths."""
    return abs(math.log(max(len(first.split()), 1) / max(len(second.split()), 1)))


def length_rule(pairs: list[tuple[str, str]], is_positive: list[bool]) -> tuple[float, float]:
    """(threshold, accuracy on these pairs) of the best rule "positive when the length gap is below the threshold":
    one sweep over the gaps in order, each candidate threshold halfway between two distinct gaps."""
    scored = sorted(zip((length_gap(a, b) for a, b in pairs), is_positive))
    correct = sum(not positive for _, positive in scored)  # threshold 0: every pair called negative
    best = (0.0, correct)
    for index, (gap, positive) in enumerate(scored):
        correct += 1 if positive else -1
        next_gap = scored[index + 1][0] if index + 1 < len(scored) else gap + 1
        if next_gap > gap and correct > best[1]:
            best = ((gap + next_gap) / 2, correct)
    return best[0], best[1] / len(scored)


def rule_accuracy(pairs: list[tuple[str, str]], is_positive: list[bool], threshold: float) -> float:
    hits = sum((length_gap(a, b) < threshold) == positive for (a, b), positive in zip(pairs, is_positive))
    return hits / len(pairs)


def reach_shares(tokenizer, pairs: list[tuple[str, str]], reaches: list[int]) -> dict:
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    first_lengths = [len(ids) for ids in tokenizer(firsts)["input_ids"]]  # [CLS] first [SEP]
    pair_lengths = [len(ids) for ids in tokenizer(firsts, seconds)["input_ids"]]
    count = len(pairs)
    return {
        "first_sentence_tokens_mean": round(sum(first_lengths) / count, 1),
        "pair_tokens_mean": round(sum(pair_lengths) / count, 1),
        "first_sentence_within_reach": {r: round(sum(n <= r for n in first_lengths) / count, 4) for r in reaches},
        "pair_within_first_token_reach": {r: round(sum(n <= r + 1 for n in pair_lengths) / count, 4) for r in reaches},
    }


def pair_baselines(study: Study, reaches: list[int], positive_label: str = "equivalent") -> dict:
    """The reach shares (with the study's tokenizer; absent when the runs train their own) and the length rule, on
    the pairs of the study's train, validation and test splits as its script reads them."""
    task, model_args, data_args = script_data_arguments(study)
    raw_datasets = task.load_raw_datasets(data_args, model_args, True)
    first_key, second_key = task.sentence_keys(data_args.task_name, raw_datasets["train"].column_names)
    if second_key is None:
        raise ValueError(f"study {study.name!r}: a single-sentence task; the baselines need sentence pairs")
    label_list, label_to_id = task.read_labels(raw_datasets["train"], data_args.task_name)
    if label_list is None or positive_label not in map(str, label_list):
        raise ValueError(
            f"study {study.name!r}: positive_label={positive_label!r} is not a label; labels: {label_list}"
        )
    # Class ids name their label through label_list; local files hold the labels themselves.
    names = label_list if label_to_id is None else None
    splits = {
        name: (
            list(zip(raw_datasets[name][first_key], raw_datasets[name][second_key])),
            [str(label if names is None else names[label]) == positive_label for label in raw_datasets[name]["label"]],
        )
        for name in ("train", "validation", "test")
    }
    threshold, train_accuracy = length_rule(*splits["train"])
    result = {"study": study.name, "validation_pairs": len(splits["validation"][0])}
    if model_args.model_name_or_path is not None:
        tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
        result.update(reach_shares(tokenizer, splits["validation"][0], reaches))
    result["length_rule"] = {
        "threshold": round(threshold, 4),
        "train_accuracy": round(train_accuracy, 4),
        "validation_accuracy": round(rule_accuracy(*splits["validation"], threshold), 4),
        "test_accuracy": round(rule_accuracy(*splits["test"], threshold), 4),
    }
    return result
