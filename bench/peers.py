"""The one-rule spike detectors other tools ship (as domain.md describes them), written
with pandas the way a user would, so the benches can compare against them in the same run."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _onsets(hit: np.ndarray, steps: np.ndarray) -> list[int]:
    """The step where each run of consecutive hits starts."""
    edges = np.diff(np.concatenate(([0], hit.astype(np.int8))))
    return steps[np.flatnonzero(edges == 1)].tolist()


def olmo(steps: np.ndarray, loss: np.ndarray) -> list[int]:
    """OLMo-core: above mean + 6 sigma of the previous 128 values."""
    s = pd.Series(loss)
    prev = s.shift(1).rolling(128, min_periods=16)
    return _onsets((s > prev.mean() + 6 * prev.std()).to_numpy(), steps)


def llm_foundry(steps: np.ndarray, loss: np.ndarray) -> list[int]:
    """llm-foundry KillLossSpike: >= 2x the rolling mean for more than 4 consecutive steps."""
    window = max(100, len(loss) // 20)
    s = pd.Series(loss)
    hit = (s >= 2 * s.shift(1).rolling(window, min_periods=10).mean()).to_numpy()
    streak = pd.Series(hit).groupby((~pd.Series(hit)).cumsum()).cumsum().to_numpy()
    return _onsets(streak > 4, steps)


def lightning(steps: np.ndarray, loss: np.ndarray) -> list[int]:
    """Lightning SpikeDetection: >= 3x the mean of the last 10 values."""
    s = pd.Series(loss)
    return _onsets((s >= 3 * s.shift(1).rolling(10, min_periods=10).mean()).to_numpy(), steps)


def megatron(steps: np.ndarray, loss: np.ndarray) -> list[int]:
    """Megatron-LM: >= 10x the max of the first 100 values."""
    first = np.nanmax(loss[:100]) if len(loss) else np.nan
    return _onsets(loss >= 10 * first, steps)


PEERS = {"OLMo-core 6 sigma/128": olmo, "llm-foundry 2x mean, 5 steps": llm_foundry,
         "Lightning 3x mean/10": lightning, "Megatron 10x first-100 max": megatron}
