"""Synthetic container logs, computed from the pod's timeline instead of stored.

A log line is a pure function of (pod, container, line number), so logs survive restarts
without storing text, ``tailLines`` costs only the lines asked for, and the same seed
gives the same log.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

STEP_SECONDS = 5.0  # one training progress line per 5 simulated seconds (at most 2000)
REQUEST_SECONDS = 7.0  # one inference access-log line per 7 simulated seconds
MAX_LINES = 5000  # the kubelet rotates logs; so do we


@dataclass
class Timeline:
    kind: str  # "training" | "inference"
    started: float  # container start (simulated epoch seconds)
    finished: float | None  # when the container exited, if it has
    duration: float  # this run's time for training (less than planned when resumed)
    exit_code: int
    image: str
    gpus: list[str]
    env: dict[str, str]
    port: int
    seed: str
    xid: int | None = None  # the GPU failed under it (sandbox.faults): CUDA's last words
    planned: float | None = None  # the whole run's planned time (duration is what is left)
    resume_step: int = 0  # resumed from this checkpoint step (sandbox.checkpoints)


def step_seconds(planned: float) -> float:
    """Seconds per training step (one log line each, at most 2,000) for a run planned to
    last ``planned`` seconds."""
    return max(STEP_SECONDS, planned / 2000)


def total_steps(planned: float) -> int:
    return max(1, int(planned // step_seconds(planned)))


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _rng(tl: Timeline, i: int) -> random.Random:
    return random.Random(f"{tl.seed}/{i}")


def _training_lines(tl: Timeline, now: float) -> tuple[list[tuple[float, str]], int, float, Any]:
    world = int(tl.env.get("WORLD_SIZE", "1") or 1)
    rank = tl.env.get("RANK") or tl.env.get("JOB_COMPLETION_INDEX") or "0"
    header = [
        f"[sandbox] image={tl.image}",
        f"CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(len(tl.gpus))) or '(none)'}"
        f" NVIDIA_VISIBLE_DEVICES={','.join(tl.gpus) or 'void'}",
        f"torch.distributed: world_size={world} rank={rank} backend=nccl",
        f"Found {len(tl.gpus)} GPU(s) visible to this process",
        "Loading dataset from /data ... 1281167 samples, 1000 classes",
        "Building model resnet50 (25.6M parameters), mixed precision bf16",
    ]
    attempt = tl.env.get("RESTART_ATTEMPT", "0")
    directory = tl.env.get("CHECKPOINT_DIR")
    # What a training script that honours the portal's checkpoint contract prints.
    if directory and tl.resume_step:
        header.append(
            f"Resuming from checkpoint {directory}/step-{tl.resume_step}.pt at step "
            f"{tl.resume_step} (restart attempt {attempt})"
        )
    elif directory and attempt not in ("", "0"):
        header.append(
            f"No checkpoint in {directory} yet: starting from step 0 (restart attempt {attempt})"
        )
    planned = tl.planned or tl.duration
    step_every = step_seconds(planned)
    epochs = max(1, min(10, int(planned // 30) or 1))
    return (
        [(tl.started + i * 0.1, line) for i, line in enumerate(header)],
        total_steps(planned),
        step_every,
        epochs,
    )


# With a checkpoint directory the trainer saves every this many steps and says so the way
# the portal reads it (docs/jobs.md: "GPU_PORTAL_CHECKPOINT step=<n>").
CHECKPOINT_EVERY = 20


# And every this many steps (and at the last) where it stands, the way the portal reads it
# (docs/jobs.md: "GPU_PORTAL_PROGRESS step=<n> total=<m>").
PROGRESS_EVERY = 10


def _training_step(tl: Timeline, k: int, total: int, epochs: int) -> str:
    directory = tl.env.get("CHECKPOINT_DIR")
    if directory and (k + 1) % CHECKPOINT_EVERY == 0:
        return f"GPU_PORTAL_CHECKPOINT step={k + 1} path={directory}/step-{k + 1}.pt"
    if (k + 1) % PROGRESS_EVERY == 0 or k + 1 == total:
        return f"GPU_PORTAL_PROGRESS step={k + 1} total={total}"
    rng = _rng(tl, k)
    progress = (k + 1) / total
    loss = 2.6 * math.exp(-3.2 * progress) + 0.12 + rng.uniform(-0.03, 0.03)
    epoch = min(epochs, int(progress * epochs - 1e-9) + 1)
    per_epoch = max(1, total // epochs)
    throughput = 1450.0 * max(1, len(tl.gpus)) * rng.uniform(0.93, 1.04)
    lr = 3e-4 * (0.5 * (1 + math.cos(math.pi * progress)))
    return (
        f"epoch {epoch}/{epochs} step {(k % per_epoch) + 1}/{per_epoch} loss={loss:.4f} "
        f"lr={lr:.2e} throughput={throughput:.1f} samples/s"
    )


# How a CUDA program's log ends when its GPU fails with an XID (sandbox.faults): the CUDA
# error, never the XID itself (that is in the driver's log and in DCGM, not the program's).
CUDA_ERRORS: dict[int, str] = {
    48: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    74: "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    79: "RuntimeError: CUDA error: unspecified launch failure",
    94: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    95: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
}


def _gpu_failure_footer(tl: Timeline) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 187, in train_step',
        "    loss.backward()",
        CUDA_ERRORS.get(tl.xid or 0, "RuntimeError: CUDA error: unknown error"),
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    ]


def _training_footer(tl: Timeline) -> list[str]:
    if tl.xid is not None:
        return _gpu_failure_footer(tl)
    if tl.exit_code == 0:
        return [
            "Saving checkpoint to /checkpoints/final.pt",
            f"training finished: {tl.duration:.0f}s, final checkpoint /checkpoints/final.pt",
        ]
    if tl.exit_code == 137:
        return ["Killed"]
    return [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 214, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 187, in train_step',
        "    loss.backward()",
        "RuntimeError: CUDA error: an illegal memory access was encountered "
        f"(exit code {tl.exit_code})",
    ]


def _inference_header(tl: Timeline) -> list[str]:
    return [
        f"[sandbox] image={tl.image}",
        f"NVIDIA_VISIBLE_DEVICES={','.join(tl.gpus) or 'void'}",
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        f"Loading model weights onto {max(1, len(tl.gpus))} GPU(s) ...",
        "Model loaded in 11.8s (7.2 GiB), warmup complete",
        "INFO:     Application startup complete.",
        f"INFO:     Uvicorn running on http://0.0.0.0:{tl.port} (Press CTRL+C to quit)",
        f"listening on :{tl.port}",
    ]


def _request_line(tl: Timeline, k: int) -> str:
    rng = _rng(tl, k)
    t = tl.started + 10 + k * REQUEST_SECONDS
    hour = (t % 86400) / 3600
    load = 0.5 + 0.5 * math.sin((hour - 9) / 24 * 2 * math.pi)
    latency = int(40 + 160 * load * rng.uniform(0.6, 1.4))
    status = "200 OK" if rng.random() > 0.01 else "503 Service Unavailable"
    client = f"10.244.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 60000)}"
    return f'INFO:     {client} - "POST /v1/predict HTTP/1.1" {status} latency={latency}ms'


def render(
    tl: Timeline, now: float, tail: int | None = None, since: float | None = None
) -> list[tuple[float, str]]:
    """(timestamp, text) lines up to ``now``; only the last ``tail`` are built when given."""
    end = tl.finished if tl.finished is not None else now
    if end < tl.started:
        return []
    lines: list[tuple[float, str]] = []
    if tl.kind == "training":
        head, total, step_every, epochs = _training_lines(tl, now)
        first_step = min(tl.resume_step, total)
        steps_done = min(total - first_step, int((end - tl.started) // step_every))
        footer = _training_footer(tl) if tl.finished is not None else []
        count = len(head) + steps_done + len(footer)
        first = 0 if tail is None else max(0, count - tail)
        first = max(first, count - MAX_LINES)
        for i in range(first, count):
            if i < len(head):
                lines.append(head[i])
            elif i < len(head) + steps_done:
                k = i - len(head)
                lines.append(
                    (
                        tl.started + (k + 1) * step_every,
                        _training_step(tl, first_step + k, total, epochs),
                    )
                )
            else:
                lines.append((end, footer[i - len(head) - steps_done]))
    else:
        head_text = _inference_header(tl)
        head = [(tl.started + i * 1.2, line) for i, line in enumerate(head_text)]
        requests = (
            max(0, int((end - tl.started - 10) // REQUEST_SECONDS) + 1)
            if end >= tl.started + 10
            else 0
        )
        footer = (
            ["INFO:     Shutting down", "INFO:     Finished server process [1]"]
            if tl.finished is not None and tl.xid is None
            else _gpu_failure_footer(tl)
            if tl.finished is not None
            else []
        )
        count = len(head) + requests + len(footer)
        first = 0 if tail is None else max(0, count - tail)
        first = max(first, count - MAX_LINES)
        for i in range(first, count):
            if i < len(head):
                if head[i][0] <= end:
                    lines.append(head[i])
            elif i < len(head) + requests:
                k = i - len(head)
                lines.append((tl.started + 10 + k * REQUEST_SECONDS, _request_line(tl, k)))
            else:
                lines.append((end, footer[i - len(head) - requests]))
    if since is not None:
        lines = [line for line in lines if line[0] >= since]
    return lines


def format_lines(lines: list[tuple[float, str]], timestamps: bool) -> str:
    if timestamps:
        return "".join(f"{_ts(t)} {text}\n" for t, text in lines)
    return "".join(f"{text}\n" for _, text in lines)


def first_part(full: str, query: dict[str, str]) -> str:
    """What ``tailLines`` and ``limitBytes`` show of a log (a negative or empty
    ``tailLines``: all of it)."""
    text = full
    tail = int(query.get("tailLines") or -1)
    if tail >= 0:
        text = "".join(full.splitlines(keepends=True)[-tail:]) if tail else ""
    if query.get("limitBytes"):
        text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
    return text
