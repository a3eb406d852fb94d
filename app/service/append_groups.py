"""Group commit for small appends: the posts of points that arrive at a worker while it is
writing others are written together, in one transaction (`ingest_json_group`).

A training loop posts a few points at a time, and each post alone costs a transaction: its
statements, a commit (a flush to disk) and a hand-off to a thread, several milliseconds of
CPU for a few points.  Here posts wait while a group is being written (never on a timer:
an idle worker writes a post at once), then go as the next group, so under load the fixed
costs are shared by every post of a group and a worker's rate grows with its load.

Each post is still answered only once its points are committed, with the answer it would
have had alone (a post that fails alone fails alone: `ingest_json_group`).  A group holds one
post per run; a later post to a run already in a group being written waits for the next
group, so a run's posts are stored in the order they arrived.  Between workers, the runs'
row locks order them (taken in name order, so two groups never deadlock)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from app.service.ingest import IngestResult, PostedPoints, ingest_json_group
from app.service.settings import Settings
from app.store.db import Store

GROUPS_AT_ONCE = 2  # groups being written at a time: one prepares while the other waits on its commit
GROUP_POSTS = 64  # posts in one group at most


class AppendGroups:
    """A worker's queue of small posts and the groups being written (one per app)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store, self._settings = store, settings
        self._waiting: list[tuple[PostedPoints, asyncio.Future[IngestResult]]] = []
        self._writing: set[str] = set()  # runs with a post in a group being written
        self._groups = 0
        self._threads = ThreadPoolExecutor(GROUPS_AT_ONCE, thread_name_prefix="losswatch-appends")

    async def post(self, posted: PostedPoints) -> IngestResult:
        """The post's answer once its group is committed (or the error it got)."""
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._waiting.append((posted, future))
        self._start()
        return await future

    def close(self) -> None:
        self._threads.shutdown(wait=True)

    def _start(self) -> None:
        """Start writing groups of the waiting posts, as many as may be written at once."""
        while self._groups < GROUPS_AT_ONCE:
            group, runs, waiting = [], set(), []
            for posted, future in self._waiting:
                if future.done():
                    continue  # its request went away before it was written
                if len(group) < GROUP_POSTS and posted.run not in self._writing and posted.run not in runs:
                    group.append((posted, future))
                    runs.add(posted.run)
                else:
                    waiting.append((posted, future))
            if not group:
                return
            self._waiting = waiting
            self._writing |= runs
            self._groups += 1
            asyncio.get_running_loop().create_task(self._write(group, runs))

    async def _write(self, group: list[tuple[PostedPoints, asyncio.Future[IngestResult]]], runs: set[str]) -> None:
        loop = asyncio.get_running_loop()

        def answered(i: int, answer: IngestResult | Exception) -> None:  # in the group's thread
            loop.call_soon_threadsafe(_settle, group[i][1], answer)

        try:
            posts = [posted for posted, _ in group]
            try:
                await loop.run_in_executor(self._threads, ingest_json_group, self._store, posts, self._settings, answered)
            except Exception as e:  # a defect of the grouping itself: every post not yet answered says so
                for _, future in group:
                    _settle(future, e)
        finally:
            self._writing -= runs
            self._groups -= 1
            self._start()


def _settle(future: asyncio.Future[IngestResult], answer: IngestResult | Exception) -> None:
    if future.done():
        return  # answered already, or its request went away
    if isinstance(answer, Exception):
        future.set_exception(answer)
    else:
        future.set_result(answer)
