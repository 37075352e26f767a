"""The chart's alerts and dashboard watch this release's leader, and nothing else.

A ServiceMonitor scrapes the metrics Service, so Prometheus labels usher's
series ``job="<release>-metrics"``; kube-scheduler exports the same names
under its own job, and usher's followers export queue gauges too (their
caches are warm). The rules are checked by ``promtool test rules`` on
synthetic series of a leader and a follower of the chart's job and of a
kube-scheduler; the release is named ``r`` so that no job name contains
"usher" by accident. The dashboard's expressions are checked by reading
them. No control plane is needed: helm renders, promtool evaluates.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.test_chart import CHART, helm

pytestmark = pytest.mark.e2e

RELEASE = "r"
JOB = f"{RELEASE}-metrics"
LEADER_ONLY = f'and on (job, instance) (leader_election_master_status{{job="{JOB}"}} == 1)'
PROMTOOL = Path("/usr/bin/promtool")


def rendered(template: str) -> dict[str, Any]:
    text = helm("template", RELEASE, str(CHART), "-f", str(CHART / "ci" / "full-values.yaml"), "-s", template)
    [document] = [d for d in yaml.safe_load_all(text) if d]
    return dict(document)


def series(metric: str, instance: str, job: str, values: str, **labels: str) -> dict[str, str]:
    selector = ", ".join(f'{k}="{v}"' for k, v in {"job": job, "instance": instance, **labels}.items())
    return {"series": f"{metric}{{{selector}}}", "values": values}


def replica(instance: str, *, job: str, leads: bool, unschedulable: int, gated: int) -> list[dict[str, str]]:
    """One scheduler's scrape: its leader gauge, its queue gauges, and counters that grow every minute."""
    lease = "kube-scheduler" if job == "kube-scheduler" else "usher"
    return [
        series("leader_election_master_status", instance, job, f"{int(leads)}x40", name=lease),
        series("scheduler_pending_pods", instance, job, f"{unschedulable}x40", queue="unschedulable"),
        series("scheduler_pending_pods", instance, job, f"{gated}x40", queue="gated"),
        series("scheduler_pod_scheduled_after_flush_total", instance, job, "0+1x40"),
        series(
            "scheduler_async_api_call_execution_total",
            instance,
            job,
            "0+1x40",
            call_type="pod_binding",
            result="error",
        ),
    ]


LEADER = replica("10.0.0.1:10251", job=JOB, leads=True, unschedulable=3, gated=2)
FOLLOWER = replica("10.0.0.2:10251", job=JOB, leads=False, unschedulable=5, gated=7)
KUBE_SCHEDULER = replica("10.0.0.3:10259", job="kube-scheduler", leads=True, unschedulable=11, gated=13)


def expected_alerts(rules: list[dict[str, Any]], values: dict[str, str]) -> list[dict[str, Any]]:
    """Each alert once, without instance or job labels, its ``$value`` the leader's own number."""
    tests = []
    for rule in rules:
        annotations = {
            k: v.replace("{{ $value }}", values.get(rule["alert"], "")) for k, v in rule["annotations"].items()
        }
        tests.append(
            {
                "eval_time": "25m",
                "alertname": rule["alert"],
                "exp_alerts": [{"exp_labels": rule["labels"], "exp_annotations": annotations}],
            }
        )
    return tests


def test_the_alerts_fire_for_this_releases_leader_only(tmp_path: Path) -> None:
    if not PROMTOOL.exists():
        pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package (apt-get install prometheus)")
    spec = rendered("templates/prometheusrule.yaml")["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    rules = spec["groups"][0]["rules"]
    assert len(rules) == 4
    for rule in rules:
        assert f'job="{JOB}"' in rule["expr"] and LEADER_ONLY in rule["expr"], rule["expr"]
    # The leader's 3 unschedulable and 2 gated pods; the follower's 5 and 7 and kube-scheduler's 11 and 13
    # would make any other sum.
    values = {"UsherPodsUnschedulable": "3", "UsherPodsGated": "2"}
    no_alerts = [{"eval_time": "25m", "alertname": r["alert"], "exp_alerts": []} for r in rules]
    unit = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "a leader, a follower and kube-scheduler: the leader's alerts, its numbers",
                "interval": "1m",
                "input_series": LEADER + FOLLOWER + KUBE_SCHEDULER,
                "alert_rule_test": expected_alerts(rules, values),
            },
            {
                "name": "a follower and kube-scheduler alone: nothing fires",
                "interval": "1m",
                "input_series": FOLLOWER + KUBE_SCHEDULER,
                "alert_rule_test": no_alerts,
            },
        ],
    }
    (tmp_path / "unit.yaml").write_text(yaml.safe_dump(unit, sort_keys=False))
    result = subprocess.run(
        [str(PROMTOOL), "test", "rules", "unit.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


SELECTOR = re.compile(r"\b([a-z_:][a-z0-9_:]*)\{([^}]*)\}")


def test_every_dashboard_query_reads_this_releases_leader_only() -> None:
    dashboard = json.loads(rendered("templates/grafana-dashboard.yaml")["data"]["usher.json"])
    constants = {v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "constant"}
    assert constants["job"] == JOB, "the chart renders its own scrape job into the dashboard"
    targets = [t for panel in dashboard["panels"] for t in panel["targets"]]
    assert targets
    for target in targets:
        expr = target["expr"].replace("$job", constants["job"])
        selectors = SELECTOR.findall(expr)
        assert len(selectors) >= 2, expr
        for metric, labels in selectors:
            assert f'job="{JOB}"' in labels, f"{metric} in {expr!r} does not select the chart's job"
        assert LEADER_ONLY in expr, f"{expr!r} also counts followers"
