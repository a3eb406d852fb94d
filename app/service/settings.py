"""Everything the service is configured with, passed to `create_app`; nothing is read from
the environment or built at import."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from analyzers.config import AnalysisConfig
from app.alerts import receivers
from app.alerts.webhooks import longest_send

HTTP_SOURCE = "http"  # the source of runs posted to the service, beside logdir paths

# How the service authenticates, decided once when it starts (see app/service/auth.py):
#   required           a token on every request but the public routes, for the process's life;
#   until_first_token  open until the store holds a token, then required for good (loopback only);
#   open               no token is ever checked (`serve --insecure`).
AuthMode = Literal["required", "until_first_token", "open"]


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    db_url: str | None = Field(None, description="Store URL; default: the SQLite file in the user state directory.")
    allowed_roots: tuple[str, ...] = Field((), description="Directories and URL prefixes under which logdirs may be registered.")
    max_body_bytes: int = Field(64 << 20, description="Larger request bodies get 413.")
    max_points_per_request: int = Field(1_000_000, description="More points in one request get 413.")
    max_heavy_requests: int = Field(2, ge=1, description="Large posts and series reads served at once; more get 503.")
    poll_interval: float = Field(30.0, description="Seconds between scans of each watched logdir.")
    analysis_interval: float = Field(1.0, description="A run is analysed at most this often; busier runs are analysed in the background.")
    webhooks: tuple[str, ...] = Field(
        (), description="Where alert changes go: receiver specs (app.alerts.receivers), Alertmanager's included.")
    alertmanager_resend: float = Field(60.0, gt=0, description="Seconds between re-sending firing alerts to Alertmanager.")
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    auth: AuthMode = Field("required", description="required, until_first_token or open: fixed for the process's life.")
    external_url: str | None = Field(
        None, description="The URL browsers reach the service at (scheme://host[:port]): the Origin writes must come "
                          "from, and https makes the sign-in cookie Secure.")
    background: bool = Field(True, description="Run the logdir poller, deferred analysis and deliveries.")
    db_connect_timeout: float = Field(5.0, gt=0, description="Seconds to wait for a database connection.")
    db_statement_timeout: float = Field(
        30.0, gt=0, description="Seconds one database statement (lock waits included) may take; past it the request gets 503."
    )
    webhook_timeout: float = Field(5.0, gt=0, description="Seconds for each step of a webhook request (connect, send, answer).")
    metrics_max_runs: int = Field(
        1000, ge=0, description="/metrics has per-run series for this many runs, those that advanced most recently."
    )
    delivery_lease: float = Field(
        120.0, gt=0, description="Seconds a claimed delivery is held; one its process never finished is sent again after it."
    )

    @model_validator(mode="after")
    def _receivers_parse(self) -> Settings:
        receivers.parse_all(self.webhooks)  # a ReceiverError (a ValueError) names the bad one
        return self

    @model_validator(mode="after")
    def _lease_outlasts_a_send(self) -> Settings:
        longest = longest_send(self.webhook_timeout)
        if self.delivery_lease <= longest:
            raise ValueError(
                f"the delivery lease ({self.delivery_lease:g} s) must be longer than sending one delivery may take "
                f"with a {self.webhook_timeout:g} s webhook timeout ({longest:g} s)"
            )
        return self
