"""The tolerance policy of docs/contributing.md, kept true: no floating-point comparison in tests/ uses a tolerance
tuned on one machine, and every module that compares formulations of the same maths is one CI runs again on other
CPU kernels (the `numerics` marker)."""

import ast
from pathlib import Path

import pytest
import torch

from conftest import assert_same_maths, rounding_tolerance


pytestmark = pytest.mark.numerics

TESTS = Path(__file__).resolve().parent
COMPARISONS = {"assert_close", "allclose", "isclose", "assert_allclose"}
TOLERANCES = {"atol", "rtol"}
POLICY_HELPERS = {"assert_same_maths", "assert_hand_computed", "model_reductions"}
EXPLAINED = "# tolerance:"


def literal_value(node: ast.expr, constants: dict[str, float]) -> float | None:
    """The number `node` writes as a literal (or names as a module-level literal constant), else None."""
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, int | float) else None


def module_constants(tree: ast.Module) -> dict[str, float]:
    constants = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            value = literal_value(statement.value, {})
            if isinstance(target, ast.Name) and value is not None:
                constants[target.id] = value
    return constants


def unexplained_tolerances(path: Path) -> list[str]:
    """`file:line` of each comparison with a nonzero literal tolerance and no `# tolerance:` comment on its lines or
    in the comment block right above it."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    constants = module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in COMPARISONS:
            continue
        literals = [literal_value(keyword.value, constants) for keyword in node.keywords if keyword.arg in TOLERANCES]
        if not any(value for value in literals if value is not None):
            continue
        first = node.lineno - 1
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1  # the comment block right above the call
        if not any(EXPLAINED in line for line in lines[first : node.end_lineno]):
            found.append(f"{path.name}:{node.lineno}")
    return found


def called_names(function: ast.AST) -> set[str]:
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    }


def marks_numerics(decorators: list[ast.expr]) -> bool:
    return any("numerics" in ast.unparse(decorator) for decorator in decorators)


def module_marks_numerics(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(statement, ast.Assign)
        and any(getattr(target, "id", "") == "pytestmark" for target in statement.targets)
        and "numerics" in ast.unparse(statement.value)
        for statement in body
    )


def unmarked_comparing_tests(path: Path) -> list[str]:
    """`file::test` of each test that compares formulations (calls a policy helper, itself or through the module's
    functions) without the `numerics` marker (on the module, its class or itself)."""
    tree = ast.parse(path.read_text())
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    comparing = set(POLICY_HELPERS)
    while True:  # the module's functions that reach a helper, however indirectly
        more = {function.name for function in functions if called_names(function) & comparing} - comparing
        if not more:
            break
        comparing |= more
    if module_marks_numerics(tree.body):
        return []
    found = []
    for scope in [tree, *[node for node in tree.body if isinstance(node, ast.ClassDef)]]:
        if isinstance(scope, ast.ClassDef) and (
            module_marks_numerics(scope.body) or marks_numerics(scope.decorator_list)
        ):
            continue
        for function in scope.body:
            if (
                isinstance(function, ast.FunctionDef)
                and function.name.startswith("test")
                and called_names(function) & comparing
                and not marks_numerics(function.decorator_list)
            ):
                found.append(f"{path.name}::{function.name}")
    return found


TEST_MODULES = sorted(path for path in TESTS.glob("test_*.py"))


def test_no_comparison_uses_a_tolerance_tuned_on_one_machine():
    found = [place for path in TEST_MODULES for place in unexplained_tolerances(path)]
    assert found == [], (
        f"literal atol/rtol without a `{EXPLAINED}` comment at {found}: compare with conftest's assert_same_maths "
        "(float64 where the code allows), assert_hand_computed or sampling_tolerance (docs/contributing.md)"
    )


def test_tests_comparing_formulations_run_on_other_cpu_kernels_too():
    unmarked = [test for path in TEST_MODULES for test in unmarked_comparing_tests(path)]
    assert unmarked == [], f"{unmarked} compare formulations but lack the `numerics` marker (docs/contributing.md)"


def test_the_policy_check_finds_a_bare_tolerance_and_accepts_an_explained_one(tmp_path):
    bare = tmp_path / "test_bare.py"
    bare.write_text("ATOL = 1e-6\nassert_close(a, b, atol=ATOL, rtol=0)\nassert_close(a, b, atol=0, rtol=0)\n")
    explained = tmp_path / "test_explained.py"
    explained.write_text("# tolerance: int8 weights round to 1/127 of their range\nassert_close(a, b, atol=0.05)\n")
    assert unexplained_tolerances(bare) == ["test_bare.py:2"]
    assert unexplained_tolerances(explained) == []


def test_the_marker_check_follows_helpers_through_the_modules_functions(tmp_path):
    module = tmp_path / "test_module.py"
    module.write_text(
        "def compare(a, b):\n    assert_same_maths(a, b, reduction=2)\n\n"
        "def test_unmarked():\n    compare(1, 1)\n\n"
        "@pytest.mark.numerics\ndef test_marked():\n    compare(1, 1)\n\n"
        "def test_exact():\n    assert 1 == 1\n"
    )
    assert unmarked_comparing_tests(module) == ["test_module.py::test_unmarked"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rounding_tolerance_bounds_sums_in_any_order(dtype):
    """Sums of the same 64 terms in three orders differ by less than one reduction's bound, relative to the sum of the
    terms' magnitudes, and `assert_same_maths` accepts them."""
    generator = torch.Generator().manual_seed(0)
    terms = torch.randn(64, 4096, generator=generator, dtype=torch.float64).to(dtype)
    in_order = terms.sum(0)
    magnitude = terms.abs().sum(0)
    for reordered in (terms.flip(0).cumsum(0)[-1], terms[torch.randperm(64, generator=generator)].sum(0)):
        assert ((reordered - in_order).abs() <= rounding_tolerance(dtype, 64) * magnitude).all()
        assert_same_maths(reordered, in_order, reduction=64)


def test_a_real_difference_is_caught_in_float64_at_a_whole_model_bound():
    """At the bound of a whole tiny model (64 terms, 51 chained reductions) float64 leaves about 7e-13: a difference
    of 1e-9, far smaller than any masking or indexing error, still fails."""
    logits = torch.randn(2, 5, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert rounding_tolerance(torch.float64, 64, 51) < 1e-12
    with pytest.raises(AssertionError):
        assert_same_maths(logits + 1e-9, logits, reduction=64, depth=51)


def test_infinities_must_match_and_do_not_widen_the_tolerance():
    """Scores with -inf at banned tokens: the scale comes from the finite values, so 5 vs 0 next to -inf fails."""
    banned = float("-inf")
    assert_same_maths(torch.tensor([1.0, banned]), torch.tensor([1.0, banned]), reduction=4)
    with pytest.raises(AssertionError):
        assert_same_maths(torch.tensor([5.0, banned]), torch.tensor([0.0, banned]), reduction=4)
    with pytest.raises(AssertionError):
        assert_same_maths(torch.tensor([1.0, 0.0]), torch.tensor([1.0, banned]), reduction=4)
