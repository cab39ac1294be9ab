"""The C allocator's setting for a long-lived process that handles large request bodies."""

from __future__ import annotations

import ctypes

from ragmux.core.units import MIB

M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
MMAP_THRESHOLD = 4 * MIB


def keep_large_blocks_mapped() -> None:
    """Makes glibc map every block of MMAP_THRESHOLD or more on its own, so freeing it gives
    its memory back to the system.

    By default glibc raises that threshold (up to 32 MiB) each time such a block is freed:
    after one upload, the next upload's buffers of a similar size come from the heap instead,
    and the heap keeps them in RSS after the request. A fixed threshold turns that off.
    Elsewhere than glibc there is no mallopt, or it ignores the setting: nothing happens.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
