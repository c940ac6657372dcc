"""At most two public functions of perf/ and parallel/ compute a step time.

The library prices a step in one place, `step_cost.step_time(cost, chip, ...)`, and
`estimator.estimate(...)` prices a whole deployment's steps with it. Every other function that
speaks of a step builds its *cost* (`StepCost`: FLOPs, bytes, collectives) and leaves the
pricing to `step_time`; the sources' formulas are such views (tests/unit/test_step_cost.py
checks each against the core and against its source's closed form).

This test reads the source of perf/ and parallel/ (no import, no JAX) and finds every public
function or method that prices a step: one that calls `step_time` or `work_time`, directly or
through private helpers of its own module. Apart from the two entry points, each must be
listed below with what it returns instead of a step time. It also refuses public names that
say they are a step time (`..._step_time`, `..._step_seconds`, `..._batch_latency`).
"""

import ast
import re
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "lib" / "inferbook"
PACKAGES = ("perf", "parallel")
PRICING = {"step_time", "work_time"}

ENTRY_POINTS = {"step_cost.step_time", "estimator.estimate"}
# Public functions that price steps to decide something else; none returns a step time.
NOT_A_STEP_TIME = {
    "moe_layouts.crossover_batch": "a batch size: where expert parallelism stops losing",
    "estimate_plan.plan_estimate": "a plan: the layout whose decode step is fastest",
    "bench.run_benchmark": "a benchmark record: measured times beside the roofline's",
    "published_baseline.PointCosts.value": "a published point's quantity (a rate, or a "
                                           "time to first token in ms) for the calibration",
}
STEP_TIME_NAME = re.compile(r"(step_time|step_seconds|step_latency|batch_latency)$")


def _functions(tree: ast.Module):
    """(qualified name, node, public) of each module-level function and class method."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node, not node.name.startswith("_")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    public = not (node.name.startswith("_") or item.name.startswith("_"))
                    yield f"{node.name}.{item.name}", item, public


def _called_names(node: ast.AST) -> set[str]:
    """Names a function calls: `f(...)`, `module.f(...)` and `self.f(...)` all give `f`."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            f = call.func
            if isinstance(f, ast.Name):
                names.add(f.id)
            elif isinstance(f, ast.Attribute):
                names.add(f.attr)
    return names


def _pricing_functions(tree: ast.Module) -> dict[str, bool]:
    """The module's functions that price a step (qualified name -> public)."""
    functions = list(_functions(tree))
    calls = {name: _called_names(node) for name, node, _ in functions}
    private = {name.split(".")[-1] for name, _, public in functions if not public}
    pricing = {name for name, called in calls.items() if called & PRICING}
    grew = True
    while grew:                                   # through the module's private helpers
        reached = {name.split(".")[-1] for name in pricing} & private
        new = {name for name, called in calls.items() if called & reached} - pricing
        pricing |= new
        grew = bool(new)
    return {name: public for name, _, public in functions if name in pricing}


def _modules():
    for package in PACKAGES:
        for path in sorted((LIB / package).glob("*.py")):
            yield path.stem, ast.parse(path.read_text(), str(path))


def public_step_time_functions() -> set[str]:
    found = set()
    for module, tree in _modules():
        for name, public in _pricing_functions(tree).items():
            if public and not (module == "step_cost" and name == "work_time"):
                found.add(f"{module}.{name}")
    return found


def test_only_the_two_entry_points_price_a_step():
    found = public_step_time_functions()
    assert ENTRY_POINTS - {"estimator.estimate"} <= found      # estimate prices via a helper
    unexplained = found - ENTRY_POINTS - set(NOT_A_STEP_TIME)
    assert not unexplained, (
        f"{sorted(unexplained)} price a step: return its StepCost and let "
        "step_cost.step_time price it, or make them private helpers of an entry point")
    assert set(NOT_A_STEP_TIME) <= found, "an exception no longer needed: remove it"


def test_the_estimator_prices_its_steps_with_the_core():
    tree = dict(_modules())["estimator"]
    assert "_estimate_from_plan" in _pricing_functions(tree)
    estimate = next(node for name, node, _ in _functions(tree) if name == "estimate")
    assert "_estimate_from_plan" in _called_names(estimate)


def test_no_public_name_says_it_is_a_step_time():
    named = {f"{module}.{name}" for module, tree in _modules()
             for name, _, public in _functions(tree)
             if public and STEP_TIME_NAME.search(name.split(".")[-1])}
    assert named <= ENTRY_POINTS, f"{sorted(named - ENTRY_POINTS)} name a step time"


@pytest.mark.parametrize("source, flagged", [
    ("from inferbook.perf.step_cost import step_time\n"
     "def f(c, chip):\n    return step_time(c, chip)\n", {"f": True}),
    ("from inferbook.perf import step_cost\n"
     "def _g(c, chip):\n    return step_cost.work_time(c, chip)\n"
     "def f(c, chip):\n    return _g(c, chip) + 1\n"
     "class A:\n    def seconds(self, c):\n        return step_cost.step_time(c, self.chip)\n",
     {"_g": False, "f": True, "A.seconds": True}),
    ("def f(c):\n    return c.flops\n", {}),
])
def test_the_scan_finds_direct_and_hidden_pricing(source, flagged):
    assert _pricing_functions(ast.parse(source)) == flagged
