"""Write a Prometheus config and the GPU alert rules (``make run``, docker compose, tests).

    manage.py prometheus_config --shipped
        rewrites deploy/prometheus/gpu-alerts.yml and deploy/prometheus/prometheus.yml
    manage.py prometheus_config --config var/prometheus/prometheus.yml \\
        --rules var/prometheus/gpu-alerts.yml --dcgm-target 127.0.0.1:9400 \\
        --portal-target 127.0.0.1:8000 --scrape-interval 5s
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from monitoring.prometheus_config import (
    COMPOSE_CONFIG,
    COMPOSE_CONFIG_PATH,
    RULES_PATH,
    render_config,
    render_rules,
)


class Command(BaseCommand):
    help = "Write a Prometheus config scraping the DCGM exporter and the portal, and its rules."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--shipped", action="store_true", help="rewrite deploy/prometheus/")
        parser.add_argument("--config", type=Path, help="where to write prometheus.yml")
        parser.add_argument("--rules", type=Path, help="where to write the alert rules")
        parser.add_argument("--dcgm-target", action="append", default=[], help="host:port")
        parser.add_argument("--portal-target", action="append", default=[], help="host:port")
        parser.add_argument("--scrape-interval", default="15s")
        parser.add_argument("--for", dest="duration", help="override every rule's for: (tests)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["shipped"]:
            RULES_PATH.write_text(render_rules())
            COMPOSE_CONFIG_PATH.write_text(render_config(**COMPOSE_CONFIG))
            self.stdout.write(f"wrote {RULES_PATH} and {COMPOSE_CONFIG_PATH}")
            return
        config, rules = options["config"], options["rules"]
        if config is None or rules is None:
            self.stderr.write("give --config and --rules, or --shipped")
            raise SystemExit(2)
        rules.parent.mkdir(parents=True, exist_ok=True)
        config.parent.mkdir(parents=True, exist_ok=True)
        rules.write_text(render_rules(duration_override=options["duration"]))
        config.write_text(
            render_config(
                dcgm_targets=options["dcgm_target"],
                portal_targets=options["portal_target"],
                rule_files=[str(rules.resolve())],
                scrape_interval=options["scrape_interval"],
                evaluation_interval=options["scrape_interval"],
            )
        )
        self.stdout.write(f"wrote {config} and {rules}")
