"""A scan shared among processes (`losswatch scan --jobs N`): the first share is scanned in
this process, each other one in a child process of its own, started fresh ("spawn": no
connection or thread of this process is inherited) with its own connection to the store.
Analysis is CPU work in Python: on N cores, N processes analyse N runs at once, where
threads would take turns on one interpreter lock.  A child imports the main module of the
program again, so a script calling `scan(jobs=...)` does so under `if __name__ ==
"__main__":` (the `losswatch` command does).

A child that dies (killed, out of memory) costs only the runs of its share it had not
committed: the scan says so, and the next scan reads them from their stored offsets.  An
error a child raises (the store gone) is raised here, as the one-process scan would.  On
Linux a child is killed with this process (`kill -9` of a cron scan leaves no scan of half
its runs going on behind the next one)."""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from app.store.db import Store, Timeouts, open_store

# (store, share, options, progress: told of runs done) -> the share's outcome
Work = Callable[[Store, Any, Any, Callable[[int], None]], Any]

PROGRESS_EVERY = 0.25  # seconds between progress reports while children work

_child_store: Store | None = None
_child_done: Any = None  # a shared counter of the runs children have looked at


def scan_shares(store: Store, work: Work, shares: Sequence[Any], options: Any, progress: Callable[[int], None],
                stopped: Callable[[int, BaseException], Any]) -> list[Any]:
    """`work` on each share, the first here and the others in child processes; each
    outcome in share order.  `progress(runs)` is told of runs done, children's included.
    A child that died gives `stopped(share index, error)` in place of its outcome."""
    context = multiprocessing.get_context("spawn")
    done = context.Value("q", 0)
    told = 0

    def tell_children() -> None:
        nonlocal told
        now = done.value
        if now > told:
            progress(now - told)
            told = now

    url = store.engine.url.render_as_string(hide_password=False)
    with ProcessPoolExecutor(len(shares) - 1, mp_context=context, initializer=_start_child,
                             initargs=(url, store.timeouts, done)) as pool:
        futures = [pool.submit(_run_share, work, share, options) for share in shares[1:]]
        own = work(store, shares[0], options, lambda runs: (progress(runs), tell_children()))
        pending: set[Future] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=PROGRESS_EVERY, return_when=FIRST_COMPLETED)
            tell_children()
        outcomes = [own]
        for index, future in enumerate(futures, start=1):
            try:
                outcomes.append(future.result())
            except BrokenProcessPool as e:
                outcomes.append(stopped(index, e))
    return outcomes


def _start_child(url: str, timeouts: Timeouts, done: Any) -> None:
    global _child_store, _child_done
    _die_with_parent()
    _child_store, _child_done = open_store(url, timeouts), done


def _die_with_parent() -> None:
    """SIGKILL when the process that started this one ends (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def _run_share(work: Work, share: Any, options: Any) -> Any:
    assert _child_store is not None
    return work(_child_store, share, options, _count)


def _count(runs: int) -> None:
    with _child_done.get_lock():
        _child_done.value += runs
