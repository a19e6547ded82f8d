"""Which job holds which GPU, as the cluster backend reports it on the jobs topic."""

from __future__ import annotations

from gpusched.contracts import JobEvent

__all__ = ["Occupancy"]


class Occupancy:
    """(node id, GPU index) → (job id, share of the GPU), folded from lifecycle events."""

    def __init__(self) -> None:
        self._gpus: dict[tuple[str, int], tuple[str, float]] = {}
        self._held: dict[str, list[tuple[str, int]]] = {}
        self._share: dict[str, float] = {}

    def apply(self, event: JobEvent) -> None:
        """Fold one lifecycle event in (events of other types are ignored)."""
        if event.request is not None:
            self._share[event.job_id] = min(event.request.num_gpu, 1.0)
        if event.type.holds_gpus and event.node_ids:
            self._release(event.job_id)
            share = self._share.get(event.job_id, 1.0)
            held = [
                (node, index)
                for node, indices in zip(event.node_ids, event.gpu_indices, strict=False)
                for index in indices
            ]
            for gpu in held:
                self._gpus[gpu] = (event.job_id, share)
            self._held[event.job_id] = held
        elif event.type.requeues or event.type.ends:
            self._release(event.job_id)
            if event.type.ends:
                self._share.pop(event.job_id, None)

    def holder(self, node_id: str, gpu_index: int) -> tuple[str, float] | None:
        """The job on that GPU and its share, or None when idle."""
        return self._gpus.get((node_id, gpu_index))

    def _release(self, job_id: str) -> None:
        for gpu in self._held.pop(job_id, ()):
            if self._gpus.get(gpu, ("",))[0] == job_id:
                del self._gpus[gpu]
