"""Byte strings kept as (start, length) pairs into the bytes they were read from, so that a
column of them costs no Python object per string until it is laid out once (Arrow does that:
:func:`~pulsar_spark.common.binary_arrays.binary_array`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Spans:
    """Byte strings that are slices of one buffer: string i is
    ``buffer[starts[i] : starts[i] + lengths[i]]``.

    ``valid`` is None when every string is present; a missing one (null) has length 0.
    """

    buffer: bytes
    starts: Int64Array
    lengths: Int64Array
    valid: BoolArray | None = None

    @classmethod
    def of(cls, items: Sequence[bytes | None]) -> Spans:
        """Spans over a new buffer holding ``items`` end to end (None: null)."""
        present = [i for i in items if i is not None]
        lengths = [len(i) if i is not None else 0 for i in items]
        absent = len(present) != len(items)
        return cls(
            buffer=b"".join(present),
            starts=np.array([0, *accumulate(lengths)][:-1], dtype=np.int64),
            lengths=np.array(lengths, dtype=np.int64),
            valid=np.array([i is not None for i in items]) if absent else None,
        )

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> int:
        """The bytes of all strings together."""
        return int(self.lengths.sum())

    def slice(self, start: int, stop: int) -> Spans:
        return Spans(
            self.buffer,
            self.starts[start:stop],
            self.lengths[start:stop],
            None if self.valid is None else self.valid[start:stop],
        )

    def take(self, rows: IndexArray) -> Spans:
        return Spans(
            self.buffer,
            self.starts[rows],
            self.lengths[rows],
            None if self.valid is None else self.valid[rows],
        )
