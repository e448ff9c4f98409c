"""The shipped alert rules and Prometheus configs: generated from one source, valid for
promtool, and faithful to the GPU guides' thresholds (docs/references.md) and durations."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from django.core.management import call_command

from monitoring import queries
from monitoring.prometheus_config import (
    COMPOSE_CONFIG,
    COMPOSE_CONFIG_PATH,
    RULES_PATH,
    render_config,
    render_rules,
)

ROOT = Path(__file__).resolve().parents[2]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: bash scripts/ensure_tools.sh prometheus"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)


def rules_by_name(text: str) -> dict[str, dict[str, object]]:
    doc = yaml.safe_load(text)
    return {r.get("alert") or r["record"]: r for g in doc["groups"] for r in g["rules"]}


def test_shipped_rules_pass_promtool_check_rules() -> None:
    # Given the rule file Prometheus loads; When promtool checks it; Then it passes
    result = promtool("check", "rules", str(RULES_PATH))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_shipped_files_are_the_generated_ones() -> None:
    # Given the generator; Then the committed files are exactly its output (regenerate with
    # `manage.py prometheus_config --shipped`)
    assert RULES_PATH.read_text() == render_rules()
    assert COMPOSE_CONFIG_PATH.read_text() == render_config(**COMPOSE_CONFIG)


def test_rules_keep_the_seed_thresholds_durations_and_labels() -> None:
    rules = rules_by_name(RULES_PATH.read_text())
    expected = {
        "GPUTemperatureHigh": ("DCGM_FI_DEV_GPU_TEMP > 85", "10m", "warning"),
        "GPUMemoryExhausted": ("DCGM_FI_DEV_FB_FREE < 1024", "2m", "critical"),
        "GPUHighUtilization": ("DCGM_FI_DEV_GPU_UTIL > 95", "5m", "info"),
    }
    for name, (condition, duration, severity) in expected.items():
        rule = rules[name]
        assert condition in str(rule["expr"]), name
        assert rule["for"] == duration, name
        assert rule["labels"] == {"severity": severity}, name
        # the node from either hostname label, and the holding pod in the description
        assert '"node", "$1", "Hostname"' in str(rule["expr"])
        assert '"node", "$1", "hostname"' in str(rule["expr"])
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert "$labels.gpu" in annotations["summary"] and "$labels.node" in annotations["summary"]
        assert "$labels.pod" in annotations["description"]


def test_duration_override_changes_only_for(tmp_path: Path) -> None:
    # Given the rules rendered for tests
    short = rules_by_name(render_rules(duration_override="2s"))
    shipped = rules_by_name(render_rules())
    # Then only `for:` differs, and promtool accepts the result too
    for name, rule in short.items():
        if "record" in rule:
            assert rule == shipped[name]
            continue
        assert rule["for"] == "2s"
        assert {**rule, "for": shipped[name]["for"]} == shipped[name]
    path = tmp_path / "rules.yml"
    path.write_text(render_rules(duration_override="2s"))
    assert promtool("check", "rules", str(path)).returncode == 0


def test_generated_configs_pass_promtool_check_config(tmp_path: Path) -> None:
    # Given a config as `make run` writes it (the command, real paths)
    call_command(
        "prometheus_config",
        config=tmp_path / "prometheus.yml",
        rules=tmp_path / "gpu-alerts.yml",
        dcgm_target=["127.0.0.1:9400"],
        portal_target=["127.0.0.1:8000"],
        scrape_interval="5s",
        duration=None,
        shipped=False,
    )
    # When promtool checks it; Then it is valid and loads the rules
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {c["job_name"]: c for c in config["scrape_configs"]}
    assert jobs["dcgm-exporter"]["honor_labels"] is True  # keeps the holding pod's labels
    assert jobs["gpu-portal"]["metrics_path"] == "/metrics"
    assert jobs["gpu-portal"]["static_configs"][0]["targets"] == ["127.0.0.1:8000"]
    # And the compose config, with its rule path pointed at the shipped file
    compose = render_config(**{**COMPOSE_CONFIG, "rule_files": [str(RULES_PATH)]})
    (tmp_path / "compose.yml").write_text(compose)
    result = promtool("check", "config", str(tmp_path / "compose.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_prometheus_mounts_the_same_config_and_rules() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service = compose["services"]["prometheus"]
    assert service["image"].split(":")[0] == "prom/prometheus"
    mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"] if m.startswith("./")}
    assert mounts["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"
    assert mounts["/etc/prometheus/gpu-alerts.yml"] == "./deploy/prometheus/gpu-alerts.yml"
    assert COMPOSE_CONFIG["rule_files"] == ["/etc/prometheus/gpu-alerts.yml"]
    web_env = compose["services"]["web"]["environment"]
    assert "prometheus:9090" in web_env["PROMETHEUS_URL"]


# Four GPUs: a whole GPU held by team-a, a free one, a time-sliced GPU whose one series is
# repeated for two pods of team-b, and a MIG instance (engine activity 0.5) held by team-a.
RECORDING_INPUT = [
    ('DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="0",namespace="team-a",pod="a-0"}', "80x5"),
    ('DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="1"}', "0x5"),
    ('DCGM_FI_DEV_GPU_UTIL{hostname="n2",gpu="0",namespace="team-b",pod="b-0"}', "60x5"),
    ('DCGM_FI_DEV_GPU_UTIL{hostname="n2",gpu="0",namespace="team-b",pod="b-1"}', "60x5"),
    (
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname="n3",gpu="0",GPU_I_ID="1",'
        'namespace="team-a",pod="a-1"}',
        "0.5x5",
    ),
]


def test_recorded_lines_equal_the_raw_panel_queries(tmp_path: Path) -> None:
    # Given the shipped rules and known DCGM series
    expected = {
        # the four GPUs' mean: (80 + 0 + 60 + 50) / 4
        "cluster": [
            (queries.cluster_utilisation(recorded=recorded), 47.5) for recorded in (False, True)
        ],
        # team-a holds 80 % and 50 %; team-b one shared GPU, counted once
        "team-a": [(queries.team_utilisation("team-a", recorded=r), 65) for r in (False, True)]
        + [(queries.team_busy_gpus("team-a", recorded=r), 1.3) for r in (False, True)],
        "team-b": [(queries.team_utilisation("team-b", recorded=r), 60) for r in (False, True)]
        + [(queries.team_busy_gpus("team-b", recorded=r), 0.6) for r in (False, True)],
    }
    # and the idle GPU-seconds under 70 % over the last 3 minutes (samples a minute apart):
    # every pod but a-0 (80 %) spent them all under it: three steps, 180 s (the step at the
    # window's start belongs to the window before)
    idle = {"a-1": 180, "b-0": 180, "b-1": 180}
    case = {
        "interval": "1m",
        "input_series": [
            {"series": series, "values": values} for series, values in RECORDING_INPUT
        ],
        "promql_expr_test": [
            {"expr": expr, "eval_time": "3m", "exp_samples": [{"labels": "{}", "value": value}]}
            for cases in expected.values()
            for expr, value in cases
        ]
        + [
            {
                "expr": queries.idle_gpu_seconds(
                    threshold_percent=70, lookback_seconds=180, step=60, recorded=recorded
                ),
                "eval_time": "4m",
                "exp_samples": [
                    {"labels": f'{{namespace="team-{pod[0]}",pod="{pod}"}}', "value": seconds}
                    for pod, seconds in idle.items()
                ]
                + [{"labels": '{namespace="team-a",pod="a-0"}', "value": 0}],
            }
            for recorded in (False, True)
        ],
    }
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump(
            {"rule_files": [str(RULES_PATH)], "evaluation_interval": "1m", "tests": [case]}
        )
    )

    # When promtool evaluates the raw queries and the recorded series at the same instant
    result = promtool("test", "rules", str(tmp_path / "tests.yml"))

    # Then each recorded line has the raw query's value, with the raw query's (empty) labels
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_recorded_lines_are_the_panels_queries_kept_per_namespace() -> None:
    rules = rules_by_name(RULES_PATH.read_text())
    assert rules[queries.CLUSTER_UTILISATION_RECORD]["expr"] == queries.cluster_utilisation()
    for record in (queries.NAMESPACE_UTILISATION_RECORD, queries.NAMESPACE_BUSY_RECORD):
        assert "by (namespace)" in str(rules[record]["expr"])
    assert queries.team_busy_gpus("team-b", recorded=True) == (
        'max(gpu_portal:namespace_busy_gpus:sum{namespace="team-b"})'
    )


def test_no_recording_rule_reads_another() -> None:
    # promtool's backfill evaluates each rule over the raw history alone: a rule reading
    # another's series would backfill empty
    records = {
        name: rule for name, rule in rules_by_name(render_rules()).items() if "record" in rule
    }
    assert len(records) == 4
    assert not [name for name, rule in records.items() if "gpu_portal:" in str(rule["expr"])]


def test_xid_and_ecc_alerts_fire_for_the_failed_gpu_only(tmp_path: Path) -> None:
    # Given two GPUs: GPU 0 reports XID 79 and a double-bit ECC error from the third minute,
    # held by pod t-0; GPU 1 stays healthy
    held = '{Hostname="n1",gpu="0",namespace="team-a",pod="t-0"}'
    series = [
        (f"DCGM_FI_DEV_XID_ERRORS{held}", "0 0 79 79 79"),
        ('DCGM_FI_DEV_XID_ERRORS{Hostname="n1",gpu="1"}', "0x4"),
        (f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{held}", "0 0 1 1 1"),
        ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname="n1",gpu="1"}', "0x4"),
    ]
    failed = {"Hostname": "n1", "gpu": "0", "node": "n1", "namespace": "team-a", "pod": "t-0"}

    def fired(name: str, value: str) -> dict[str, object]:
        return {
            "eval_time": "3m",
            "alertname": name,
            "exp_alerts": [
                {
                    "exp_labels": {**failed, "severity": "critical"},
                    "exp_annotations": {
                        key: text.replace("{{ $labels.gpu }}", "0")
                        .replace("{{ $labels.node }}", "n1")
                        .replace("{{ $value }}", value)
                        .replace(
                            "{{ if $labels.pod }} (pod {{ $labels.namespace }}/{{ $labels.pod }})"
                            "{{ end }}",
                            " (pod team-a/t-0)",
                        )
                        for key, text in rules_by_name(RULES_PATH.read_text())[name][
                            "annotations"
                        ].items()
                    },
                }
            ],
        }

    case = {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        # Then at minute 3 each alert fires once, for GPU 0 and its pod, naming the XID
        "alert_rule_test": [
            fired("GPUXidError", "79"),
            fired("GPUUncorrectableECC", "1"),
            {"eval_time": "1m", "alertname": "GPUXidError", "exp_alerts": []},
        ],
    }
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump(
            {"rule_files": [str(RULES_PATH)], "evaluation_interval": "1m", "tests": [case]}
        )
    )
    result = promtool("test", "rules", str(tmp_path / "tests.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
