"""The pending queue: jobs kept sorted by a policy's key, re-keyed on refresh."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import Any

from gpusched.core.model import Job

__all__ = ["PendingQueue"]

Key = tuple[Any, ...]


class PendingQueue:
    """Sorted pending jobs. Ties keep arrival order (a sequence number breaks them)."""

    def __init__(self) -> None:
        self._entries: list[tuple[Key, int, str]] = []
        self._entry: dict[str, tuple[Key, int, str]] = {}
        self._demand: dict[str, float] = {}
        self._seq = 0
        self.gpu_demand = 0.0  # GPUs the pending jobs ask for, in all

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._entry

    def push(self, job: Job, key: Key) -> None:
        self._seq += 1
        entry = (key, self._seq, job.job_id)
        bisect.insort(self._entries, entry)
        self._entry[job.job_id] = entry
        self.gpu_demand += job.request.num_gpu
        self._demand[job.job_id] = job.request.num_gpu

    def remove(self, job_id: str) -> None:
        entry = self._entry.pop(job_id)
        self.gpu_demand -= self._demand.pop(job_id)
        i = bisect.bisect_left(self._entries, entry)
        del self._entries[i]

    def ids(self) -> Iterator[str]:
        """Job ids in order (a snapshot: safe to change the queue while iterating)."""
        return iter([e[2] for e in self._entries])

    def walk(self) -> Iterator[str]:
        """Job ids in order, lazily; the caller may remove the job it was just given.

        No copy is made (the queue may hold tens of thousands of jobs and a cycle usually
        looks at a few). A job inserted ahead of the walk is visited next.
        """
        i = 0
        while i < len(self._entries):
            entry = self._entries[i]
            yield entry[2]
            if i < len(self._entries) and self._entries[i] is entry:
                i += 1

    def key_of(self, job_id: str) -> Key:
        return self._entry[job_id][0]

    def rekey(self, keys: Callable[[list[str]], list[Key]]) -> None:
        """Recompute every key: ``keys`` answers for the job ids in queue order (arrival
        order still breaks ties)."""
        ids = [e[2] for e in self._entries]
        seqs = [e[1] for e in self._entries]
        self._entries = sorted(zip(keys(ids), seqs, ids, strict=True))
        self._entry = {e[2]: e for e in self._entries}
