"""Binary Arrow arrays over the bytes the strings were read from (:class:`~.spans.Spans`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.common.byte_rows import ranges
from pulsar_spark.common.spans import Spans


def validity_bitmap(valid: npt.NDArray[np.bool_] | None) -> pa.Buffer | None:
    """Arrow's validity bitmap of ``valid`` (None: every row valid)."""
    return None if valid is None else pa.array(valid).buffers()[1]


def binary_array(spans: Spans) -> pa.Array:
    """The strings of ``spans`` as a binary array (null where not valid).

    Spans in order through their buffer (values, keys and properties as decoded) become a
    binary array over the buffer itself whose elements alternate between the bytes in between
    and the strings; taking every second element copies the strings once, in C++. Other spans
    (repeated or reordered rows) are gathered with numpy first."""
    count = len(spans)
    ends = spans.starts + spans.lengths
    validity = validity_bitmap(spans.valid)
    if count and (spans.starts[1:] >= ends[:-1]).all():
        offsets = np.empty(2 * count + 1, dtype=np.int32)
        offsets[0] = 0
        offsets[1::2] = spans.starts
        offsets[2::2] = ends
        both = pa.Array.from_buffers(
            pa.binary(), 2 * count, [None, pa.py_buffer(offsets), pa.py_buffer(spans.buffer)]
        )
        taken = both.take(pa.array(np.arange(1, 2 * count, 2)))
        return pa.Array.from_buffers(pa.binary(), count, [validity, *taken.buffers()[1:]])
    indices, starts = ranges(spans.starts, ends)
    data = np.frombuffer(spans.buffer, dtype=np.uint8)[indices]
    return pa.Array.from_buffers(
        pa.binary(), count, [validity, pa.py_buffer(starts.astype(np.int32)), pa.py_buffer(data)]
    )
