"""kube-scheduler's own benchmark definitions (scheduler_perf's performance-config.yaml files), parsed as upstream does.

The files ship in the Kubernetes module the build already downloads
(``e2e/build-binaries.sh`` runs ``go mod download k8s.io/kubernetes@<pin>``),
under ``test/integration/scheduler_perf/**/performance-config.yaml``, with
their templates beside them. This module finds them through the Go module
cache, reads the test cases and their workloads, substitutes a workload's
``$params`` into each operation exactly as scheduler_perf's ``patchParams``
does (``countParam``, ``templateParams`` with ``$name|default``,
``durationParam``, ``steadyStateParam``, ``signatureBatchSizeParam``,
``countMultiplierParam``; ``createPodSets`` unrolled into one createPods per
namespace), renders Go templates (`bench.gotemplate`) with scheduler_perf's
template functions, and chooses which workloads fit this machine. Running
the operations is `bench.executor`'s job.

Field names are matched case-insensitively and unknown fields are errors, as
Go's ``encoding/json`` with ``DisallowUnknownFields`` decodes them upstream.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from bench.gotemplate import render
from e2e.controlplane import read_versions

__all__ = [
    "OPCODES",
    "UNROLLED_OPCODES",
    "UNSUPPORTED_OPCODES",
    "ConfigError",
    "Params",
    "Selection",
    "TestCase",
    "Workload",
    "enabled",
    "feature_defaults",
    "load_object",
    "load_test_cases",
    "module_dir",
    "patch",
    "render_object",
    "scheduler_perf_dir",
    "select",
    "unroll",
]


class ConfigError(ValueError):
    """A performance-config file, op or template that scheduler_perf itself would refuse."""


# --------------------------------------------------------------------------- where the files are


def _go_mod_cache() -> Path:
    """The Go module cache: $GOMODCACHE, else ``go env GOMODCACHE``, else $GOPATH/pkg/mod or ~/go/pkg/mod."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go is not None:
        result = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False)
        if result.returncode == 0 and result.stdout.strip():
            return Path(result.stdout.strip())
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def kubernetes_version() -> str:
    """The pinned Kubernetes version (e2e/versions.env), the same one the control plane is built from."""
    return read_versions()["KUBERNETES_VERSION"]


@cache
def module_dir(version: str | None = None) -> Path:
    """``<GOMODCACHE>/k8s.io/kubernetes@<version>``; FileNotFoundError (with the fix) when it was never downloaded."""
    version = version or kubernetes_version()
    path = _go_mod_cache() / f"k8s.io/kubernetes@{version}"
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} does not exist: run `bash e2e/build-binaries.sh` "
            f"(or `go mod download k8s.io/kubernetes@{version}`)"
        )
    return path


def scheduler_perf_dir(version: str | None = None) -> Path:
    return module_dir(version) / "test" / "integration" / "scheduler_perf"


def config_files(root: Path | None = None) -> list[Path]:
    """Every performance-config.yaml under scheduler_perf, in path order."""
    return sorted((root or scheduler_perf_dir()).rglob("performance-config.yaml"))


# --------------------------------------------------------------------------- YAML and templates


try:
    # libyaml's parser: the harness decodes one rendered template per pod it creates, on the two cores the
    # schedulers under test use. With the pure-Python one and a parse of the template per pod, a pod with
    # preferred affinity cost 1.0 ms of the harness's CPU to render; now 0.12 ms.
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - a PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _Loader(_SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it for these files: no timestamps (they stay strings)."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def _to_float(value: Any) -> float:
    """scheduler_perf's toFloat64: numbers, and strings that parse as floats."""
    if isinstance(value, bool):
        raise ConfigError(f"cannot cast {value!r} to float64")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ConfigError(f"cannot cast {value!r} to float64")


def _to_int(value: Any) -> int:
    """scheduler_perf's toInt: numbers truncated, strings through Atoi."""
    if isinstance(value, bool):
        raise ConfigError(f"cannot cast {value!r} to int")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value):
        return int(value)
    raise ConfigError(f"cannot cast {value!r} to int")


def _go_json(value: Any) -> str:
    """encoding/json without HTML escaping, as scheduler_perf's JSON function; integral floats print as integers."""

    def plain(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer() and abs(item) < 1e21:
            return int(item)
        if isinstance(item, Mapping):
            return {str(k): plain(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [plain(v) for v in item]
        return item

    return json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _divide(i: Any, j: Any) -> float:
    divisor = _to_float(j)
    if divisor == 0:
        raise ConfigError("division by zero")
    return _to_float(i) / divisor


#: scheduler_perf's getTemplateFuncs.
TEMPLATE_FUNCS: dict[str, Callable[..., Any]] = {
    "AddFloat": lambda *n: sum(_to_float(v) for v in n),
    "AddInt": lambda *n: int(sum(_to_float(v) for v in n)),
    "DivideFloat": _divide,
    "DivideInt": lambda i, j: int(_divide(i, j)),
    "Int": _to_int,
    "JSON": _go_json,
    "Mod": lambda a, b: int(_to_float(a)) % int(_to_float(b)),
    "MultiplyFloat": lambda *n: _product(n),
    "MultiplyInt": lambda *n: int(_product(n)),
    "SubtractFloat": lambda i, j: _to_float(i) - _to_float(j),
    "SubtractInt": lambda i, j: int(_to_float(i) - _to_float(j)),
}


def _product(numbers: Iterable[Any]) -> float:
    product = 1.0
    for number in numbers:
        product *= _to_float(number)
    return product


@cache
def _read(path: Path) -> str:
    return path.read_text()


def render_object(path: Path, env: Mapping[str, Any]) -> dict[str, Any]:
    """A template file executed with ``env`` (Index, Count, template params) and decoded as one YAML object."""
    text = render(_read(path), dict(env), TEMPLATE_FUNCS)
    obj = load_yaml(text)
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: the template does not produce an object")
    return obj


def load_object(path: Path) -> dict[str, Any]:
    """A plain YAML object file (scheduler_perf's getSpecFromFile: no templating)."""
    obj = load_yaml(_read(path))
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: not an object")
    return obj


# --------------------------------------------------------------------------- test cases and workloads


class Params:
    """A workload's params, remembering which ones were used (scheduler_perf rejects unused ones)."""

    def __init__(self, values: Mapping[str, Any] | None) -> None:
        self.values: dict[str, Any] = dict(values or {})
        self.used: set[str] = set()

    def _get(self, reference: str, kind: type | tuple[type, ...], what: str) -> Any:
        """The param (as Go's getParam: no conversion; JSON numbers are numbers, never booleans)."""
        name = reference[1:] if reference.startswith("$") else reference
        self.used.add(name)
        if name not in self.values:
            raise ConfigError(f"parameter {name} is undefined")
        value = self.values[name]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"parameter {name} has the wrong type {type(value).__name__}, want {what}")
        return value

    def integer(self, reference: str) -> int:
        return int(self._get(reference, (int, float), "a number"))

    def string(self, reference: str) -> str:
        return str(self._get(reference, str, "a string"))

    def boolean(self, reference: str) -> bool:
        return bool(self._get(reference, bool, "a boolean"))

    def unused(self) -> list[str]:
        return sorted(set(self.values) - self.used)

    def resolve_template_params(self, template_params: Mapping[str, Any] | None) -> dict[str, Any]:
        """``$name`` values replaced by params; ``$name|default`` falls back to the YAML-decoded default."""
        resolved = dict(template_params or {})
        for key, value in resolved.items():
            if not (isinstance(value, str) and value.startswith("$")):
                continue
            name, sep, default = value[1:].partition("|")
            if name in self.values:
                self.used.add(name)
                resolved[key] = self.values[name]
            elif sep:
                resolved[key] = load_yaml(default)
            else:
                raise ConfigError(f'parameter "{name}" not found')
        return resolved


@dataclass(frozen=True)
class Workload:
    """One workload of a test case: its params, labels and feature gates."""

    name: str
    params: Mapping[str, Any]
    labels: tuple[str, ...] = ()
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    threshold: Any = None


@dataclass(frozen=True)
class TestCase:
    """One test case of a performance-config file (scheduler_perf's ``testCase``)."""

    name: str
    file: Path
    ops: tuple[Mapping[str, Any], ...]
    workloads: tuple[Workload, ...]
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    scheduler_config_path: Path | None = None
    default_pod_template_path: Path | None = None
    metrics_collector_config: Mapping[str, Any] | None = None

    @property
    def group(self) -> str:
        """The file's directory relative to scheduler_perf (``misc``, ``dra/partitionabledevices``)."""
        parts = self.file.parent.parts
        index = max(i for i, p in enumerate(parts) if p == "scheduler_perf")
        return "/".join(parts[index + 1 :]) or "."

    def workload(self, name: str) -> Workload:
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(f"{self.name} has no workload {name!r}; choose from {[w.name for w in self.workloads]}")

    def gates(self, workload: Workload) -> dict[str, bool]:
        """The test case's feature gates overridden by the workload's (featureGatesMerge)."""
        return {**self.feature_gates, **workload.feature_gates}

    def labels_of(self, workload: Workload) -> tuple[str, ...]:
        return (*self.labels, *workload.labels)

    def scheduler_config(self) -> dict[str, Any] | None:
        """The test case's KubeSchedulerConfiguration (as written), or None for the defaults."""
        return None if self.scheduler_config_path is None else load_object(self.scheduler_config_path)


_TEST_CASE_FIELDS = {
    "name",
    "featuregates",
    "metricscollectorconfig",
    "workloadtemplate",
    "workloads",
    "schedulerconfigpath",
    "defaultpodtemplatepath",
    "labels",
    "defaultthresholdmetricselector",
}
_WORKLOAD_FIELDS = {"name", "params", "labels", "threshold", "thresholdmetricselector", "featuregates"}


def _lower(raw: Any, allowed: set[str], where: str) -> dict[str, Any]:
    """Keys lower-cased (Go matches JSON fields case-insensitively); unknown keys are errors."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object, got {type(raw).__name__}")
    out = {str(k).lower(): v for k, v in raw.items()}
    unknown = sorted(set(out) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}")
    return out


def _gates(raw: Any, where: str) -> dict[str, bool]:
    gates = dict(raw or {})
    for name, value in gates.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: feature gate {name} must be true or false, got {value!r}")
    return gates


def load_test_cases(path: Path) -> list[TestCase]:
    """The test cases of one performance-config file (getTestCases + validateTestCases)."""
    raw = load_yaml(_read(path))
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{path}: no test cases defined")
    base = path.parent
    cases: list[TestCase] = []
    names: set[str] = set()
    for entry in raw:
        tc = _lower(entry, _TEST_CASE_FIELDS, str(path))
        name = str(tc.get("name", ""))
        where = f"{path}: {name}"
        if name in names:
            raise ConfigError(f"{where}: name is not unique")
        names.add(name)
        workloads: list[Workload] = []
        for raw_workload in tc.get("workloads") or []:
            w = _lower(raw_workload, _WORKLOAD_FIELDS, where)
            workloads.append(
                Workload(
                    name=str(w.get("name", "")),
                    params=dict(w.get("params") or {}),
                    labels=tuple(w.get("labels") or ()),
                    feature_gates=_gates(w.get("featuregates"), f"{where}/{w.get('name')}"),
                    threshold=w.get("threshold"),
                )
            )
        if not workloads:
            raise ConfigError(f"{where}: no workloads defined")
        if len({w.name for w in workloads}) != len(workloads):
            raise ConfigError(f"{where}: workload names are not unique")
        ops = tuple(_op_fields(op, f"{where}: op {i}") for i, op in enumerate(tc.get("workloadtemplate") or []))
        if not ops:
            raise ConfigError(f"{where}: no ops defined")
        if not any(_collects_metrics(op) for op in ops):
            raise ConfigError(f"{where}: no op in the workload template collects metrics")
        config = tc.get("schedulerconfigpath")
        pod_template = tc.get("defaultpodtemplatepath")
        cases.append(
            TestCase(
                name=name,
                file=path,
                ops=ops,
                workloads=tuple(workloads),
                feature_gates=_gates(tc.get("featuregates"), where),
                labels=tuple(tc.get("labels") or ()),
                scheduler_config_path=(base / config) if config else None,
                default_pod_template_path=(base / pod_template) if pod_template else None,
                metrics_collector_config=tc.get("metricscollectorconfig"),
            )
        )
    return cases


def load_all(root: Path | None = None) -> list[TestCase]:
    """Every test case of every performance-config file under scheduler_perf."""
    return [tc for path in config_files(root) for tc in load_test_cases(path)]


def enabled(selectors: Sequence[str], labels: Iterable[str]) -> bool:
    """scheduler_perf's label filter: ``label`` or ``+label`` must be present, ``-label`` must be absent."""
    have = set(labels)
    for selector in selectors:
        if not selector:
            continue
        must = not selector.startswith("-")
        label = selector[1:] if selector[0] in "+-" else selector
        if (label in have) != must:
            return False
    return True


# --------------------------------------------------------------------------- operations

#: Go field names of each op (lower-cased), as scheduler_perf's op structs declare them.
OPCODES: dict[str, set[str]] = {
    "createNodes": {
        "opcode",
        "count",
        "countparam",
        "nodetemplatepath",
        "nodeallocatablestrategy",
        "labelnodepreparestrategy",
        "uniquenodelabelstrategy",
        "templateparams",
    },
    "createNamespaces": {"opcode", "prefix", "count", "countparam", "namespacetemplatepath"},
    "createPods": {
        "opcode",
        "count",
        "countparam",
        "countmultiplierparam",
        "steadystate",
        "steadystateparam",
        "duration",
        "durationparam",
        "collectmetrics",
        "namespace",
        "podtemplatepath",
        "skipwaittocompletion",
        "persistentvolumetemplatepath",
        "persistentvolumeclaimtemplatepath",
        "templateparams",
        "signaturebatchsize",
        "signaturebatchsizeparam",
    },
    "createPodSets": {"opcode", "count", "countparam", "namespaceprefix", "createpodsop"},
    "deletePods": {"opcode", "namespace", "labelselector", "skipwaittocompletion", "deletepodspersecond"},
    "churn": {"opcode", "mode", "number", "intervalmilliseconds", "namespace", "templatepaths"},
    "barrier": {"opcode", "namespaces", "labelselector", "stagerequirement"},
    "sleep": {"opcode", "duration", "durationparam"},
    "createAny": {"opcode", "namespace", "templatepath", "count", "countparam", "templateparams"},
    "updateAny": {
        "opcode",
        "namespace",
        "templatepath",
        "count",
        "countparam",
        "updatepersecond",
        "subresources",
    },
    "createPodGroups": {"opcode", "namespace", "templatepath", "templateparams", "count", "countparam"},
    "allocResourceClaims": {"opcode", "namespace"},
    "createResourceClaims": {"opcode", "count", "countparam", "namespace", "templatepath"},
    "startCollectingMetrics": {"opcode", "name", "namespaces", "labelselector"},
    "stopCollectingMetrics": {"opcode"},
    "startCollectingProfile": {"opcode", "type", "filepath"},
    "stopCollectingProfile": {"opcode", "type"},
}
#: Opcodes `unroll` replaces by others before anything runs (createPodSets: one createPods per namespace).
UNROLLED_OPCODES = frozenset({"createPodSets"})
#: Opcodes the executor does not run, and why: a workload using one is reported "unsupported: <op>".
UNSUPPORTED_OPCODES: dict[str, str] = {
    "startCollectingProfile": "a Go pprof CPU profile of the test process (scheduler_perf runs the scheduler in it)",
    "stopCollectingProfile": "a Go pprof CPU profile of the test process (scheduler_perf runs the scheduler in it)",
}


def _op_fields(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    opcode = next((v for k, v in raw.items() if str(k).lower() == "opcode"), None)
    if opcode not in OPCODES:
        raise ConfigError(f"{where}: unknown opcode {opcode!r}")
    fields = _lower(raw, OPCODES[opcode], f"{where} ({opcode})")
    if opcode == "createPodSets":
        inner = fields.get("createpodsop") or {}
        fields["createpodsop"] = _lower(inner, OPCODES["createPods"], f"{where}/createPodsOp")
        fields["createpodsop"].setdefault("opcode", "createPods")
    return fields


def _collects_metrics(op: Mapping[str, Any]) -> bool:
    if op["opcode"] == "createPodSets":
        return bool(op["createpodsop"].get("collectmetrics"))
    return op["opcode"] == "stopCollectingMetrics" or bool(op.get("collectmetrics"))


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, in seconds ("10s", "1m30s", "0s", "250ms")."""
    if text in {"0", ""}:
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+"):
        raise ConfigError(f"invalid duration {text!r}")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _duration(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, int | float):  # metav1.Duration in JSON is a string; a number is nanoseconds
        return float(value) / 1e9
    return parse_duration(str(value))


@dataclass(frozen=True)
class Op:
    """One operation after parameter substitution: ``opcode``, its position, and its fields (lower-cased)."""

    opcode: str
    index: int
    fields: Mapping[str, Any]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name.lower(), default)

    def path(self, name: str, base: Path) -> Path | None:
        value = self.get(name)
        return (base / value) if value else None

    @property
    def count(self) -> int:
        return int(self.get("count") or 0)


def _count(fields: dict[str, Any], params: Params, *, optional: bool = False) -> None:
    """countParam -> count; validity as isValidCount (a literal count must be >= 0)."""
    if fields.get("countparam"):
        fields["count"] = params.integer(fields["countparam"])
    elif "count" not in fields and optional:
        return
    count = fields.get("count", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigError(f"invalid count {count!r}")


def patch(op: Mapping[str, Any], index: int, params: Params) -> Op:
    """scheduler_perf's patchParams for one op: the workload's params substituted, the op validated."""
    fields = copy.deepcopy(dict(op))
    opcode = fields["opcode"]
    if opcode in {"createNodes", "createNamespaces", "createPodSets", "createResourceClaims", "createPodGroups"}:
        _count(fields, params)
    elif opcode in {"createAny", "updateAny"}:
        _count(fields, params, optional=True)
    if opcode in {"createNodes", "createAny", "createPodGroups"} and fields.get("templateparams"):
        fields["templateparams"] = params.resolve_template_params(fields["templateparams"])
    if opcode == "createPods":
        _patch_create_pods(fields, params)
    elif opcode == "createPodSets":
        if not str(fields.get("namespaceprefix") or ""):
            raise ConfigError("createPodSets: namespacePrefix must be set")
    elif opcode == "sleep":
        if fields.get("durationparam"):
            fields["duration"] = parse_duration(params.string(fields["durationparam"]))
        else:
            fields["duration"] = _duration(fields.get("duration"))
    elif opcode == "barrier":
        stage = fields.get("stagerequirement") or "Scheduled"
        if stage not in {"Scheduled", "Attempted"}:
            raise ConfigError(f"invalid StageRequirement {stage}")
        fields["stagerequirement"] = stage
    elif opcode == "churn":
        if fields.get("mode") not in {"create", "recreate"}:
            raise ConfigError(f"churn: invalid mode {fields.get('mode')!r}")
        if int(fields.get("number") or 0) < 0 or (fields["mode"] == "recreate" and not fields.get("number")):
            raise ConfigError("churn: number must be > 0 in recreate mode and >= 0 otherwise")
        if not fields.get("templatepaths"):
            raise ConfigError("churn: at least one template spec file needs to be specified")
    elif opcode in {"createAny", "updateAny", "createPodGroups", "createResourceClaims"}:
        if not fields.get("templatepath"):
            raise ConfigError(f"{opcode}: templatePath must be set")
    elif opcode == "startCollectingMetrics" and not fields.get("namespaces"):
        raise ConfigError("startCollectingMetrics: namespaces cannot be empty")
    elif opcode == "deletePods" and int(fields.get("deletepodspersecond") or 0) < 0:
        raise ConfigError("deletePods: deletePodsPerSecond must be >= 0")
    if opcode == "updateAny" and int(fields.get("updatepersecond") or 0) < 0:
        raise ConfigError("updateAny: updatePerSecond must be >= 0")
    return Op(opcode, index, fields)


def _patch_create_pods(fields: dict[str, Any], params: Params) -> None:
    _count(fields, params)
    if fields.get("countmultiplierparam"):
        fields["count"] *= params.integer(fields["countmultiplierparam"])
    if fields.get("signaturebatchsizeparam"):
        fields["signaturebatchsize"] = params.integer(fields["signaturebatchsizeparam"])
    fields["signaturebatchsize"] = int(fields.get("signaturebatchsize") or 0) or 1
    if fields.get("durationparam"):
        fields["duration"] = parse_duration(params.string(fields["durationparam"]))
    else:
        fields["duration"] = _duration(fields.get("duration"))
    if fields.get("steadystateparam"):
        fields["steadystate"] = params.boolean(fields["steadystateparam"])
    if fields.get("templateparams"):
        fields["templateparams"] = params.resolve_template_params(fields["templateparams"])
    if fields.get("collectmetrics") and fields.get("skipwaittocompletion"):
        raise ConfigError("collectMetrics and skipWaitToCompletion cannot be true at the same time")
    if fields.get("skipwaittocompletion") and fields.get("steadystate"):
        raise ConfigError("skipWaitToCompletion and steadyState cannot be true at the same time")
    if fields.get("steadystate") and fields["duration"] <= 0:
        raise ConfigError("when creating pods in a steady state, the test duration must be > 0")


def unroll(test_case: TestCase, workload: Workload) -> tuple[list[Op], Params]:
    """The workload's ops with params substituted, createPodSets unrolled (unrollWorkloadTemplate + patchParams)."""
    params = Params(workload.params)
    ops: list[Op] = []
    for index, raw in enumerate(test_case.ops):
        op = patch(raw, index, params)
        if op.opcode == "createPodSets":
            for i in range(op.count):
                inner = dict(op.fields["createpodsop"])
                inner["namespace"] = f"{op.fields['namespaceprefix']}-{i}"
                ops.append(patch(inner, index, params))
        else:
            ops.append(op)
    return ops, params


# --------------------------------------------------------------------------- sizes and selection


@dataclass(frozen=True)
class Size:
    """What a workload creates: nodes, pods (a steady state counts its backlog), seconds of steady state, and
    the pods its measured ops (``collectMetrics``) create."""

    nodes: int
    pods: int
    steady_seconds: float
    measured_pods: int = 0


def size(test_case: TestCase, workload: Workload) -> Size:
    ops, _ = unroll(test_case, workload)
    nodes = sum(op.count for op in ops if op.opcode == "createNodes")
    pods = sum(op.count for op in ops if op.opcode == "createPods")
    steady = sum(float(op.get("duration") or 0) for op in ops if op.opcode == "createPods" and op.get("steadystate"))
    steady += sum(float(op.get("duration") or 0) for op in ops if op.opcode == "sleep")
    measured = sum(op.count for op in ops if op.opcode == "createPods" and op.get("collectMetrics"))
    return Size(nodes, pods, steady, measured)


def unsupported_ops(test_case: TestCase) -> list[str]:
    """Opcodes of the test case the executor does not run (each one makes the workload unsupported)."""
    return sorted({str(op["opcode"]) for op in test_case.ops if op["opcode"] in UNSUPPORTED_OPCODES})


#: Test directories whose Go test file changes the run beyond the YAML (hooks the executor cannot reproduce).
GO_HOOKS: dict[str, str] = {
    "nodedeclaredfeatures": "node_declared_features_test.go publishes node features from Go "
    "(WithPreRunFn, WithNodeUpdateFn)",
}


@dataclass(frozen=True)
class Selection:
    """One upstream test case and what the benchmark does with it.

    ``bench`` is the workload ``make bench`` runs (None: left out, ``reason`` says why), ``smoke`` the
    smallest workload (the smoke test's size), ``unsupported`` what the executor cannot run.
    """

    test_case: TestCase
    bench: Workload | None
    smoke: Workload | None
    reason: str = ""
    unsupported: tuple[str, ...] = ()
    stand_in: bool = False
    """``bench`` is not labelled performance: it stands in for performance workloads that are too large."""
    smallest: tuple[Workload, ...] = ()
    """Every workload of the smallest size, in file order (``smoke`` is the first; they differ in gates)."""
    extra: bool = False
    """A second workload of a test case run besides its chosen one (``LARGE_EXTRAS``)."""
    integration_size: bool = False
    """``bench`` stands in for a test case without performance workloads: an integration-test size."""

    @property
    def key(self) -> str:
        """The result's name: the test case's, with the workload's for an extra."""
        if self.extra and self.bench is not None:
            return f"{self.test_case.name}.{self.bench.name}"
        return self.test_case.name

    @property
    def runnable(self) -> bool:
        return self.bench is not None and not self.unsupported

    @property
    def tier(self) -> str:
        """``large`` when the bench workload is beyond ``make bench``'s sizes (``make bench-large`` runs it)."""
        if self.extra or self.integration_size:
            return LARGE
        if self.bench is None:
            return STANDARD
        s = size(self.test_case, self.bench)
        return tier_of(self.test_case.name, s.nodes, s.pods)


#: What fits this 2-core machine: every run (3 contenders x 3 repetitions) creates its cluster anew.
MAX_NODES = 1000
MAX_PODS = 5000
#: ``make bench`` runs the workloads up to this size (the issue's "fast/small workloads, e.g. 500 nodes"), 3 runs
#: per scheduler, in under 45 minutes here; the larger ones (the 1000-node workloads: 35-50 s per test case and
#: contender, the two Partitionable ones hold a 10 s steady state; the 5000-pod, 5000-node and pod-group-claim
#: workloads) run in ``make bench-large`` (bench/README.md "Which workloads run"). With 1000 nodes here, make
#: bench took 50 minutes on a day when every contender, the bind limit too, ran 13 % slower than the day before.
STANDARD_MAX_NODES = 500
STANDARD_MAX_PODS = 2500
#: Run by ``make bench`` whatever their size: scheduler_perf's only gang workloads have 5000 nodes, and gang
#: scheduling is measured there (issue 16; GangScheduling is the cheapest of them, about 50 s a pair of runs).
STANDARD_ALWAYS = frozenset({"GangScheduling"})
#: Workloads ``make bench-large`` runs besides each test case's chosen one: scheduler_perf's SchedulingBasic
#: at 5000 nodes and 10000 pods is where issue 18 compares memory (peak RSS at most 2x kube-scheduler's).
LARGE_EXTRAS: tuple[tuple[str, str], ...] = (("SchedulingBasic", "5000Nodes_10000Pods"),)
STANDARD = "standard"
LARGE = "large"


def tier_of(test_case: str, nodes: int, pods: int) -> str:
    """Which make target runs a test case's workload of this size (results of an older rule are read by it too)."""
    if test_case in STANDARD_ALWAYS or (nodes <= STANDARD_MAX_NODES and pods <= STANDARD_MAX_PODS):
        return STANDARD
    return LARGE


NO_PERFORMANCE = "no workload labelled performance"
TIERS = (STANDARD, LARGE)
#: Test cases run beyond MAX_NODES: scheduler_perf's pod-group workloads all have 5000 nodes (3000 pods, about
#: 20-60 s a run here), and gang scheduling is measured side by side with kube-scheduler (issue 16).
LARGER_NODES: Mapping[str, int] = {"GangScheduling": 5000, "TopologyAwareScheduling": 5000, "BasicScheduling": 5000}
#: Test cases run beyond MAX_PODS: the event-handling cases' smallest performance workloads, 6000-7000 pods on
#: 3-400 nodes (about a minute a run here), in make bench-large.
LARGER_PODS: Mapping[str, int] = {
    "EventHandlingPodUpdate": 7000,
    "EventHandlingNodeAdd": 6000,
    "EventHandlingNodeUpdate": 6000,
}


def select(test_cases: Sequence[TestCase], *, max_nodes: int = MAX_NODES, max_pods: int = MAX_PODS) -> list[Selection]:
    """For every test case: the workload to benchmark, the smallest one to smoke-test, or why none.

    The bench workload is the largest ``performance`` workload within ``max_nodes`` and ``max_pods`` (or the
    test case's ``LARGER_NODES`` and ``LARGER_PODS``); when every performance workload is larger, the largest
    workload that fits and is not labelled ``integration-test`` stands in (scheduler_perf's 500Nodes variants);
    a test case without performance workloads runs its largest that fits, in ``make bench-large``.
    The smoke workload is the smallest one (fewest nodes, then pods).
    """
    out: list[Selection] = []
    for tc in test_cases:
        sizes: dict[str, Size] = {}
        for w in tc.workloads:
            try:
                sizes[w.name] = size(tc, w)
            except ConfigError:  # broken upstream too (e.g. a param the workload does not define): never chosen
                continue
        if not sizes:
            out.append(Selection(tc, None, None, "no workload scheduler_perf itself can run"))
            continue

        node_limit = max(max_nodes, LARGER_NODES.get(tc.name, 0))
        pod_limit = max(max_pods, LARGER_PODS.get(tc.name, 0))

        def fits(
            w: Workload, sizes: Mapping[str, Size] = sizes, node_limit: int = node_limit, pod_limit: int = pod_limit
        ) -> bool:
            return sizes[w.name].nodes <= node_limit and sizes[w.name].pods <= pod_limit

        def order(w: Workload, sizes: Mapping[str, Size] = sizes) -> tuple[int, int, float]:
            return (sizes[w.name].nodes, sizes[w.name].pods, sizes[w.name].steady_seconds)

        valid = [w for w in tc.workloads if w.name in sizes]
        smoke = min(valid, key=order)
        smallest = tuple(w for w in valid if order(w) == order(smoke))
        unsupported = tuple(f"unsupported: {op}" for op in unsupported_ops(tc))
        if tc.group in GO_HOOKS:
            unsupported += (f"unsupported: {GO_HOOKS[tc.group]}",)
        if all(sizes[w.name].pods == 0 for w in valid):
            reason = "it creates no pods (it measures the in-process scheduler's handling of objects)"
            out.append(Selection(tc, None, smoke, reason, unsupported, smallest=smallest))
            continue
        performance = [w for w in valid if "performance" in tc.labels_of(w)]
        fitting = [w for w in performance if fits(w)]
        if fitting:
            bench = max(fitting, key=order)
            out.append(Selection(tc, bench, smoke, unsupported=unsupported, smallest=smallest))
            continue
        if not performance:
            # scheduler_perf measures these only in its integration runs: their largest workload that fits
            # runs in make bench-large (a few pods: the numbers say little about speed, but usher runs them).
            candidates = [w for w in valid if fits(w)]
            if not candidates:
                out.append(Selection(tc, None, smoke, NO_PERFORMANCE, unsupported, smallest=smallest))
                continue
            bench = max(candidates, key=order)
            out.append(
                Selection(
                    tc, bench, smoke, NO_PERFORMANCE, unsupported, stand_in=True, smallest=smallest,
                    integration_size=True,
                )
            )  # fmt: skip
            continue
        stand_ins = [w for w in valid if fits(w) and "integration-test" not in tc.labels_of(w)]
        least = min(performance, key=order)
        too_large = f"its performance workloads are too large (smallest: {least.name}, {_describe(sizes[least.name])})"
        if stand_ins:
            bench = max(stand_ins, key=order)
            out.append(Selection(tc, bench, smoke, too_large, unsupported, stand_in=True, smallest=smallest))
        else:
            out.append(Selection(tc, None, smoke, too_large, unsupported, smallest=smallest))
    return out


def extras(test_cases: Sequence[TestCase]) -> list[Selection]:
    """The ``LARGE_EXTRAS`` workloads, as selections of their own (never smoke-tested: their test case is)."""
    by_name = {tc.name: tc for tc in test_cases}
    out = []
    for case, workload in LARGE_EXTRAS:
        tc = by_name[case]
        picked = tc.workload(workload)
        unsupported = tuple(f"unsupported: {op}" for op in unsupported_ops(tc))
        out.append(Selection(tc, picked, picked, unsupported=unsupported, smallest=(picked,), extra=True))
    return out


def _describe(s: Size) -> str:
    return f"{s.nodes} nodes, {s.pods} pods" + (f", {s.steady_seconds:g} s steady state" if s.steady_seconds else "")


def describe(test_case: TestCase, workload: Workload) -> str:
    return _describe(size(test_case, workload))


def smoke_of(selection: Selection) -> Selection:
    """The same selection at its smallest workload."""
    return replace(selection, bench=selection.smoke)


# --------------------------------------------------------------------------- feature gates

_GATE_BLOCK = re.compile(r"^\t([A-Z][A-Za-z0-9]+): \{\n(.*?)^\t\},", re.DOTALL | re.MULTILINE)
_GATE_SPEC = re.compile(
    r'\{Version: version\.MustParse\("(\d+)\.(\d+)"\), Default: (true|false), PreRelease: featuregate\.(\w+)'
    r"(?:, LockToDefault: (true|false))?"
)


@dataclass(frozen=True)
class GateSpec:
    default: bool
    stage: str
    locked: bool


@cache
def feature_defaults(version: str | None = None) -> dict[str, GateSpec]:
    """Every Kubernetes feature gate's default at the pinned version, from the module's pkg/features.

    Why from the source: ``kube-scheduler --help`` lists only alpha and beta gates, and a test
    case may set a GA gate (DynamicResourceAllocation) that usher has no flag for but always
    implements. Only gates of ``pkg/features/kube_features.go`` are known here.
    """
    version = version or kubernetes_version()
    major, minor = (int(p) for p in version.lstrip("v").split(".")[:2])
    text = (module_dir(version) / "pkg" / "features" / "kube_features.go").read_text()
    specs: dict[str, GateSpec] = {}
    for match in _GATE_BLOCK.finditer(text):
        current: GateSpec | None = None
        for spec in _GATE_SPEC.finditer(match.group(2)):
            if (int(spec.group(1)), int(spec.group(2))) <= (major, minor):
                current = GateSpec(spec.group(3) == "true", spec.group(4), spec.group(5) == "true")
        if current is not None:
            specs[match.group(1)] = current
    return specs
