"""losswatch's training-loop client: `Watcher(url, run).log(step, loss=...)`, standard
library only.  The Hugging Face callback is in `losswatch_client.hf`, the Lightning logger
and guard in `losswatch_client.lightning` (imported only by those who use them)."""

from losswatch_client.alerts import DEFAULT_GUARD_ON, AlertChange, GuardDecision, LossAlert
from losswatch_client.watcher import Watcher

__all__ = ["DEFAULT_GUARD_ON", "AlertChange", "GuardDecision", "LossAlert", "Watcher"]
__version__ = "0.1.0"
