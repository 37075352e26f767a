"""Quantities and pod requests count exactly as kube-scheduler counts them."""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, localcontext

import pytest

from tests.builders import make_pod
from usher.core.resources import (
    QuantityError,
    canonical_quantity,
    format_amount,
    parse_quantity,
    pod_requests,
    to_amount,
)


@pytest.mark.parametrize(
    ("name", "text", "amount"),
    [
        pytest.param("cpu", "100m", 100, id="millicores stay millicores"),
        pytest.param("cpu", "1", 1000, id="one cpu is a thousand millicores"),
        pytest.param("cpu", "0.5", 500, id="fractional cpu"),
        pytest.param("cpu", "1.0001", 1001, id="sub-millicore cpu rounds up"),
        pytest.param("memory", "1Gi", 2**30, id="binary suffix"),
        pytest.param("memory", "1G", 10**9, id="decimal suffix"),
        pytest.param("memory", "1e3", 1000, id="exponent notation"),
        pytest.param("memory", "128974848", 128974848, id="plain bytes"),
        pytest.param("memory", "1.5Ki", 1536, id="fractional binary"),
        pytest.param("pods", "110", 110, id="counts"),
        pytest.param("memory", "100m", 1, id="sub-unit memory rounds up to one byte"),
    ],
)
def test_quantities_parse_to_exact_integers(name: str, text: str, amount: int) -> None:
    assert to_amount(name, text) == amount


@pytest.mark.parametrize(
    "text",
    ["", "1.2.3", "ten", "1Qi", "--1", None, True, {"a": 1}, [1], float("nan"), float("inf"), "NaN"],
    ids=lambda t: f"rejects {t!r}",
)
def test_malformed_quantities_are_rejected(text: object) -> None:
    with pytest.raises(QuantityError):
        to_amount("cpu", text)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param("memory", "1e999999", "quantity '1e999999' is out of range", id="an exponent past any int64"),
        pytest.param("cpu", "1e999999", "quantity '1e999999' is out of range", id="cpu with that exponent"),
        pytest.param("memory", "-1e999999", "out of range", id="negative too"),
        pytest.param("memory", "1e19", "out of range", id="just past int64"),
        pytest.param("memory", "9223372036854775808", "out of range", id="2 to the 63"),
        pytest.param("memory", "100000000000000000000000000000Ki", "out of range", id="binary units past int64"),
        pytest.param("memory", 10**400, "quantity <a 1329-bit integer> is out of range", id="a huge JSON integer"),
        pytest.param("cpu", "9300P", "out of range: more than 9223372036854775807 millicores", id="cpu in millicores"),
        pytest.param("memory", "1e2147483647", "out of range: more than 100000 digits", id="beyond usher's arithmetic"),
        pytest.param("memory", 10**100_001, "out of range: more than 100000 digits", id="a JSON integer as long"),
        pytest.param("memory", "1e2147483648", "exponent out of range", id="an exponent past int32"),
        pytest.param("memory", "1e-99999999999", "exponent out of range", id="a negative exponent past int32"),
        pytest.param("memory", "1e99999999999999999999", "exponent out of range", id="an exponent past int64"),
        pytest.param("memory", "1e3Ki", "invalid quantity", id="an exponent and a suffix"),
        pytest.param("memory", "1e3m", "invalid quantity", id="an exponent and a decimal suffix"),
        pytest.param("memory", "1e", "invalid quantity", id="an exponent without digits"),
        pytest.param("memory", ".", "invalid quantity", id="a dot alone"),
        pytest.param("memory", "9" * 100_000, f"quantity '{'9' * 34}...9' is out of range", id="a long text cut"),
    ],
)
def test_quantities_beyond_what_kube_scheduler_counts_are_malformed(name: str, text: object, message: str) -> None:
    """kube-scheduler counts each resource in an int64 (cpu in millicores): past it, its arithmetic overflows,
    so for usher such a quantity is malformed like one it cannot read, and the error says which."""
    with pytest.raises(QuantityError, match=re.escape(message)):
        to_amount(name, text)


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        pytest.param("9223372036854775807", 2**63 - 1, id="the largest int64"),
        pytest.param("7Ei", 7 * 2**60, id="exbibytes"),
        pytest.param("1E", 10**18, id="exabytes"),
        pytest.param("1e-999999", 1, id="a tiny amount rounds up to one"),
        pytest.param("1e-2147483648", 1, id="the smallest exponent"),
        pytest.param("1.e3", 1000, id="a dot without decimals"),
        pytest.param("1.0000000000000000000000000000001", 2, id="more digits than a default Decimal context"),
    ],
)
def test_quantities_at_the_edges_of_the_range_count(text: str, amount: int) -> None:
    assert to_amount("memory", text) == amount


@pytest.mark.parametrize(
    "text",
    ["1e99999", "1e-2147483648", "-1e99999", "1.5Ki", "0." + "0" * 5000 + "1", "9" * 5000 + "Ki", "9" * 99_980 + "Ei"],
    ids=lambda t: repr(t)[:20],
)
def test_quantities_of_any_reasonable_size_parse_exactly(text: str) -> None:
    """ResourceSlices and CEL take quantities beyond int64 (Go's ParseQuantity does), up to 100,000 digits, where
    usher's Decimal arithmetic still has room to add them up and scale them: never rounded, never an overflow."""
    with localcontext(Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)):
        expected = Decimal(text.removesuffix("Ki").removesuffix("Ei"))
        expected *= 1024 if text.endswith("Ki") else 2**60 if text.endswith("Ei") else 1
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(make_pod().obj(), {}, id="no requests means nothing counted"),
        pytest.param(
            make_pod().req(cpu="100m", memory="1Gi").container(cpu="200m").obj(),
            {"cpu": 300, "memory": 2**30},
            id="containers are summed",
        ),
        pytest.param(
            make_pod().req(cpu="100m").init_container(cpu="500m").obj(),
            {"cpu": 500},
            id="an init container bigger than the containers sets the peak",
        ),
        pytest.param(
            make_pod().req(cpu="1").init_container(cpu="500m").obj(),
            {"cpu": 1000},
            id="a smaller init container does not add",
        ),
        pytest.param(
            make_pod().req(cpu="1").init_container(sidecar=True, cpu="200m").obj(),
            {"cpu": 1200},
            id="a sidecar runs beside the containers and adds",
        ),
        pytest.param(
            make_pod().req(cpu="100m").init_container(sidecar=True, cpu="200m").init_container(cpu="1").obj(),
            {"cpu": 1200},
            id="an init container after a sidecar runs beside it",
        ),
        pytest.param(
            make_pod().req(cpu="100m").overhead(cpu="50m", memory="10Mi").obj(),
            {"cpu": 150, "memory": 10 * 2**20},
            id="pod overhead is added",
        ),
    ],
)
def test_pod_requests(pod: dict[str, object], expected: dict[str, int]) -> None:
    assert pod_requests(pod) == expected


def test_limits_stand_in_for_missing_requests() -> None:
    pod = make_pod().obj()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    assert pod_requests(pod) == {"cpu": 2000}


def test_pod_level_requests_override_container_sums() -> None:
    pod = make_pod().req(cpu="100m", memory="1Gi").obj()
    pod["spec"]["resources"] = {"requests": {"cpu": "3"}}
    assert pod_requests(pod) == {"cpu": 3000, "memory": 2**30}


@pytest.mark.parametrize(
    ("name", "amount", "text"),
    [("cpu", 1500, "1500m"), ("cpu", 2000, "2"), ("memory", 2 * 2**30, "2Gi"), ("memory", 1000, "1000")],
)
def test_amounts_format_back_for_humans(name: str, amount: int, text: str) -> None:
    assert format_amount(name, amount) == text


@pytest.mark.parametrize(
    ("text", "binary", "canonical"),
    [
        ("12Gi", True, "12Gi"),
        ("12884901888", True, "12Gi"),
        ("1536", True, "1536"),
        ("1.5Gi", True, "1536Mi"),
        ("512", True, "512"),
        ("1.5", True, "1500m"),
        ("300m", False, "300m"),
        ("0.3", False, "300m"),
        ("12G", False, "12G"),
        ("12000000000", False, "12G"),
        ("1500", False, "1500"),
        ("0", False, "0"),
        ("0.1n", False, "1n"),
        ("-2Gi", True, "-2Gi"),
    ],
    ids=str,
)
def test_quantities_are_written_in_kubernetes_canonical_form(text: str, binary: bool, canonical: str) -> None:
    """As resource.Quantity's String(): binary units for whole multiples of 1024 written in them, else decimal
    SI with an exponent that is a multiple of three, rounded up to nano units."""
    assert canonical_quantity(parse_quantity(text), binary=binary) == canonical
