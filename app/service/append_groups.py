"""Group commit for small appends: the posts of points that arrive at a worker while it is
writing others are written together, in one transaction (`write_json_group`).

A training loop posts a few points at a time, and each post alone costs a transaction: its
statements, a commit (a flush to disk) and a hand-off to a thread, several milliseconds of
CPU for a few points.  Here posts wait while a group is being written (never on a timer:
an idle worker writes a post at once), then go as the next group, so under load the fixed
costs are shared by every post of a group and a worker's rate grows with its load.

Each post is still answered only once its points are committed, with the answer it would
have had alone (a post that fails alone fails alone: `write_json_group`); the analyses due
with some posts run after the commit, in a thread of their own, while the next group is
written (`analyse_written`), so they hold up no other post.  One analysis at most is in
flight: of a group's posts due for analysis, the first is analysed (none while another
group's analysis runs: a group is then written as if none were due), and the others are
answered as deferred at once, their runs analysed by their next post's answer or by the
background loop within about two seconds.  Before, each due post waited for every
analysis of its group, one after the other: under load the runs fall due together, and an
answer waited for 16 analyses.

A group holds one post per run; a later post to a run already in a group being written
waits for the next group, so a run's posts are stored in the order they arrived.  Between workers, the runs'
row locks order them (taken in name order, so two groups never deadlock)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from app.service.ingest import IngestResult, PostedPoints, WrittenGroup, analyse_written, write_json_group
from app.service.settings import Settings
from app.store.db import Store

GROUP_POSTS = 64  # posts in one group at most
INLINE_ANALYSES = 1  # of a group's posts due for analysis, those analysed before their answer


class AppendGroups:
    """A worker's queue of small posts and the groups being written (one per app)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store, self._settings = store, settings
        self._waiting: list[tuple[PostedPoints, asyncio.Future[IngestResult]]] = []
        self._writing: set[str] = set()  # runs with a post written or analysed, not yet answered
        self._group_writing = False
        self._analysing = False  # an analysis is in flight (`_write`)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="losswatch-appends")
        self._analyst = ThreadPoolExecutor(1, thread_name_prefix="losswatch-append-analysis")

    async def post(self, posted: PostedPoints) -> IngestResult:
        """The post's answer once its group is committed (or the error it got)."""
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._waiting.append((posted, future))
        self._start()
        return await future

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._analyst.shutdown(wait=True)

    def _start(self) -> None:
        """Start writing the next group of the waiting posts, unless one is being written."""
        if self._group_writing:
            return
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
        self._group_writing = True
        asyncio.get_running_loop().create_task(self._write(group))

    async def _write(self, group: list[tuple[PostedPoints, asyncio.Future[IngestResult]]]) -> None:
        """Write the group (one at a time: the larger the groups, the less each post costs),
        answer its posts, then analyse the runs due (in their own thread, so the next group is
        written meanwhile); a run stays in `_writing` until its post is answered."""
        loop = asyncio.get_running_loop()
        posts = [posted for posted, _ in group]
        written: WrittenGroup | None = None
        try:
            analyse = not self._analysing
            written = await loop.run_in_executor(self._writer, write_json_group, self._store, posts, self._settings, analyse)
            written = written.deferring(INLINE_ANALYSES)
        except Exception as e:  # a defect of the grouping itself: every post says so
            for _, future in group:
                _settle(future, e)
        finally:
            waiting = written.waiting if written is not None else set()
            for i, (posted, future) in enumerate(group):
                if i not in waiting:
                    if written is not None:
                        _settle(future, written.answers[i])
                    self._writing.discard(posted.run)
            self._group_writing = False
            self._start()
        if not waiting:
            return
        self._analysing = True
        try:
            await loop.run_in_executor(self._analyst, analyse_written, self._store, posts, written, self._settings)
        except Exception as e:
            for i in waiting:
                _settle(group[i][1], e)
        finally:
            self._analysing = False
            for i in waiting:
                _settle(group[i][1], written.answers[i])
                self._writing.discard(posts[i].run)
            self._start()


def _settle(future: asyncio.Future[IngestResult], answer: IngestResult | Exception) -> None:
    if future.done():
        return  # answered already, or its request went away
    if isinstance(answer, Exception):
        future.set_exception(answer)
    else:
        future.set_result(answer)
