"""Where the watcher's settings come from when the code does not give them: the environment,
so a job script (SLURM, Kubernetes) can point an unchanged training script at a service."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Mapping, Optional

URL_VAR, TOKEN_VAR, RUN_VAR, SPOOL_VAR = "LOSSWATCH_URL", "LOSSWATCH_TOKEN", "LOSSWATCH_RUN", "LOSSWATCH_SPOOL_DIR"
RANK_VARS = ("RANK", "LOCAL_RANK")  # set by torchrun, torch.distributed launchers and accelerate


def from_env(given: Optional[str], var: str, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The value given in code, else the environment's (empty counts as unset)."""
    if given:
        return given
    return (env if env is not None else os.environ).get(var) or None


def is_main_process(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process is rank 0: under torch.distributed or accelerate every rank runs
    the same script, and only one of them should post (the others' losses are the same run's)."""
    env = env if env is not None else os.environ
    return all(env.get(var, "0").strip() in ("", "0") for var in RANK_VARS)


def spool_path(url: str, run: str, directory: Optional[str] = None) -> Path:
    """The run's spool file: readable name, plus a hash of service and run so two runs (or
    one run on two services) never share a file."""
    base = Path(directory or from_env(None, SPOOL_VAR) or _cache_dir() / "losswatch" / "spool")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run)[:80]
    digest = hashlib.sha1(f"{url}\0{run}".encode()).hexdigest()[:10]
    return base / f"{readable}-{digest}.ndjson"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
