"""CEL device selectors as kube-scheduler evaluates them: the ``device`` environment, quantities, semvers, limits."""

from __future__ import annotations

import itertools
import re

import pytest

from usher.core.dra import cel
from usher.core.dra.cel import CelError, DeviceInput, SelectorEvaluator, Version

GPU = "gpu.example.com"
A100 = DeviceInput(
    driver=GPU,
    attributes={
        GPU: {"model": "a100", "cores": 108, "mig": True, "driverVersion": Version("1.2.3")},
        "pci.example.org": {"root": "pci0000:00"},
    },
    capacity={GPU: {"memory": "40Gi", "power": "400"}},
    allow_multiple_allocations=True,
)


@pytest.fixture
def evaluator() -> SelectorEvaluator:
    return SelectorEvaluator()


def _range(n: int) -> str:
    return "[" + ",".join(map(str, range(n))) + "]"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f'device.driver == "{GPU}"', True, id="the driver matches"),
        pytest.param('device.driver == "nic.example.com"', False, id="another driver does not match"),
        pytest.param("device.allowMultipleAllocations", True, id="allowMultipleAllocations is a bool"),
        pytest.param(
            "type(device.allowMultipleAllocations) == bool && has(device.allowMultipleAllocations)",
            True,
            id="allowMultipleAllocations is always present",
        ),
        pytest.param(f'device.attributes["{GPU}"].model == "a100"', True, id="a string attribute compares"),
        pytest.param(f'device.attributes["{GPU}"].cores >= 100', True, id="an int attribute compares"),
        pytest.param(f'device.attributes["{GPU}"].mig', True, id="a bool attribute is a bool"),
        pytest.param(
            f'device.attributes["{GPU}"].driverVersion.isGreaterThan(semver("1.2.0"))',
            True,
            id="a version attribute is a semver",
        ),
        pytest.param(
            f'device.attributes["{GPU}"]["model"] == device.attributes["{GPU}"].model',
            True,
            id="a bare id is a plain map key under its domain",
        ),
        pytest.param(
            'device.attributes["pci.example.org"].root.startsWith("pci")',
            True,
            id="another domain's attribute is looked up by its domain",
        ),
        pytest.param(f'"model" in device.attributes["{GPU}"]', True, id="in finds an id"),
        pytest.param(f'has(device.attributes["{GPU}"].model)', True, id="has finds an id"),
        pytest.param(f'!has(device.attributes["{GPU}"].numa)', True, id="has is false for a missing id"),
        pytest.param('"x" in device.attributes["other.io"]', False, id="an unknown domain is an empty map for in"),
        pytest.param('!has(device.attributes["other.io"].x)', True, id="an unknown domain is an empty map for has"),
        pytest.param('size(device.capacity["other.io"]) == 0', True, id="an unknown capacity domain is empty too"),
        pytest.param(
            'cel.bind(attrs, device.attributes, size(attrs["other.io"]) == 0)',
            True,
            id="an unknown domain reached through cel.bind is an empty map",
        ),
        pytest.param(
            f'cel.bind(gpu, device.attributes["{GPU}"], gpu.model == "a100" && gpu.cores > 100)',
            True,
            id="cel.bind names a value",
        ),
        pytest.param(
            f'device.attributes["{GPU}"].?numa.orValue(0) == 0', True, id="an optional field falls back to its default"
        ),
        pytest.param(
            'device.driver.lowerAscii().split(".").exists(p, p == "gpu") && device.driver.matches("^gpu[.]")',
            True,
            id="string functions and list macros work",
        ),
    ],
)
def test_the_device_environment(evaluator: SelectorEvaluator, expression: str, expected: bool) -> None:
    assert evaluator.matches(expression, A100) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param('quantity("1Gi") == quantity("1024Mi")', True, id="1Gi equals 1024Mi"),
        pytest.param('quantity("1") == quantity("1000m")', True, id="1 equals 1000m"),
        pytest.param('quantity("1G") == quantity("1Gi")', False, id="1G is not 1Gi"),
        pytest.param(
            f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0', True, id="compareTo an equal quantity"
        ),
        pytest.param(
            f'device.capacity["{GPU}"].memory.compareTo(quantity("80Gi")) == -1', True, id="compareTo a larger quantity"
        ),
        pytest.param(
            f'device.capacity["{GPU}"].memory == quantity("40960Mi")', True, id="a capacity equals its value in Mi"
        ),
        pytest.param('quantity("1Gi").isGreaterThan(quantity("1G"))', True, id="isGreaterThan"),
        pytest.param('quantity("100m").isLessThan(quantity("1"))', True, id="isLessThan"),
        pytest.param('quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")', True, id="add a quantity"),
        pytest.param('quantity("1Gi").sub(1).asInteger() == 1073741823', True, id="sub an int then asInteger"),
        pytest.param('quantity("-5").sign() == -1 && quantity("0").sign() == 0', True, id="sign"),
        pytest.param('quantity("500m").asApproximateFloat() == 0.5', True, id="asApproximateFloat"),
        pytest.param('isQuantity("1Gi") && !isQuantity("1GiB")', True, id="isQuantity"),
        pytest.param('semver("1.2.3") == semver("1.2.3+build.5")', True, id="semver equality ignores build metadata"),
        pytest.param('semver("1.10.0").isGreaterThan(semver("1.9.0"))', True, id="semver compares numerically"),
        pytest.param('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True, id="a prerelease precedes its release"),
        pytest.param('semver("2.0.0").compareTo(semver("2.0.0")) == 0', True, id="semver compareTo"),
        pytest.param(
            'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
            True,
            id="major minor and patch",
        ),
        pytest.param('isSemver("1.2.3") && !isSemver("v1.2")', True, id="isSemver is strict"),
        pytest.param('semver("v1.2", true) == semver("1.2.0")', True, id="semver normalizes when asked"),
    ],
)
def test_quantities_and_semvers(evaluator: SelectorEvaluator, expression: str, expected: bool) -> None:
    assert evaluator.matches(expression, A100) is expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        pytest.param('device.attributes["other.io"].x', "no such key", id="an unknown domain has no ids"),
        pytest.param(f'device.attributes["{GPU}"].numa == 0', "no such key", id="a missing id is an error"),
        pytest.param("device.vendor == 'x'", "no such key", id="an unknown field of the device is an error"),
        pytest.param("device.driver", "must evaluate to bool", id="a string result is an error"),
        pytest.param("1 + 1", "must evaluate to bool", id="an int result is refused when compiled"),
        pytest.param('device.driver == "a" &&', "Syntax error", id="a syntax error is an error"),
        pytest.param("nosuch(device)", "undeclared reference", id="an unknown function is refused when compiled"),
        pytest.param('quantity("1") < quantity("2")', "no matching overload", id="quantities do not compare with <"),
        pytest.param('quantity("lots") == quantity("1")', "invalid quantity", id="a bad quantity text is an error"),
        pytest.param('semver("1.2") == semver("1.2.0")', "invalid semver", id="a bad semver text is an error"),
        pytest.param(
            'semver("1.0.0").compareTo(quantity("1")) == 0', "no matching overload", id="semver and quantity differ"
        ),
        pytest.param('quantity("1.5").asInteger() == 1', "not an integer", id="asInteger of a fraction is an error"),
        pytest.param("x" * (10 * 1024 + 1), "over the limit", id="an expression over 10 KiB is refused"),
        pytest.param(
            f"size({_range(200)}.map(a, {_range(200)}.map(b, a + b))) > 0",
            "too expensive",
            id="a huge nested comprehension is refused by its estimated cost",
        ),
        pytest.param(
            'cel.bind(s0, "xxxxxxxx", '
            + "".join(f"cel.bind(s{i + 1}, s{i} + s{i}, " for i in range(28))
            + "size(s28) > 0"
            + ")" * 29,
            "too expensive",
            id="a string doubled by cel.bind 28 times is refused by its estimated cost",
        ),
    ],
)
def test_errors(evaluator: SelectorEvaluator, expression: str, error: str) -> None:
    with pytest.raises(CelError, match=error):
        evaluator.matches(expression, A100)


def test_a_runaway_comprehension_is_stopped_by_the_iteration_budget(
    evaluator: SelectorEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the static estimate out of the way, the runtime budget alone must stop it, and quickly.
    monkeypatch.setattr(cel, "COST_LIMIT", 10**12)
    with pytest.raises(CelError, match="Iteration budget exceeded"):
        evaluator.matches(f"size({_range(200)}.map(a, {_range(200)}.map(b, a + b))) > 0", A100)


def test_an_evaluation_over_the_time_limit_fails_and_refuses_the_expression_from_then_on() -> None:
    cpu_seconds = itertools.count(step=0.25)
    evaluator = SelectorEvaluator(time_limit=0.1, cpu_clock=lambda: float(next(cpu_seconds)))
    expression = "true"
    with pytest.raises(CelError, match=re.escape("evaluation took 0.250s of CPU, over the limit of 0.1s")):
        evaluator.matches(expression, A100)
    with pytest.raises(CelError, match="refused: an earlier evaluation took"):
        evaluator.matches(expression, A100)


def test_an_evaluation_using_exactly_the_time_limit_succeeds() -> None:
    cpu_seconds = itertools.count(step=0.25)  # exact in binary: each evaluation takes 0.25s, no more
    evaluator = SelectorEvaluator(time_limit=0.25, cpu_clock=lambda: float(next(cpu_seconds)))
    assert evaluator.matches("true", A100)
    assert evaluator.matches("true", A100)


def test_compiles_once_for_many_devices_and_caches_errors_too(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    compile_ = cel._compile

    def counting(environment: object, expression: str) -> object:
        compiled.append(expression)
        return compile_(environment, expression)

    monkeypatch.setattr(cel, "_compile", counting)
    evaluator = SelectorEvaluator()
    devices = [DeviceInput(GPU, {GPU: {"cores": n}}, {}) for n in range(50)]
    good = f'device.attributes["{GPU}"].cores % 2 == 0'
    bad = "device.driver =="
    assert sum(evaluator.matches(good, device) for device in devices) == 25
    for _ in range(3):
        with pytest.raises(CelError, match="Syntax error"):
            evaluator.check(bad)
    assert compiled == [good, bad]


def test_the_cache_is_bounded_and_keeps_the_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    compile_ = cel._compile

    def counting(environment: object, expression: str) -> object:
        compiled.append(expression)
        return compile_(environment, expression)

    monkeypatch.setattr(cel, "_compile", counting)
    evaluator = SelectorEvaluator(cache_size=2)
    for expression in ["true", "false", "true", "1 == 1", "true", "false"]:
        evaluator.check(expression)
    assert compiled == ["true", "false", "1 == 1", "false"]


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f'device.attributes["{GPU}"].model == "a100"', id="a valid selector"),
        pytest.param('device.attributes["other.io"].x == 1', id="a selector that fails only at run time"),
    ],
)
def test_check_accepts_what_compiles(evaluator: SelectorEvaluator, expression: str) -> None:
    evaluator.check(expression)


def test_check_refuses_a_syntax_error(evaluator: SelectorEvaluator) -> None:
    with pytest.raises(CelError, match="compilation failed"):
        evaluator.check("device.driver ==")


def test_allow_multiple_allocations_is_false_unless_the_device_sets_it(evaluator: SelectorEvaluator) -> None:
    assert not evaluator.matches("device.allowMultipleAllocations", DeviceInput(GPU, {}, {}))
    assert evaluator.matches("!device.allowMultipleAllocations", DeviceInput(GPU, {}, {}))


def test_an_unparsable_capacity_is_an_error_naming_it(evaluator: SelectorEvaluator) -> None:
    device = DeviceInput(GPU, {}, {GPU: {"memory": "lots"}})
    with pytest.raises(CelError, match=re.escape("device capacity gpu.example.com/memory: invalid quantity")):
        evaluator.matches("true", device)


def test_a_new_device_is_seen_even_when_the_expression_is_cached(evaluator: SelectorEvaluator) -> None:
    expression = 'device.attributes["other.io"].x == 1'
    with pytest.raises(CelError, match="no such key"):
        evaluator.matches(expression, A100)
    assert evaluator.matches(expression, DeviceInput(GPU, {"other.io": {"x": 1}}, {}))
