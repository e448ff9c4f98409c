"""Roll up GPU-hours per day (what the periodic task does), or re-build given days.

manage.py accounting_rollup                                   # the days due, then today
manage.py accounting_rollup --day 2026-11-02                  # re-build one day
manage.py accounting_rollup --start 2026-10-01 --end 2026-10-31
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from monitoring.accounting import RollupResult, usage_rollup, usage_rollup_day


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"{value!r} is not a day: write it as YYYY-MM-DD.") from exc


class Command(BaseCommand):
    help = "Roll up GPU-hours (allocated, used, idle, cost) per job and day into PostgreSQL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--day", type=_day, help="re-build this day (YYYY-MM-DD)")
        parser.add_argument("--start", type=_day, help="first day to re-build")
        parser.add_argument("--end", type=_day, help="last day to re-build (included)")

    def handle(self, *args: Any, **options: Any) -> None:
        day, start, end = options["day"], options["start"], options["end"]
        if day and (start or end):
            raise CommandError("Give --day, or --start and --end, not both.")
        if bool(start) != bool(end):
            raise CommandError("--start and --end go together.")
        today = timezone.localdate()
        if day:
            start = end = day
        if start and end:
            if end < start:
                raise CommandError(f"--end {end} is before --start {start}.")
            if end > today:
                raise CommandError(f"--end {end} has not begun yet (today is {today}).")
            days = [start + timedelta(days=n) for n in range((end - start).days + 1)]
            results = [usage_rollup_day(day=d) for d in days]
        else:
            results = usage_rollup()
        for result in results:
            self._report(result)

    def _report(self, result: RollupResult) -> None:
        state = "complete" if result.complete else "partial"
        if result.error:
            state += f", without metrics ({result.error})"
        self.stdout.write(f"{result.day}: {result.jobs} jobs, {state}, {result.seconds:.2f}s")
