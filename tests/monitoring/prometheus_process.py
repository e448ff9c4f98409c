"""Start a real Prometheus (Debian's ``prometheus`` binary) as a subprocess for tests.

    prom = start_prometheus(tmp_path, dcgm_targets=["127.0.0.1:9400"], rules_for="1s")
    ...
    prom.stop()

The config and rules come from ``monitoring.prometheus_config`` (what ships), with a 1 s
scrape/evaluation interval and, optionally, every rule's ``for:`` shortened. A missing
binary is an error, not a skip: ``scripts/test.sh`` installs it (``ensure_tools.sh``).

``start_history_prometheus`` serves known series instead: OpenMetrics text backfilled with
``promtool tsdb create-blocks-from openmetrics``, no targets.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from monitoring.prometheus_config import render_config, render_rules
from tests.processes import http_ok, spawn, tail, terminate, wait_ready

READY_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise RuntimeError(
            "prometheus is not installed: run `bash scripts/ensure_tools.sh prometheus` "
            "(Debian's prometheus package); the monitoring tests need a real Prometheus."
        )
    return path


@dataclass
class PrometheusProcess:
    workdir: Path
    dcgm_targets: tuple[str, ...]
    portal_targets: tuple[str, ...] = ()
    rules_for: str | None = None
    # Backfilled history: these blocks become the TSDB, kept 30 days instead of an hour.
    blocks: Path | None = None
    extra_args: tuple[str, ...] = ()
    port: int = 0
    # Every second for the tests; a big cluster's exporter (4,000 GPUs) less often.
    scrape_interval: str = "1s"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "prometheus.log"

    def start(self) -> PrometheusProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = self.workdir / "gpu-alerts.yml"
        rules.write_text(render_rules(duration_override=self.rules_for))
        config = self.workdir / "prometheus.yml"
        config.write_text(
            render_config(
                dcgm_targets=list(self.dcgm_targets),
                portal_targets=list(self.portal_targets),
                rule_files=[str(rules)],
                scrape_interval=self.scrape_interval,
                evaluation_interval=self.scrape_interval,
            )
        )
        self.port = self.port or free_port()
        if self.blocks is not None:
            shutil.copytree(self.blocks, self.workdir / "data")
        cmd = [
            prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.retention.time={'30d' if self.blocks else '1h'}",
            "--log.level=warn",
            *self.extra_args,
        ]
        self.process = spawn(cmd, self.log_file)
        wait_ready(
            self.process,
            lambda: http_ok(f"{self.url}/-/ready"),
            what="prometheus",
            log_file=self.log_file,
            timeout=READY_TIMEOUT,
        )
        return self

    def tail(self, size: int = 3000) -> str:
        return tail(self.log_file, size)

    def stop(self, timeout: float = 10.0) -> None:
        terminate(self.process, timeout)


def start_prometheus(
    workdir: Path,
    *,
    dcgm_targets: Sequence[str],
    portal_targets: Sequence[str] = (),
    rules_for: str | None = None,
) -> PrometheusProcess:
    return PrometheusProcess(
        Path(workdir), tuple(dcgm_targets), tuple(portal_targets), rules_for
    ).start()


def start_history_prometheus(
    workdir: Path, openmetrics: str, *, lookback_delta: str | None = None
) -> PrometheusProcess:
    """A Prometheus serving exactly ``openmetrics`` (ending in ``# EOF``), backfilled.

    ``lookback_delta``: how far back an instant looks for a sample. A live Prometheus ends a
    series that left a scrape with a staleness marker; a backfill cannot write one, so a
    test whose series end mid-window sets this to its sample interval."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    history = workdir / "history.om"
    history.write_text(openmetrics)
    blocks = workdir / "blocks"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(history), str(blocks)],
        check=True,
        capture_output=True,
        text=True,
    )
    extra = (f"--query.lookback-delta={lookback_delta}",) if lookback_delta else ()
    return PrometheusProcess(workdir / "prometheus", (), blocks=blocks, extra_args=extra).start()
