"""The PromQL each panel sends, and the step chosen for each range (pure functions)."""

from __future__ import annotations

import pytest

from monitoring import queries


@pytest.mark.parametrize("key", list(queries.RANGES))
def test_every_range_gets_a_step_keeping_series_under_1000_points(key: str) -> None:
    # Given an accepted range
    _, seconds = queries.parse_range(key)
    # When a step is chosen for it
    step = queries.step_for(seconds)
    # Then Prometheus returns at most ~1,000 points per series, and no needlessly coarse step
    assert seconds // step + 1 <= 1000
    smaller = [s for s in queries.NICE_STEPS if s < step]
    assert not smaller or seconds // smaller[-1] + 1 > 1000


def test_step_for_known_ranges_and_odd_job_lifetimes() -> None:
    assert [queries.step_for(s) for s in queries.RANGES.values()] == [1, 5, 30, 120, 900]
    assert queries.step_for(30) == 1  # a job that just started
    # A 60-day-old job (capped to 7 days by the selector, but the function copes anyway)
    assert (60 * 86400) // queries.step_for(60 * 86400) + 1 <= 1000


@pytest.mark.parametrize("bad", ["2h", "1d", "", "15M", "7d;drop"])
def test_unknown_ranges_are_refused_naming_range(bad: str) -> None:
    if bad == "":
        assert queries.parse_range(bad) == ("1h", 3600)  # empty: the default
        return
    with pytest.raises(queries.RangeError, match="range must be one of 15m, 1h, 6h, 24h, 7d"):
        queries.parse_range(bad)


def test_utilisation_accepts_both_hostname_spellings_and_mig_devices() -> None:
    expr = queries.utilisation('{pod!=""}')
    # Both label spellings become `node`
    assert '"node", "$1", "Hostname", "(.+)"' in expr
    assert '"node", "$1", "hostname", "(.+)"' in expr
    # GPU_UTIL where reported, else MIG engine activity as a percentage
    assert 'DCGM_FI_DEV_GPU_UTIL{pod!=""} or (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""} * 100)' in expr


def test_cluster_panels_aggregate_in_promql_by_node_and_gpu() -> None:
    assert queries.cluster_utilisation_by_gpu().startswith("avg by (node, gpu) (label_replace(")
    assert queries.cluster_temperature_by_gpu().startswith("max by (node, gpu) (label_replace(")
    assert "DCGM_FI_DEV_GPU_TEMP" in queries.cluster_temperature_by_gpu()
    # Cluster utilisation: the mean over GPUs, each GPU once (MIG instances averaged first),
    # grouped by the host labels as scraped: no label_replace over every raw series
    line = queries.cluster_utilisation()
    assert line.startswith("avg(avg by (node, Hostname, hostname, gpu) ((DCGM_FI_DEV_GPU_UTIL")
    assert "label_replace" not in line
    assert queries.firing_alerts() == 'ALERTS{alertstate="firing"}'


def test_team_queries_count_a_time_sliced_gpu_once() -> None:
    # Given the per-pod copies of a shared GPU's series
    util = queries.team_utilisation("team-vision")
    busy = queries.team_busy_gpus("team-vision")
    # Then each device is reduced to one series (max by device) before the team aggregate
    device = "max by (node, Hostname, hostname, gpu, GPU_I_ID) ("
    assert util.startswith(f"avg({device}")
    assert busy.startswith(f"sum({device}") and busy.endswith(") / 100")
    assert 'namespace="team-vision"' in util and 'namespace="team-vision"' in busy


def test_idle_query_needs_the_whole_window_under_the_threshold_and_held_that_long() -> None:
    expr = queries.idle_pods(threshold_percent=5, window_seconds=1800)
    assert expr.startswith("max by (namespace, pod) (")
    assert 'max_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[1800s])' in expr
    assert 'max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""}[1800s]) * 100' in expr
    assert ") < 5 and on (namespace, pod) group by (namespace, pod) (" in expr
    assert 'DCGM_FI_DEV_GPU_UTIL{pod!=""} offset 1800s' in expr


def test_idle_gpu_seconds_counts_below_threshold_samples_times_the_step() -> None:
    expr = queries.idle_gpu_seconds(threshold_percent=5, lookback_seconds=3600, step=5)
    assert expr.startswith(
        "sum by (namespace, pod) (sum_over_time((max by (namespace, pod, node, Hostname, "
        "hostname, gpu, GPU_I_ID) ("
    )
    # The steps in (now − 1 h, now]: a range's first second left out, which Prometheus 2
    # would count (a step on a window's edge belongs to the window before).
    assert "< bool 5)[3599s:5s]" in expr
    assert expr.endswith(") * 5")


def test_used_gpu_seconds_integrates_each_held_device_over_the_steps() -> None:
    expr = queries.used_gpu_seconds(lookback_seconds=86400, step=60)
    assert expr.startswith("sum by (namespace, pod) (sum_over_time(max by (namespace, pod, ")
    assert (
        '(DCGM_FI_DEV_GPU_UTIL{pod!=""} or (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""} * 100))' in expr
    )
    assert expr.endswith(")))[86399s:60s])) * 0.6")  # % × 60 s / 100: GPU-seconds
    recorded = queries.used_gpu_seconds(lookback_seconds=3600, step=60, recorded=True)
    assert "sum_over_time(gpu_portal:pod_gpu_utilisation:max[3599s:60s])" in recorded


def test_job_series_select_exactly_the_jobs_pods() -> None:
    # Given a job whose placement names its pods
    selector = queries.job_pods_selector("team-vision", ["train-7-0-ab", "train-7-1-cd"], "train-7")
    # Then the series are those pods' only, one line per (pod, device)
    assert selector == '{namespace="team-vision",pod=~"train-7-0-ab|train-7-1-cd"}'
    expr = queries.job_gpu_metric("temperature", selector)
    assert expr.startswith("max by (pod, node, gpu, GPU_I_ID) (label_replace(")
    assert f"DCGM_FI_DEV_GPU_TEMP{selector}" in expr
    assert "DCGM_FI_DEV_FB_USED" in queries.job_gpu_metric("memory_used", selector)
    assert "DCGM_FI_DEV_POWER_USAGE" in queries.job_gpu_metric("power", selector)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in queries.job_gpu_metric("utilisation", selector)
    # And without a placement, every pod named after the job's objects (regex-escaped)
    assert queries.job_pods_selector("ns", [], "a.b-1") == '{namespace="ns",pod=~"a\\\\.b-1-.+"}'
    with pytest.raises(ValueError, match="unknown job metric"):
        queries.job_gpu_metric("fan_speed", selector)


def test_label_values_are_quoted_safely() -> None:
    assert queries.matchers(equal={"namespace": 'a"b\\c'}) == '{namespace="a\\"b\\\\c"}'
