"""NaN and Inf: where they start, how many, whether finite values came back, and the NaNs
a trainer hides (the Hugging Face Trainer logs a window average in place of a NaN loss, so
a NaN grad norm beside a finite loss may be the only trace)."""

from __future__ import annotations

import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.roles import Role
from analyzers.series import RunSeries, Series

_TRACE = (
    "Find the first op that overflows: Hugging Face's DebugUnderflowOverflow or "
    "torch.autograd.detect_anomaly() on the steps before it"
)


class NonFiniteDetector:
    """Has nothing to tune: any non-finite value is worth a word."""

    def detect(self, run: RunSeries) -> list[Finding]:
        fp16 = bool(run.with_role(Role.LOSS_SCALE))
        losses = run.with_role(Role.LOSS)
        return [
            self._finding(series, fp16, losses)
            for series in run.series.values()
            if not series.finite.all()
        ]

    def _finding(self, series: Series, fp16: bool, losses: list[Series]) -> Finding:
        bad = ~series.finite
        steps, values = series.step[bad], series.value[bad]
        first = int(steps[0])
        came_back = bool(series.finite[np.flatnonzero(bad)[0] :].any())
        finite_at = np.flatnonzero(series.finite)
        # non-finite to the end: from the step after the last finite point
        stuck_from = None if series.finite[-1] else int(series.step[finite_at[-1] + 1] if len(finite_at) else series.step[0])
        kinds = sorted({"NaN" if np.isnan(x) else ("+Inf" if x > 0 else "-Inf") for x in values})
        hidden = series.role is Role.GRAD_NORM and any(_finite_at(loss, steps) for loss in losses)
        message = f"{series.tag} is {'/'.join(kinds)} at {len(steps)} points from step {first}"
        if stuck_from is None:
            message += ", finite again since"
        elif stuck_from == first:
            message += " and never finite again"
        else:
            message += f"; finite in between, then non-finite from step {stuck_from} to the end"
        if hidden:
            message += "; the loss looks finite at those steps (the trainer may be hiding NaN losses)"
        return Finding(
            kind=Kind.NONFINITE,
            tag=series.tag,
            severity=self._severity(series.role, stuck_from is not None, fp16),
            start_step=first,
            peak_step=stuck_from,
            end_step=int(steps[-1]),
            ongoing=stuck_from is not None,
            message=message,
            remediation=self._remediation(series.role, stuck_from, fp16, first),
            evidence={
                "count": int(len(steps)),
                "values": kinds,
                "came_back": came_back,
                "nonfinite_from": stuck_from,
                "hidden": hidden,
            },
        )

    @staticmethod
    def _severity(role: Role, stuck: bool, fp16: bool) -> Severity:
        if role is Role.GRAD_NORM and not stuck and fp16:
            return Severity.INFO  # the loss scaler skipped overflowing steps, as designed
        if role in (Role.LOSS, Role.EVAL_LOSS, Role.GRAD_NORM) and stuck:
            return Severity.CRITICAL
        return Severity.WARNING

    @staticmethod
    def _remediation(role: Role, stuck_from: int | None, fp16: bool, first: int) -> str:
        if role is Role.GRAD_NORM and stuck_from is None and fp16:
            return "Expected under fp16 dynamic loss scaling (overflowing steps are skipped); act only if it keeps happening."
        onset = first if stuck_from is None else stuck_from
        advice = (
            f"Roll back to a checkpoint from before step {onset} (step {max(0, onset - 100)} or earlier), "
            f"skip the batches around it or lower the learning rate. {_TRACE}."
        )
        if fp16:
            advice += " Under fp16, train in bf16 or keep the overflowing op in fp32."
        return advice


def _finite_at(series: Series, steps: np.ndarray) -> bool:
    at = np.isin(series.step, steps)
    return bool(at.any() and series.finite[at].all())
