"""NVIDIA's XID error codes in words (a table: the failure check and the health panel)."""

from __future__ import annotations

# NVIDIA's XID codes, in the words of its XID catalogue (the ones that fail a job's GPU).
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to a previous error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}


UNKNOWN = "see NVIDIA's XID catalogue"


def xid_meaning(code: int) -> str:
    return XID_MEANINGS.get(code, UNKNOWN)


def xid_text(code: int) -> str:
    return f"XID {code} ({xid_meaning(code)})"
