"""numba kernels of EER movies (:mod:`noa_core.io.eer`): the walk that tells where a strip's codes end, and
the decoder of compression 65000, whose layout imagecodecs does not read.

A strip is a stream of codes read least significant bit first: a run of ``skipbits`` bits (pixels without an
event), then, after a run shorter than the largest, the event's sub-pixel position (``horzbits`` bits for x,
then ``vertbits`` for y, each with its most significant bit inverted). A whole stream ends with the run that
reaches the strip's last pixel. Cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

from noa_core.kernels import runtime


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def stream_end(data, skipbits, codebits, pixels):
    """The pixel index the codes of ``data`` reach, a largest run taking ``skipbits`` bits and any other run
    ``codebits`` (compressions 65001 and 65002, as imagecodecs' ``eer_decode`` reads them): ``pixels`` for a
    whole stream, less when the data end first (a strip cut short), more when a run jumps past the end.

    A separate walk because imagecodecs stops silently where the data end; a 64-bit buffer of bits, so that
    the walk costs a fifth of the decoding it guards."""
    size = data.size
    mask = np.uint64((1 << skipbits) - 1)
    skip = np.uint64(skipbits)
    code = np.uint64(codebits)
    buffer = np.uint64(0)
    have = np.uint64(0)  # bits in the buffer
    at = 0  # the next byte to load
    reached = 0
    while True:
        if have < np.uint64(16):  # a code has at most 16 bits
            if at + 6 <= size:
                word = (np.uint64(data[at]) | np.uint64(data[at + 1]) << np.uint64(8)
                        | np.uint64(data[at + 2]) << np.uint64(16) | np.uint64(data[at + 3]) << np.uint64(24)
                        | np.uint64(data[at + 4]) << np.uint64(32) | np.uint64(data[at + 5]) << np.uint64(40))
                buffer |= word << have
                have += np.uint64(48)
                at += 6
            else:
                while at < size and have <= np.uint64(56):
                    buffer |= np.uint64(data[at]) << have
                    have += np.uint64(8)
                    at += 1
                if have < skip:
                    return reached
        run = buffer & mask
        reached += np.int64(run)
        if reached >= pixels:
            return reached
        if run == mask:  # the largest run: no event, no sub-pixel bits
            buffer >>= skip
            have -= skip
        else:
            if have < code:  # an event whose sub-pixel bits are missing
                return reached
            reached += 1
            buffer >>= code
            have -= code


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def decode_full_codes(data, skipbits, horzbits, vertbits, out, level):
    """Add the events of ``data`` to ``out``, a strip's grid ``2**level`` times finer than its pixels, every
    code ``skipbits + horzbits + vertbits`` bits long, a largest run ("skip, no event") included: compression
    65000 as RELION's ``EERRenderer::renderFrames`` and Thermo Fisher's reader of those files read it (imagecodecs
    reads a largest run without sub-pixel bits). Returns the pixel index the codes reach (:func:`stream_end`);
    events past the end are not added."""
    width = out.shape[1] >> level
    pixels = (out.shape[0] >> level) * width
    codebits = skipbits + horzbits + vertbits
    mask = (1 << skipbits) - 1
    total = data.size * 8
    reached = 0
    at = 0  # the code's first bit
    while at + skipbits <= total:
        first = at >> 3
        word = 0
        for i in range(min(3, data.size - first)):  # a code of at most 16 bits spans at most 3 bytes
            word |= np.int64(data[first + i]) << (8 * i)
        word >>= at & 7
        run = word & mask
        reached += run
        if reached >= pixels:
            return reached
        if run != mask:
            if at + codebits > total:
                return reached
            x = ((word >> skipbits) & ((1 << horzbits) - 1)) ^ (1 << (horzbits - 1))
            y = ((word >> (skipbits + horzbits)) & ((1 << vertbits) - 1)) ^ (1 << (vertbits - 1))
            row = reached // width
            column = reached - row * width
            out[(row << level) + (y >> (vertbits - level)), (column << level) + (x >> (horzbits - level))] += 1
            reached += 1
        at += codebits
    return reached
