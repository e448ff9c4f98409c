"""Plotly figures built on the server (pure: data in, figure dict out).

Templates put each figure in a ``<script type="application/json">`` data block
(``figure_json``, escaped as ``json_script``) and ``static/js/charts.js`` draws it: no
inline JavaScript.

Line charts are built as the dict ``go.Figure(...).to_json()`` would give (the same
traces, layout and default template), not through ``go.Figure``: Plotly validates and
deep-copies every point, which cost a job's four charts (8 GPUs × ~1,000 points) the
better part of a second. ``tests/monitoring/test_charts.py`` holds the two to equality.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any

import orjson
import plotly.graph_objects as go
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from monitoring.prometheus import Series
from monitoring.queries import JOB_METRICS
from monitoring.selectors.cluster import ClusterOverview, GpuCell, ProductCapacity
from monitoring.selectors.cohort import CohortUsage, SharingSeries
from monitoring.selectors.common import device_name
from monitoring.selectors.job import JobGpus
from monitoring.selectors.reports import ReportRow
from monitoring.selectors.team import TeamUsage

Figure = dict[str, Any]
PALETTE_UTIL = "Viridis"
PALETTE_TEMP = [[0.0, "#2c7bb6"], [0.5, "#ffffbf"], [0.75, "#fdae61"], [1.0, "#d7191c"]]


def _layout(title: str, *, height: int = 300, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def _times(timestamps: Sequence[float]) -> list[str]:
    """Wall-clock strings in the portal's time zone (plotly.js ignores UTC offsets)."""
    return list(_times_in(timezone.get_current_timezone(), tuple(timestamps)))


@functools.lru_cache(maxsize=32)
def _times_in(tz: tzinfo, timestamps: tuple[float, ...]) -> tuple[str, ...]:
    """``_times`` once per grid and zone: a job's four charts (and the next poll of the
    same window) share their series' query grid."""
    # isoformat is several times cheaper than strftime; [:19] drops the UTC offset.
    return tuple(datetime.fromtimestamp(t, tz).isoformat(" ", "seconds")[:19] for t in timestamps)


def figure_json(figure: Figure) -> str:
    """A figure as JSON for a ``<script type="application/json">`` block, escaped as
    ``json_script`` escapes it (``<``, ``>``, ``&``), encoded by orjson: a job's charts
    are hundreds of kilobytes of numbers."""
    encoded = orjson.dumps(figure, default=_json_default).decode()
    # Three replaces, not str.translate: orjson keeps "°" unescaped, and translate on a
    # non-ASCII string goes character by character.
    return encoded.replace("<", "\\u003C").replace(">", "\\u003E").replace("&", "\\u0026")


_json_default = DjangoJSONEncoder().default


def figure_title(figure: Figure) -> str:
    title = (figure.get("layout") or {}).get("title") or {}
    return str(title.get("text", "") if isinstance(title, dict) else title)


def figure_is_empty(figure: Figure) -> bool:
    """No trace has a value to draw: the chart would be blank axes with a made-up range
    (a page says so in a sentence instead)."""
    for trace in figure.get("data") or []:
        for key in ("y", "z", "values"):
            values = trace.get(key)
            if isinstance(values, dict):
                return False  # a typed array (plotly's "bdata"): numbers to draw
            if key == "z" and values:
                values = [v for row in values for v in (row or [])]
            if values and any(v is not None for v in values):
                return False
    return True


@functools.cache
def _default_template() -> dict[str, Any]:
    """The layout template ``to_json()`` writes into every figure (Plotly's default theme).

    Shared by every figure built here: read-only."""
    return dict(json.loads(go.Figure().to_json())["layout"]["template"])


def _dict(fig: go.Figure) -> Figure:
    # to_json() turns numpy/datetime values into plain JSON; the template re-encodes it.
    return dict(json.loads(fig.to_json()))


def timeseries(
    lines: Sequence[tuple[str, Series]],
    *,
    title: str,
    y_title: str,
    y_range: tuple[float, float] | None = None,
) -> Figure:
    data = [
        {
            "connectgaps": False,
            "mode": "lines",
            "name": name,
            "x": _times(series.timestamps),
            "y": list(series.values),
            "type": "scatter",
        }
        for name, series in lines
    ]
    yaxis: dict[str, Any] = {"title": {"text": y_title}, "rangemode": "tozero"}
    if y_range is not None:
        yaxis["range"] = list(y_range)
    layout = {
        "template": _default_template(),
        **_layout(title, yaxis=yaxis, showlegend=len(lines) > 1),
    }
    return {"data": data, "layout": layout}


def job_metric(series: list[Series], *, title: str, unit: str) -> Figure:
    lines = [
        (device_name(s.labels), s) for s in sorted(series, key=lambda s: device_name(s.labels))
    ]
    return timeseries(
        lines,
        title=title,
        y_title=unit,
        y_range=(0, 100) if unit == "%" else None,
    )


def gpu_heatmap(
    cells: Sequence[GpuCell],
    *,
    title: str,
    unit: str,
    zmin: float,
    zmax: float,
    colorscale: Any,
) -> Figure:
    """Node × GPU index; a missing GPU is a gap, not a zero."""
    nodes = sorted({c.node for c in cells})
    gpus = sorted({c.gpu for c in cells}, key=lambda g: (len(g), g))
    index = {(c.node, c.gpu): c.value for c in cells}
    z = [[index.get((n, g)) for g in gpus] for n in nodes]
    text = [["" if v is None else f"{v:.0f}" for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"GPU {g}" for g in gpus],
            y=nodes,
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            text=text,
            texttemplate="%{text}",
            hovertemplate="%{y} %{x}: %{z:.1f} " + unit + "<extra></extra>",
            colorbar={"title": {"text": unit}},
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        **_layout(
            title,
            height=max(200, 90 + 34 * len(nodes)),
            # A whole margin replaces plotly's defaults (t=100, b=80): give all four sides.
            margin={"l": 140, "r": 20, "t": 40, "b": 40},
        )
    )
    return _dict(fig)


def capacity(products: Sequence[ProductCapacity]) -> Figure:
    """Allocated and free whole GPUs per product (MIG and shared slices are in the table);
    a product offered only as MIG slices or time-sliced replicas has no bar, not an empty
    one."""
    products = [p for p in products if p.gpus_total]
    names = [p.product for p in products]
    fig = go.Figure(
        [
            go.Bar(
                name="allocated",
                x=names,
                y=[p.gpus_allocated for p in products],
                marker_color="#2f6fde",
            ),
            go.Bar(name="free", x=names, y=[p.gpus_free for p in products], marker_color="#c9d3e3"),
        ]
    )
    fig.update_layout(**_layout("Whole GPUs by product", barmode="stack", height=260))
    return _dict(fig)


# One colour per quota resource, shared by its "held" line and its quota line.
_PALETTE = ("#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#5c940d")


def team_usage_figure(usage: TeamUsage) -> Figure:
    """What the team's jobs held of each GPU quota resource (job rows), each beside its own
    quota line, and GPU-equivalents busy (DCGM) on one axis, utilisation % on a second.

    One line per quota resource: whole GPUs, MIG slices and time-sliced replicas are
    different things, and a sum of them drawn against the nvidia.com/gpu quota reads as
    over quota when it is not."""
    x = _times(usage.timestamps)
    fig = go.Figure()
    if not usage.allocated_by_resource:
        fig.add_trace(
            go.Scatter(x=x, y=usage.allocated_gpus, name="GPUs held", mode="lines", line_shape="hv")
        )
    for index, (resource, held) in enumerate(sorted(usage.allocated_by_resource.items())):
        color = _PALETTE[index % len(_PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=held,
                name=f"held {resource}",
                mode="lines",
                line_shape="hv",
                line={"color": color},
                legendgroup=resource,
            )
        )
        limit = usage.quota_limits.get(resource)
        if limit is not None:
            fig.add_trace(
                go.Scatter(
                    x=[x[0], x[-1]] if x else [],
                    y=[limit, limit],
                    name=f"quota {resource}",
                    mode="lines",
                    line={"dash": "dash", "width": 1, "color": color},
                    legendgroup=resource,
                )
            )
    for series in usage.busy_gpus:
        fig.add_trace(
            go.Scatter(
                x=_times(series.timestamps),
                y=series.values,
                name="GPUs busy (Σ utilisation)",
                mode="lines",
            )
        )
    for series in usage.utilisation:
        fig.add_trace(
            go.Scatter(
                x=_times(series.timestamps),
                y=series.values,
                name="mean utilisation %",
                mode="lines",
                yaxis="y2",
                line={"dash": "dot"},
            )
        )
    fig.update_layout(
        **_layout(
            "GPUs held, per quota, vs used",
            height=340,
            yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"},
            yaxis2={
                "title": {"text": "%"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 100],
                "showgrid": False,
            },
        )
    )
    return _dict(fig)


def sharing(
    series: SharingSeries, timestamps: Sequence[float], *, teams: Sequence[str], title: str
) -> Figure:
    """Each team's use of one quota resource, stacked: its own (nominal) quota, then what
    it borrowed on top; what each lent as dotted lines; the teams' nominal total dashed."""
    x = _times(timestamps)
    fig = go.Figure()
    for index, team in enumerate(teams):
        color = _PALETTE[index % len(_PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=series.own[team],
                name=f"{team}: own quota",
                mode="lines",
                line_shape="hv",
                stackgroup="use",
                line={"color": color, "width": 1},
                legendgroup=team,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=series.borrowed[team],
                name=f"{team}: borrowed",
                mode="lines",
                line_shape="hv",
                stackgroup="use",
                line={"color": color, "width": 1, "dash": "dot"},
                fillpattern={"shape": "/"},
                legendgroup=team,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=series.lent[team],
                name=f"{team}: lent",
                mode="lines",
                line_shape="hv",
                line={"color": color, "dash": "dot", "width": 2},
                legendgroup=team,
            )
        )
    total = sum(series.nominal[team] for team in teams)
    fig.add_trace(
        go.Scatter(
            x=[x[0], x[-1]] if x else [],
            y=[total, total],
            name="nominal quota" if len(teams) == 1 else "the teams' nominal quota",
            mode="lines",
            line={"dash": "dash", "width": 1, "color": "#495057"},
        )
    )
    fig.update_layout(
        **_layout(
            title, height=340, yaxis={"title": {"text": series.resource}, "rangemode": "tozero"}
        )
    )
    return _dict(fig)


def cohort_figures(usage: CohortUsage) -> dict[str, Figure]:
    teams = [member.team.slug for member in usage.view.teams]
    return {
        f"cohort-{index}": sharing(
            series,
            usage.timestamps,
            teams=[t for t in teams if t in series.nominal],
            title=f"{series.resource}: own, borrowed and lent, last {usage.range_key}",
        )
        for index, series in enumerate(usage.resources)
    }


# --- One figure set per page (id → figure), for the templates ---------------------------


def cluster_figures(overview: ClusterOverview) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    if overview.products:
        figures["capacity"] = capacity(overview.products)
    if overview.utilisation_cells:
        figures["util-heatmap"] = gpu_heatmap(
            overview.utilisation_cells,
            title="Utilisation now (node × GPU)",
            unit="%",
            zmin=0,
            zmax=100,
            colorscale=PALETTE_UTIL,
        )
    if overview.temperature_cells:
        figures["temp-heatmap"] = gpu_heatmap(
            overview.temperature_cells,
            title="Temperature now (node × GPU)",
            unit="°C",
            zmin=25,
            zmax=95,
            colorscale=PALETTE_TEMP,
        )
    if overview.metrics_error is None:
        figures["cluster-util"] = timeseries(
            [("cluster", s) for s in overview.utilisation],
            title=f"Cluster GPU utilisation, last {overview.range_key}",
            y_title="%",
            y_range=(0, 100),
        )
    return figures


def team_figures(usage: TeamUsage) -> dict[str, Figure]:
    return {"team-usage": team_usage_figure(usage)}


def team_sharing_figures(usage: TeamUsage, cohort: CohortUsage) -> dict[str, Figure]:
    """The team's own line of its cohort's sharing charts."""
    figures = {}
    for index, series in enumerate(cohort.resources):
        if usage.team.slug in series.nominal:
            figures[f"team-sharing-{index}"] = sharing(
                series,
                cohort.timestamps,
                teams=[usage.team.slug],
                title=f"{series.resource} in cohort {cohort.view.cohort.slug}: own, "
                f"borrowed and lent",
            )
    return figures


def job_figures(result: JobGpus) -> dict[str, Figure]:
    if result.metrics_error or result.window is None:
        return {}
    return {
        f"job-{result.job.pk}-{key}": job_metric(
            result.metrics.get(key, []), title=title, unit=unit
        )
        for key, (title, unit) in JOB_METRICS.items()
    }


def report_figures(by_day: Sequence[ReportRow], days: Sequence[Any]) -> dict[str, Figure]:
    """GPU-hours allocated and used per day, stacked by team (rows grouped by day, team)."""
    teams = sorted({row.team for row in by_day if row.team})
    labels = [str(day) for day in days]
    figures: dict[str, Figure] = {}
    for key, title, field in (
        ("report-allocated", "GPU-hours allocated per day, by team", "gpu_hours_allocated"),
        ("report-used", "GPU-hours used per day, by team", "gpu_hours_used"),
    ):
        values = {(str(row.day), row.team): getattr(row, field) for row in by_day}
        fig = go.Figure(
            [
                go.Bar(
                    name=team,
                    x=labels,
                    y=[values.get((day, team)) for day in labels],
                    marker_color=_PALETTE[n % len(_PALETTE)],
                    hovertemplate=f"{team} %{{x}}: %{{y:.1f}} GPU-h<extra></extra>",
                )
                for n, team in enumerate(teams)
            ]
        )
        fig.update_layout(
            **_layout(title, barmode="stack", height=300, yaxis={"title": {"text": "GPU-h"}})
        )
        figures[key] = _dict(fig)
    return figures
