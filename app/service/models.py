"""What the API returns (and the few bodies it takes), with examples for the OpenAPI."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_ALERT_EXAMPLE = {
    "id": "4be1c0f5b3a9d2e1", "source": "http", "run": "gpt-small", "tag": "train/loss", "kind": "loss_spike",
    "classification": "fast_recovering", "severity": "info", "start_step": 1500, "peak_step": 1500,
    "end_step": 1513, "recovery_steps": 13, "peak_value": 38.49, "baseline": 0.85, "ratio": 45.3,
    "message": "train/loss spiked at step 1500: 0.8505 -> 38.49 (45x baseline), back in 13 steps (fast-recovering)",
    "remediation": "No action needed: training recovered. Note step 1500 ...", "evidence": {"rise": "instant"},
}


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class Error(BaseModel):
    error: ErrorBody
    model_config = ConfigDict(json_schema_extra={"example": {"error": {"code": "not_found", "message": "no run 'x'"}}})


class AlertChange(BaseModel):
    change: str = Field(description="firing, updated or resolved")
    state: str
    step: int | None
    reason: str | None = None
    alert: dict[str, Any]
    model_config = ConfigDict(json_schema_extra={"example": {"change": "firing", "state": "resolved", "step": 1513, "alert": _ALERT_EXAMPLE}})


class Rejected(BaseModel):
    reason: str
    line: int | None = None
    json_path: str | None = None
    offset: int | None = None
    points: int | None = None


class RollbackDone(BaseModel):
    tags: list[str] = Field(description="the tags rolled back; empty: every tag")
    from_step: int = Field(description="the highest step they had reached")
    to_step: int = Field(description="their writes from this step on, before this request, are hidden")


class RollbackBody(BaseModel):
    to_step: int = Field(ge=0, le=2**53 - 1, description="hide every tag's writes from this step on (the checkpoint resumed from)")


class IngestResponse(BaseModel):
    run: str
    accepted: int = Field(description="points stored")
    duplicates: int = Field(0, description="points already stored with the same value, dropped")
    replaced: int = Field(0, description="of the accepted: new values for a tag's last stored step (the later write wins)")
    rejected: list[Rejected] = Field(description="bad records, each with where and why")
    rollbacks: list[RollbackDone] = Field(default_factory=list, description="rewrites below a tag's last step, treated as a resume")
    analysis: str = Field(description="done: analysed in this request; deferred: the run is busy, analysed in the background; "
                                      "failed: the analysis raised (the points are stored; see analysis_error); none: nothing new")
    analysis_error: str | None = Field(None, description="why the analysis failed")
    alerts: list[AlertChange] = Field(description="alerts that fired, changed or resolved with this request")
    next_offset: int | None = Field(None, description="event chunks: the byte offset the next chunk of this file starts at")
    end: str | None = Field(None, description="event chunks: complete, truncated (a partial last record: resend from next_offset) or corrupt")
    model_config = ConfigDict(json_schema_extra={"example": {
        "run": "gpt-small", "accepted": 10, "duplicates": 0,
        "rejected": [{"reason": "value must be a number, got true", "line": 3, "json_path": "$.loss"}],
        "analysis": "done", "alerts": [],
    }})


class TagInfo(BaseModel):
    tag: str
    role: str
    points: int
    first_step: int
    last_step: int


class RunHealth(BaseModel):
    status: str = Field(description="healthy, unstable, diverged, stalled, overfitting or converged")
    reason: str
    spikes: int = Field(description="loss spikes found")
    spikes_per_1k_steps: float | None
    largest_spike: dict[str, Any] | None = Field(description="tag, step, ratio, peak_value, baseline")
    steps_above_band: int = Field(description="steps the losses spent above their noise band in spikes")
    best_eval: dict[str, Any] | None = Field(description="tag, step, value of the lowest eval loss")
    last_step: int | None


class RunSummary(BaseModel):
    source: str = Field(description="'http' for posted runs, else the logdir it was found in")
    name: str
    points: int
    last_step: int | None
    updated_at: float
    open_alerts: dict[str, int] = Field(description="pending and firing alerts by severity")
    analysis_error: str | None = Field(None, description="why the last analysis of the run failed; null once one succeeds")
    health: RunHealth | None = Field(None, description="as of the run's last successful analysis; null before it")
    last_seen: float | None = Field(None, description="Unix wall time of the run's newest point (or of when it was first seen)")
    status: str = Field("running", description="running, finished (POST /v1/runs/{run}/finish) or stale (not advancing)")
    model_config = ConfigDict(json_schema_extra={"example": {
        "source": "http", "name": "gpt-small", "points": 60424, "last_step": 2999, "updated_at": 1764518400.0,
        "last_seen": 1764518390.5, "status": "running",
        "open_alerts": {"critical": 1, "warning": 0, "info": 2},
        "health": {"status": "unstable", "reason": "loss_spike (slow_recovering) on train/loss at step 1202",
                   "spikes": 1, "spikes_per_1k_steps": 0.333, "steps_above_band": 105, "best_eval": None,
                   "largest_spike": {"tag": "train/loss", "step": 1202, "ratio": 1.94, "peak_value": 1.671, "baseline": 0.8631},
                   "last_step": 2999},
    }})


class RunDetail(RunSummary):
    tags: list[TagInfo]
    rollbacks: list[dict[str, Any]]
    overrides: list[str] = Field(default_factory=list, description="the settings file's [[override]] tables that apply "
                                                                   "to this run, in the order they apply (later wins)")


class BaselineResponse(BaseModel):
    run: str
    tag: str
    sigmas: float = Field(description="the noise band is baseline +/- this many sigmas")
    points: list[tuple[int, float | None, float | None]] = Field(
        description="[step, baseline, sigma] at an even stride of the finite points; both null until enough earlier points give a sigma")
    averaged: int = Field(0, description=(
        "a train loss logged as its epoch's running mean: the epoch in steps; the band is then that of each "
        "batch's loss, worked back, as the detectors see it (0: the tag as logged)"))
    losses: list[tuple[int, float]] = Field(default_factory=list, description=(
        "when `averaged`, [step, value] of each batch's loss worked back, downsampled as a series is; else empty"))
    model_config = ConfigDict(json_schema_extra={"example": {
        "run": "gpt-small", "tag": "train/loss", "sigmas": 3.0, "points": [[0, None, None], [1500, 0.91, 0.06]],
        "averaged": 0, "losses": [],
    }})


class SeriesResponse(BaseModel):
    run: str
    tag: str
    total: int = Field(description="points in the current view between start and end")
    points: list[tuple[int, float | str]] = Field(description='[step, value]; non-finite values as "NaN", "Infinity", "-Infinity"')
    wall_times: list[float | None] = Field(default_factory=list, description="the Unix wall time of each point, in the "
                                                                             "order of points (null where none was recorded)")
    downsampled: bool
    log_axis: bool = Field(False, description="whether these points want a log y-axis (`app.axis.wants_log`, the rule `losswatch plot` uses)")
    model_config = ConfigDict(json_schema_extra={"example": {
        "run": "gpt-small", "tag": "train/loss", "total": 3000, "points": [[0, 2.29], [1500, 38.49], [2999, "NaN"]],
        "downsampled": True, "log_axis": True,
    }})


class AlertView(BaseModel):
    id: str
    source: str
    run: str
    state: str
    severity: str
    kind: str
    tag: str
    classification: str | None
    start_step: int
    since_step: int | None
    since_time: float
    acknowledged: bool
    silenced: bool
    inhibited_by: str | None
    finding: dict[str, Any]
    model_config = ConfigDict(json_schema_extra={"example": {
        "id": "4be1c0f5b3a9d2e1", "source": "http", "run": "gpt-small", "state": "firing", "severity": "critical",
        "kind": "nonfinite", "tag": "train/loss", "classification": None, "start_step": 1921, "since_step": 1921,
        "since_time": 1764518400.0, "acknowledged": False, "silenced": False, "inhibited_by": None,
        "finding": _ALERT_EXAMPLE,
    }})


class SilenceBody(BaseModel):
    silenced: bool = True


class LogdirBody(BaseModel):
    path: str = Field(description="a directory or URL prefix under one of the service's allowed roots", examples=["/data/tb-logs/exp1"])


class Logdir(BaseModel):
    id: int
    path: str
    created_at: float
    next_poll_at: float
    last_scan_at: float | None
    last_error: str | None


class Health(BaseModel):
    status: str
    database: str
