"""Line charts are built without go.Figure, and must be exactly what Plotly would build."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import plotly.graph_objects as go
from django.utils import timezone

from monitoring import charts
from monitoring.prometheus import Series


def _plotly_timeseries(
    lines: list[tuple[str, Series]], *, title: str, y_title: str, y_range: Any = None
) -> dict[str, Any]:
    """The figure as go.Figure builds it (how charts.timeseries used to)."""
    fig = go.Figure()
    for name, series in lines:
        fig.add_trace(
            go.Scatter(
                x=charts._times(series.timestamps),
                y=series.values,
                name=name,
                mode="lines",
                connectgaps=False,
            )
        )
    yaxis: dict[str, Any] = {"title": {"text": y_title}, "rangemode": "tozero"}
    if y_range is not None:
        yaxis["range"] = list(y_range)
    fig.update_layout(**charts._layout(title, yaxis=yaxis, showlegend=len(lines) > 1))
    return dict(json.loads(fig.to_json()))


def test_timeseries_equals_the_plotly_figure_gaps_and_all() -> None:
    # Given two GPUs' series on one grid, one with a gap (NaN → None), and a third shorter one
    grid = [1_750_000_000.0 + 30 * i for i in range(50)]
    lines = [
        ("node-1 GPU 0 · pod-a", Series({"gpu": "0"}, grid, [float(i % 97) for i in range(50)])),
        (
            "node-1 GPU 1 · pod-a",
            Series({"gpu": "1"}, grid, [None if i % 7 == 0 else 42.5 for i in range(50)]),
        ),
        ("node-2 GPU 0 · pod-b", Series({"gpu": "0"}, grid[10:], [3.25] * 40)),
    ]
    # When the chart is built, with and without a fixed y range
    for y_range in ((0, 100), None):
        built = charts.timeseries(lines, title="GPU utilisation", y_title="%", y_range=y_range)
        # Then it is the figure Plotly would have built, to the last point and template key
        reference = _plotly_timeseries(lines, title="GPU utilisation", y_title="%", y_range=y_range)
        assert json.loads(json.dumps(built)) == reference


def test_single_line_chart_has_no_legend_and_an_empty_chart_still_renders() -> None:
    one = [("cluster", Series({}, [1_750_000_000.0], [12.0]))]
    assert charts.timeseries(one, title="t", y_title="%") == _plotly_timeseries(
        one, title="t", y_title="%"
    )
    assert charts.timeseries([], title="t", y_title="%") == _plotly_timeseries(
        [], title="t", y_title="%"
    )


def test_chart_times_are_wall_clock_in_the_portal_time_zone() -> None:
    # Given Prometheus timestamps (Unix seconds, fractional) either side of a DST change
    stamps = [1792889999.75, 1792890000.0, 1792893600.5]  # 2026-10-25 00:59:59.75 UTC …
    # When they are shown in Berlin, then in UTC
    with timezone.override(ZoneInfo("Europe/Berlin")):
        berlin = charts._times(stamps)
    with timezone.override(UTC):
        utc = charts._times(stamps)
    # Then each is the local wall-clock time to the second, without an offset
    assert berlin == ["2026-10-25 02:59:59", "2026-10-25 02:00:00", "2026-10-25 03:00:00"]
    assert utc == ["2026-10-25 00:59:59", "2026-10-25 01:00:00", "2026-10-25 02:00:00"]
    expected = [
        datetime.fromtimestamp(t, UTC)
        .astimezone(ZoneInfo("Europe/Berlin"))
        .strftime("%Y-%m-%d %H:%M:%S")
        for t in stamps
    ]
    assert berlin == expected


def test_figure_json_cannot_close_its_script_block_and_reads_back_unchanged() -> None:
    # Given a figure whose texts hold markup (a job or node name is user data)
    figure = {
        "data": [{"name": "</script><script>alert(1)</script>", "y": [1.5, None, 3]}],
        "layout": {"title": {"text": "a & b > c °C"}},
    }
    # When it is encoded for a <script type="application/json"> block
    encoded = charts.figure_json(figure)
    # Then no <, > or & is left raw, and JSON.parse gives the figure back
    assert not {"<", ">", "&"} & set(encoded)
    assert json.loads(encoded) == figure


def test_a_figure_with_nothing_to_draw_is_empty_and_one_with_a_value_is_not() -> None:
    # Blank axes, whatever the chart: no lines, bars of no value, a heatmap of no cells
    days = [date(2026, 10, 1), date(2026, 10, 2)]
    assert charts.figure_is_empty(charts.timeseries([], title="t", y_title="%"))
    assert all(map(charts.figure_is_empty, charts.report_figures([], days).values()))
    assert charts.figure_is_empty({"data": [{"type": "heatmap", "z": [[None, None], [None]]}]})
    # One value is something to draw
    assert not charts.figure_is_empty({"data": [{"type": "bar", "y": [None, 0.0]}]})
    assert not charts.figure_is_empty({"data": [{"type": "heatmap", "z": [[None], [3]]}]})
    assert not charts.figure_is_empty({"data": [{"y": {"dtype": "f8", "bdata": "AAAA"}}]})
    assert charts.figure_title(charts.timeseries([], title="GPU use", y_title="%")) == "GPU use"
