"""A thread team: the calling thread plus sleeping worker threads that share the chunks of one job at a time.

Holds `Team` only: how a job's chunks are handed out, and how an error in one of them reaches the
caller.  What the chunks are (a product's columns, the feed-forward's units) is split.py's; how
many threads a product uses is the plan's (plan.py); how many cores there are, machine.py's `cores`.
"""

import queue
import threading
from typing import Callable


class Team:
    """The calling thread plus `workers` sleeping threads that share the chunks of one job at a time."""

    def __init__(self, workers: int):
        self.workers = workers
        self._queues = [queue.SimpleQueue() for _ in range(workers)]
        self._busy = [threading.Lock() for _ in range(workers)]
        self._errors = []
        for i in range(workers):
            threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"specref-team-{i}").start()

    def _loop(self, i: int) -> None:
        while True:
            chunks, task = self._queues[i].get()
            with self._busy[i]:              # held while this worker may take chunks of the job
                try:
                    for k in chunks:         # a shared iterator: each chunk goes to one thread
                        task(k)
                except BaseException as e:   # handed to the caller, which raises it
                    self._errors.append(e)

    def run(self, n_chunks: int, task: Callable[[int], None]) -> None:
        """Call task(k) for k < n_chunks, each once, on this thread and the workers; return when all are done.

        If a chunk raises, the rest of the job is abandoned and the error is raised here, after
        every worker has let go of the job, so no error of this job can surface in a later one.
        """
        chunks = iter(range(n_chunks))       # next() on a range iterator is atomic under the GIL
        for q in self._queues:
            q.put((chunks, task))
        try:
            for k in chunks:
                task(k)
        except BaseException:
            for _ in chunks:                 # leave no chunk for the workers to start
                pass
            raise
        finally:
            for busy in self._busy:          # wait only for chunks a worker has already taken
                busy.acquire()
                busy.release()
            errors, self._errors[:] = list(self._errors), []
        if errors:
            raise errors[0]
