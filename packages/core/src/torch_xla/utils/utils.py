"""Small helpers PyTorch/XLA programs import from `torch_xla.utils.utils`."""

from __future__ import annotations

from typing import Any


class SampleGenerator:
    """Yields the same `data` `sample_count` times: fake data for `--fake_data` runs.

    Each `iter()` starts a new pass, so it can stand in for a DataLoader over
    several epochs.
    """

    def __init__(self, data: Any, sample_count: int) -> None:
        if sample_count < 0:
            raise ValueError(f"sample_count must be >= 0, got {sample_count}")
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __iter__(self) -> SampleGenerator:
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self) -> int:
        return self._sample_count

    def __next__(self) -> Any:
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data
