"""The events people can be notified of, and what in a job's timeline triggers each.

Adding an event type is one line here: a key, its words, and the timeline entry that
triggers it — a move to a state (``on_state``) or an entry's reason (``on_reason``). The
jobs layer checks every timeline entry it writes against this table (``event_for``), so a
new line needs no other code, as long as the portal already writes that entry; the
settings page and the API list the new event at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EventType:
    key: str
    label: str  # "<job> <label>": what a person reads in the subject
    on_state: str = ""  # the job moved to this state
    on_reason: str = ""  # or a timeline entry has this reason
    default: bool = False  # on by default for a user's email


EVENTS: tuple[EventType, ...] = (
    EventType("job.running", "started running", on_state="running"),
    EventType("job.succeeded", "succeeded", on_state="succeeded"),
    EventType("job.failed", "failed", on_state="failed", default=True),
    EventType("job.cancelled", "was cancelled", on_state="cancelled"),
    EventType("job.evicted", "was evicted", on_reason="Preempted", default=True),
    EventType(
        "job.moved",
        "was moved off a node being re-partitioned",
        on_reason="NodeReshape",
        default=True,
    ),
    EventType("job.waiting", "has been waiting longer than expected", on_reason="WaitingLong"),
    EventType("job.idle", "holds GPUs idle", on_reason="IdleGPUs", default=True),
    EventType(
        "job.idle_stopped",
        "was stopped for holding GPUs idle",
        on_reason="IdleStopped",
        default=True,
    ),
    EventType(
        "workspace.idle",
        "will be stopped soon",
        on_reason="WorkspaceIdle",
        default=True,
    ),
    EventType(
        "workspace.lifetime_stopped",
        "reached its maximum lifetime",
        on_reason="LifetimeStopped",
        default=True,
    ),
    EventType(
        "job.gpu_failed",
        "failed because a GPU failed",
        on_reason="GPUFailure",
        default=True,
    ),
    EventType(
        "job.node_failed",
        "failed because its node stopped responding",
        on_reason="NodeFailure",
        default=True,
    ),
    # Not a timeline entry: the monitoring layer sends it to each team's leads once a
    # month is rolled up (its subject is worded there).
    EventType("report.monthly", "monthly GPU-hours summary (team leads)", default=True),
    # Not a timeline entry either: to platform admins, when a node's GPUs keep failing jobs.
    EventType("node.gpu_failures", "node whose GPUs keep failing (platform admins)", default=True),
)

EVENT_KEYS = tuple(event.key for event in EVENTS)
DEFAULT_EVENTS = tuple(event.key for event in EVENTS if event.default)
_BY_KEY = {event.key: event for event in EVENTS}


def event_get(key: str) -> EventType:
    return _BY_KEY[key]


def event_for(*, state: str | None, reason: str) -> EventType | None:
    """The event a timeline entry triggers: ``state`` is the state the job moved to with
    this entry (None when the entry is not a state change). A reason is the more specific:
    a job the idle policy cancels is ``job.idle_stopped``, not ``job.cancelled``."""
    for event in EVENTS:
        if event.on_reason and event.on_reason == reason:
            return event
    for event in EVENTS:
        if event.on_state and state is not None and event.on_state == state:
            return event
    return None
