"""The optional C accelerator, :mod:`pymq._speedups`: loading it, checking its build, the fallback.

pymq._speedups (C sources in pymq/_speedups_src/) runs the per-record loops of the record module
(record.py, record_batch.py and their users) in C when it was built at install; PYMQ_NO_SPEEDUPS=1
forces the pure-Python bodies, which stay the reference: the C functions give byte-identical results
and errors (tests run both) and answer NotImplemented for arguments outside what they handle, and the
Python body runs then.

This is the only module that imports the extension. :mod:`pymq.protocol.record` loads it through
:func:`load_speedups` with the layout it must have been built for (``record.speedups_layout()``);
``record.speedups`` is the accelerator in use, or None, and what everybody else calls (tests swap
it out to run the pure-Python bodies).
"""

from __future__ import annotations

import os
from types import ModuleType

from pymq.errors import MessageDecodeError

# The extension as imported, None where it was not built, whatever PYMQ_NO_SPEEDUPS says (the tests of the
# accelerator and the fuzz targets compare it with the Python bodies).
try:
    from pymq import _speedups as _speedups
except ImportError:  # built without a compiler: pure Python
    _speedups = None  # type: ignore[assignment]

#: bumped with ABI_VERSION in pymq/_speedups_src/speedups.h whenever a function is added or changes its contract
ABI_VERSION = 10

#: what the record, batch and index code call
SPEEDUPS_FUNCTIONS = (
    "any_property_contains",
    "cq_entries",
    "dispatch_scan",
    "encode_batch",
    "encode_record",
    "index_put",
    "patch_broker_blocks",
    "property_codes",
    "property_codes_one",
    "record_columns",
    "record_string_columns",
    "set_decode_error",
    "set_message_class",
    "split_batch",
    "store_record",
    "stored_scan",
    "stored_to_message_decoder",
    "unpack_record",
    "unpack_records",
)


def load_speedups(layout: dict[str, int | str]) -> ModuleType | None:
    """The accelerator to use: None where it was not built or ``PYMQ_NO_SPEEDUPS`` is set (and not ``0``).

    ``layout`` is what it must have been built with (its ``LAYOUT``: the record layout's constants
    and :data:`ABI_VERSION`). A stale build (the C sources or the record module changed since)
    raises ImportError naming the fix: loud, not silently different bytes.
    """
    speedups = None if os.environ.get("PYMQ_NO_SPEEDUPS", "") not in ("", "0") else _speedups
    if speedups is not None:
        missing = [name for name in SPEEDUPS_FUNCTIONS if not hasattr(speedups, name)]
        if layout != speedups.LAYOUT or missing:
            raise ImportError(
                f"pymq._speedups was built for another record layout or version ({speedups.LAYOUT}, "
                f"missing {missing}; expected {layout}): rebuild it (pip install -e .) or set PYMQ_NO_SPEEDUPS=1"
            )
        speedups.set_decode_error(MessageDecodeError)
    return speedups
