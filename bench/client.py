"""What the training-loop client costs the training loop, against the README's old urllib
snippet (one blocking POST per step), on a real `losswatch serve` (SQLite, a subprocess):

* per `log()` call: the median and 99th percentile of one call, timed in blocks of 100
  calls, with the service up and with it down (the watcher spools; the snippet raises, and
  here it is caught so the loop can go on: a real loop would have crashed);
* per training step: a tiny real training loop (a 2-layer MLP, SGD, in torch when it is
  installed, else in numpy) with no logging, with `Watcher.log` and with the snippet, run
  interleaved; and, when transformers is installed, a tiny Hugging Face Trainer with and
  without `LosswatchCallback`.  The overhead is the median step time's excess over no logging.
  The service runs on the same 2 cores with its analysis deferred (`--analysis-interval
  3600`), so its analysis does not take CPU from the loop being measured.

    .venv/bin/python bench/client.py          # markdown on stdout, progress on stderr
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from losswatch_client import Watcher  # noqa: E402

from tests.client_server import Server  # noqa: E402

CALLS = 200_000  # log() calls timed per case
SNIPPET_CALLS = 300  # the snippet's calls are ~1000x slower
STEPS = 2000  # training steps per variant and round
ROUNDS = 5
HF_STEPS = 600  # Trainer steps per variant and round


def progress(message: str) -> None:
    print(f"[client bench] {message}", file=sys.stderr, flush=True)


def snippet(base: str, run: str):
    """The README's urllib snippet before this client, as users copied it."""

    def post_losses(step, **values):
        body = json.dumps([{"step": step, **values}]).encode()
        request = urllib.request.Request(
            f"{base}/v1/runs/{run}/points", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            for change in json.load(response)["alerts"]:
                print("losswatch:", change["change"], change["alert"]["message"])

    def guarded(step, **values):  # the loop goes on when the service is down (the snippet itself raises)
        try:
            post_losses(step, **values)
        except OSError:
            pass

    return guarded


def per_call(log, calls: int, block: int = 100) -> tuple[float, float]:
    """Median and p99 of one call in microseconds, timed over blocks of `block` calls."""
    times = []
    step = 0
    for _ in range(calls // block):
        start = time.perf_counter_ns()
        for _ in range(block):
            log(step, loss=0.5, grad_norm=1.0)
            step += 1
        times.append((time.perf_counter_ns() - start) / block / 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)]


class Loop:
    """A tiny real training loop: a 2-layer MLP on a fixed regression batch, SGD."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:
            torch = None
        self.torch = torch
        rng = np.random.default_rng(0)
        if torch is not None:
            torch.manual_seed(0)
            torch.set_num_threads(1)
            self.model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
            self.x = torch.randn(64, 32)
            self.y = torch.randn(64, 1)
        else:
            self.w1, self.w2 = rng.normal(0, 0.1, (32, 64)), rng.normal(0, 0.1, (64, 1))
            self.x, self.y = rng.normal(size=(64, 32)), rng.normal(size=(64, 1))
        self.name = "torch MLP" if torch is not None else "numpy MLP"

    def step(self) -> float:
        if self.torch is not None:
            self.optimizer.zero_grad()
            loss = self.torch.nn.functional.mse_loss(self.model(self.x), self.y)
            loss.backward()
            self.optimizer.step()
            return loss.item()
        h = np.maximum(self.x @ self.w1, 0)
        err = h @ self.w2 - self.y
        grad_w2 = h.T @ err / len(err)
        grad_h = (err @ self.w2.T) * (h > 0)
        self.w1 -= 1e-3 * self.x.T @ grad_h / len(err)
        self.w2 -= 1e-3 * grad_w2
        return float((err**2).mean())


def step_times(loop: Loop, log, steps: int) -> list[float]:
    times = []
    for step in range(steps):
        start = time.perf_counter_ns()
        loss = loop.step()
        if log is not None:
            log(step, loss=loss)
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


def hf_step_times(with_callback: bool, base: str, spool: str, steps: int) -> list[float] | None:
    try:
        import torch
        from losswatch_client.hf import LosswatchCallback
        from transformers import Trainer, TrainerCallback, TrainingArguments
    except ImportError:
        return None

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.times, self.last = [], None

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter_ns()
            if self.last is not None:
                self.times.append((now - self.last) / 1000)
            self.last = now

    x, y = torch.randn(256, 32), torch.randn(256, 1)
    clock = Clock()
    callbacks = [clock]
    if with_callback:
        callbacks.append(LosswatchCallback(base, f"bench/hf-{time.time_ns()}", spool_dir=spool))
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=16, logging_steps=1, save_strategy="no",
            report_to=[], use_cpu=True, disable_tqdm=True, remove_unused_columns=False,
        )
        trainer = Trainer(model=Model(), args=args, train_dataset=[{"x": a, "labels": b} for a, b in zip(x, y)], callbacks=callbacks)
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints every log line
            trainer.train()
    if with_callback:
        callbacks[-1].watcher.close()
    return clock.times


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spool = os.path.join(tmp, "spool")
        # the service shares this machine's 2 cores with the loop: its analysis is deferred
        # (--analysis-interval) so that what is measured is the client's cost, not the server's
        server = Server(f"sqlite:///{tmp}/store.db", "--analysis-interval", "3600")
        server.start()
        try:
            progress("log() with the service up")
            with Watcher(server.url, "bench/up", spool_dir=spool) as w:
                up = per_call(w.log, CALLS)
            progress("the snippet with the service up")
            snip_up = per_call(snippet(server.url, "bench/snippet"), SNIPPET_CALLS, block=10)
            rows.append(("per log() call, service up", up, snip_up))

            progress("the training loops")
            loop = Loop()
            medians: dict[str, list[float]] = {"none": [], "watcher": [], "snippet": []}
            for r in range(ROUNDS):
                with Watcher(server.url, f"bench/loop{r}", spool_dir=spool) as w:
                    post = snippet(server.url, f"bench/loop-snippet{r}")
                    for name, log, steps in (("none", None, STEPS), ("watcher", w.log, STEPS), ("snippet", post, STEPS // 10)):
                        medians[name].append(statistics.median(step_times(loop, log, steps)))
            hf = {}
            for _ in range(ROUNDS):
                for flag in (False, True):
                    times = hf_step_times(flag, server.url, spool, HF_STEPS)
                    if times is not None:
                        hf.setdefault(flag, []).append(statistics.median(times))
            server.kill()
            progress("log() with the service down")
            with Watcher(server.url, "bench/down", spool_dir=spool, close_timeout=2) as w:
                down = per_call(w.log, CALLS)
            snip_down = per_call(snippet(server.url, "bench/snippet"), SNIPPET_CALLS, block=10)
            rows.append(("per log() call, service down", down, snip_down))
        finally:
            server.stop()

    print("| per call (µs) | losswatch_client `Watcher.log` median | p99 | README urllib snippet median | p99 |")
    print("|---|---|---|---|---|")
    for name, (med, p99), (smed, sp99) in rows:
        print(f"| {name} | {med:.2f} | {p99:.2f} | {smed:.0f} | {sp99:.0f} |")
    none, watcher, snip = (statistics.median(medians[k]) for k in ("none", "watcher", "snippet"))
    print()
    print(f"| per training step ({loop.name}; median step, median of {ROUNDS} interleaved rounds) | µs | overhead |")
    print("|---|---|---|")
    print(f"| no logging | {none:.1f} | |")
    print(f"| `Watcher.log` | {watcher:.1f} | {100 * (watcher - none) / none:+.1f}% |")
    print(f"| README urllib snippet | {snip:.1f} | {100 * (snip - none) / none:+.0f}% |")
    if hf:
        bare, with_cb = statistics.median(hf[False]), statistics.median(hf[True])
        print(f"| HF Trainer, no callback | {bare:.1f} | |")
        print(f"| HF Trainer + `LosswatchCallback` (logging_steps=1) | {with_cb:.1f} | {100 * (with_cb - bare) / bare:+.1f}% |")
    else:
        print("| HF Trainer | skipped: transformers is not installed (`make test-integrations` installs it) | |")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
