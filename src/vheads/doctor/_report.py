"""What the doctor found: one :class:`Check` per line, and the whole :class:`DoctorReport`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Check:
    """One check: ``ok`` True (✓), False (✗) or None (skipped, with a note).

    ``invariant``: a failure means vheads' numbers on this model cannot be trusted (a
    prompt the model was never given, tokens that are not the region, an engine that is
    not the model): the doctor exits 1 and ``vheads study`` refuses to start. Other checks
    (bf16 drift, the model's own baseline, speed) describe the model and never fail a run.
    """

    name: str
    ok: bool | None
    summary: str
    invariant: bool = True
    numbers: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    @property
    def mark(self) -> str:
        """✓ holds, ✗ an invariant failed, ⚠ a descriptive check found something, – skipped."""
        if self.ok is False and not self.invariant:
            return "⚠"
        return {True: "✓", False: "✗", None: "–"}[self.ok]


@dataclass
class DoctorReport:
    model: str
    device: str
    dtype: str
    checks: list[Check]

    @property
    def failed(self) -> list[str]:
        """The invariants that failed, by name."""
        return [c.name for c in self.checks if c.invariant and c.ok is False]

    @property
    def warnings(self) -> list[str]:
        """The descriptive checks (not invariants) marked ⚠, by name."""
        return [c.name for c in self.checks if not c.invariant and c.ok is False]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "dtype": self.dtype, "ok": self.ok, "failed": self.failed,
                "warnings": self.warnings, "checks": [{**asdict(c), "mark": c.mark} for c in self.checks]}

    def text(self) -> str:
        """One screen: a line per check (mark, name, numbers), its details indented below."""
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [f"vheads doctor: {self.model} on {self.device} ({self.dtype})"]
        for c in self.checks:
            tag = "" if c.invariant or c.ok is not False else "  (not an invariant)"
            lines.append(f"{c.mark} {c.name:<{width}}  {c.summary}{tag}")
            lines += [f"    {d}" for d in c.details]
        last = "all invariants hold" if self.ok else f"FAILED: {', '.join(self.failed)}"
        if self.warnings:
            last += f"; ⚠ {len(self.warnings)} to read (not invariants): {', '.join(self.warnings)}"
        lines.append(last)
        return "\n".join(lines)
