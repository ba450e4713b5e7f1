"""The memos (`hf_simple_attn/modeling/memo.py`): one budget table, least recently used tensors dropped beyond a
budget, every process-wide memo emptied by `clear_memos` (issue 38)."""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from hf_simple_attn.modeling.memo import MEMO_BUDGETS, PROCESS_MEMOS, TensorMemo, clear_memos, memo_for

from conftest import make_model


REPO = Path(__file__).resolve().parent.parent
# Every family that keeps a memo, side by side; a decoder attention mask takes RAN's fused path (its identity keys).
LAYOUT = {
    "encoder_self": {"kind": "local", "masks": "band-2"},
    "decoder_self": {"kind": "recurrent"},
    "cross": {"kind": "hard_coded"},
}


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_memo_is_made_from_the_budget_table(hooks):
    """Each row of `MEMO_BUDGETS` is used, every memo the modeling code names has a row, and no memo is made with a
    budget of its own (every `TensorMemo(...)` outside memo.py names its row)."""
    users = hooks.memo_users()
    assert set(users) == set(MEMO_BUDGETS)
    for path in sorted((REPO / "hf_simple_attn" / "modeling").glob("*.py")):
        if path.name != "memo.py":
            source = path.read_text(encoding="utf-8")
            assert len(re.findall(r"\bTensorMemo\(", source)) == len(re.findall(r'\bTensorMemo\("\w+"\)', source))
    assert set(PROCESS_MEMOS) == {name for name, budget in MEMO_BUDGETS.items() if not budget.per_layer}
    with pytest.raises(KeyError):
        TensorMemo("no_such_memo")


def test_a_memo_drops_the_least_recently_used_beyond_its_budget(monkeypatch):
    memo = TensorMemo("constants")
    monkeypatch.setattr(memo, "max_bytes", 8)  # two float32 scalars
    builds = []

    def build(value):
        def made():
            builds.append(value)
            return torch.tensor([value], dtype=torch.float32)

        return made

    memo.get_or_build(("a",), build(1.0))
    memo.get_or_build(("b",), build(2.0))
    assert memo.get_or_build(("a",), build(-1.0)).item() == 1.0  # kept, and now the most recent
    memo.get_or_build(("c",), build(3.0))  # drops b, the least recently used
    assert [key[0] for key in memo.tensors] == ["a", "c"] and builds == [1.0, 2.0, 3.0]
    with torch.inference_mode():  # a tensor made in inference mode is kept apart
        memo.get_or_build(("a",), build(4.0))
    assert builds == [1.0, 2.0, 3.0, 4.0] and memo.held_bytes() == 8
    big = memo.get_or_build(("big",), lambda: torch.zeros(4))  # over the budget alone: kept, all others dropped
    assert list(memo.tensors.values()) == [big]


def test_clear_memos_empties_every_process_memo_and_the_memos_fill_again():
    model = make_model(layout=LAYOUT)
    source, target = torch.randint(4, 20, (2, 7)), torch.randint(4, 20, (2, 5))
    source_mask = torch.ones_like(source)
    source_mask[0, 5:] = 0

    def forward():
        with torch.no_grad():
            plain = model(input_ids=source, decoder_input_ids=target).logits
            padded = model(
                input_ids=source,
                attention_mask=source_mask,
                decoder_input_ids=target,
                decoder_attention_mask=torch.ones_like(target),
            ).logits
        return plain, padded

    clear_memos()
    first = forward()
    assert all(memo.tensors for memo in PROCESS_MEMOS.values()), {n: len(m.tensors) for n, m in PROCESS_MEMOS.items()}
    clear_memos()
    assert not any(memo.tensors for memo in PROCESS_MEMOS.values())
    again = forward()
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert memo_for("gaussian_tables").tensors
