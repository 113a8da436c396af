"""``%teardown``: the teardown gate as a widget (checklist, what the verb destroys, approval).

The Approve button is enabled only when the gate passes; overriding a failing gate needs the
instance id typed. Files the gate passes verified by sha256 only (pickled, not loaded) are shown
under their check as ``disclosed:`` lines, and recorded with the decision. Buttons call :mod:`.teardown` and nothing else; without a widget frontend
the same gate shows as text with the ``rgt down`` command to use.
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import RgtError
from ..machines.profiles import Profile
from ..run.teardown import (
    GATE_MAX_AGE_S,
    Gate,
    compute_gate,
    confirm_guided,
    decide,
    settle_orphan,
    stop_meter,
)


def gate_html(gate: Gate) -> str:
    """The checklist as HTML."""
    ms = gate.machine.profile.meter_stop
    color = (
        "var(--jp-success-color1, #1a7f37)" if gate.passed else "var(--jp-error-color1, #cf222e)"
    )
    rows = "".join(
        f"<li>{'&#9745;' if c.ok else '&#9744;'} <b>{html.escape(c.name)}</b>: "
        f"{html.escape(c.detail)}"
        + "".join(
            f"<div class='rgt-disclosed'>disclosed: {html.escape(d)}</div>" for d in c.disclosed
        )
        + "</li>"
        for c in gate.checks
    )
    parts = [
        f"<div class='rgt-gate'><b>Teardown of {html.escape(gate.machine.label())}</b>: "
        f"<span style='color:{color}'>{'passes' if gate.passed else 'refused'}</span>",
        f"<ul style='list-style:none;padding-left:0'>{rows}</ul>",
        f"<div>Meter-stop verb: <b>{html.escape(ms.verb)}</b>"
        + (" (irreversible)" if ms.irreversible else "")
        + "</div>",
    ]
    if gate.destroys:
        parts.append("<div>Destroys: " + html.escape("; ".join(gate.destroys)) + "</div>")
    if gate.survives:
        parts.append("<div>Keeps: " + html.escape("; ".join(gate.survives)) + "</div>")
    for item in gate.keeps_billing:
        parts.append(f"<div>Still bills: {html.escape(item)}</div>")
    return "".join(parts) + "</div>"


def approve_button(profile: Profile) -> tuple[str, str]:
    """The Approve button's label and style: red only for a verb that cannot be undone, a
    warning for a reversible stop, plain where there is no meter (nothing is stopped)."""
    if not profile.metered:
        return "Record approval", ""
    return "Approve", "danger" if profile.meter_stop.irreversible else "warning"


class TeardownView:
    """The approval widget for the machine a job ran on."""

    def __init__(self, row: dict[str, Any], project: Path, background: bool = True) -> None:
        import ipywidgets as w  # deferred: ipywidgets, only where a widget renders

        self.row = row
        self.project = project
        self.background = background
        self.gate = compute_gate(row, project)
        self.decision: dict[str, Any] | None = None
        self.outcome: Any = None
        self.checklist = w.HTML(gate_html(self.gate))
        ms = self.gate.machine.profile.meter_stop
        # Red only for what cannot be undone; a reversible stop warns; no meter: nothing stops.
        style = (
            "danger" if ms.irreversible else "warning" if self.gate.machine.profile.metered else ""
        )
        self.approve = w.Button(
            description="Approve" if self.gate.machine.profile.metered else "Record approval",
            button_style=style,
            tooltip=f"{ms.verb}" + (" (irreversible)" if ms.irreversible else ""),
        )
        self.approve.add_class("rgt-approve")
        self.typed = w.Text(placeholder=f"type {self.gate.machine.platform_id} to override")
        self.override = w.Button(description="Override")
        self.refuse = w.Button(description="Keep running")
        self.log = w.HTML("")
        self.extra = w.VBox([])
        self.approve.on_click(lambda _b: self._decide("approve"))
        self.override.on_click(lambda _b: self._decide("override"))
        self.refuse.on_click(lambda _b: self._decide("refuse"))
        self._sync()
        self.widget = w.VBox(
            [
                self.checklist,
                w.HBox([self.approve, self.refuse]),
                w.HBox([self.typed, self.override]),
                self.log,
                self.extra,
            ]
        )
        self.widget.add_class("rgt-teardown-panel")

    def _sync(self) -> None:
        self.approve.disabled = not self.gate.passed or self.decision is not None
        self.override.disabled = self.gate.passed or self.decision is not None
        self.refuse.disabled = self.decision is not None

    def _say(self, text: str) -> None:
        self.log.value += f"<div>{html.escape(text)}</div>"

    def _decide(self, decision: str) -> None:
        try:
            if time.time() - self.gate.computed_at > GATE_MAX_AGE_S:
                self.gate = compute_gate(self.row, self.project)
                self.checklist.value = gate_html(self.gate)
            self.decision = decide(
                self.gate, decision, self.project, typed=self.typed.value, by="widget"
            )
        except RgtError as exc:
            self._say(str(exc))
            if decision == "approve" and self.gate.passed:
                # Refused although the gate shown passed: the machine changed since. Show the
                # gate as it is now, so that Approve stays disabled until a new pull covers it.
                try:
                    self.gate = compute_gate(self.row, self.project)
                    self.checklist.value = gate_html(self.gate)
                except RgtError as again:
                    self._say(f"the gate could not be computed again: {again}")
            self._sync()
            return
        self._sync()
        self._say(f"recorded: {decision}")
        if decision == "refuse":
            return
        if self.background:
            threading.Thread(target=self._stop, daemon=True).start()
        else:
            self._stop()

    def _stop(self) -> None:
        import ipywidgets as w  # deferred: ipywidgets, only where a widget renders

        assert self.decision is not None
        try:
            self.outcome = stop_meter(self.gate, self.decision, self.project, on_poll=self._say)
        except RgtError as exc:
            self._say(f"stopping the meter failed: {exc}")
            return
        self._say(self.outcome.message)
        if self.outcome.guided:
            done = w.Button(description="I did it")

            def confirmed(_b: Any) -> None:
                typed = (self.decision or {}).get("typed")
                confirm_guided(self.gate, self.project, by="widget", typed=typed)
                done.disabled = True
                self._say("recorded: you confirmed the meter is stopped (rgt did not observe it)")

            done.on_click(confirmed)
            self.extra.children = [done]
            return
        rows = []
        for orphan in self.outcome.orphans:
            delete, keep = w.Button(description="Delete"), w.Button(description="Keep")

            def settle(_b: Any, o: Any = orphan, d: Any = delete, k: Any = keep) -> None:
                want = _b is d
                settle_orphan(self.gate, o, want, self.project, by="widget")
                d.disabled = k.disabled = True
                self._say(f"{'deleted' if want else 'kept'}: {o.bills}")

            delete.on_click(settle)
            keep.on_click(settle)
            rows.append(
                w.HBox([w.HTML(html.escape(f"Still billing: {orphan.bills}")), delete, keep])
            )
        self.extra.children = rows

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/plain": self.gate.text(),
            "text/html": gate_html(self.gate),
            "application/vnd.jupyter.widget-view+json": {
                "model_id": self.widget.model_id,
                "version_major": 2,
                "version_minor": 0,
            },
        }


class TeardownText:
    """The gate where no widget can render: the checklist and the command that acts on it."""

    def __init__(self, gate: Gate, name: str) -> None:
        self.gate = gate
        self.name = name

    def text(self) -> str:
        """The checklist and the next command."""
        accepts = " (approving accepts the disclosed files as verified by sha256 only)"
        hint = (
            f"Approve with: rgt down {self.name} --yes" + (accepts if self.gate.disclosed else "")
            if self.gate.passed
            else f"Override with: rgt down {self.name} --override {self.gate.machine.platform_id}"
        )
        return self.gate.text() + "\n" + hint

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": f"<pre>{html.escape(self.text())}</pre>"}
