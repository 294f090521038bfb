"""numba kernel of EER movies (:mod:`noa_core.io.eer`): a strip's codes walked and its events added to a
fraction's accumulator in one pass, the walk telling where the codes end.

A strip is a stream of codes read least significant bit first: a run of ``skipbits`` bits (pixels without an
event), then, after a run shorter than the largest, the event's sub-pixel position (``horzbits`` bits for x,
then ``vertbits`` for y, each with its most significant bit inverted). A whole stream ends with the run that
reaches the strip's last pixel. Compression 65000 keeps the sub-pixel bits after a largest run too. Cached on
disk.

One kernel rather than imagecodecs' ``eer_decode`` after a walk of the codes: imagecodecs stops silently where
the data end (a strip cut short would read as fewer events, so a separate walk had to check it first), and
its sub-pixel grid (``superres``) costs about 200 ns an event, 4-6 times this kernel's, which dominated
reading at upsampling 2 (measured on 4096^2 frames of 336,000 events: 50-70 ms against 12-20 ms; at
upsampling 1, 4-7 ms and a 1.5 ms walk against 5 ms). The tests hold it to imagecodecs' and tifffile's frames.
"""

from __future__ import annotations

import numba
import numpy as np

from noa_core.kernels import runtime


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def decode_codes(data, skipbits, horzbits, vertbits, out, level, full_codes):
    """Add the events of ``data`` to ``out``, a strip's grid ``2**level`` times finer than its pixels (C-ordered),
    a largest run ("skip, no event") taking ``skipbits`` bits, or every code's when ``full_codes`` (compression
    65000, as RELION's ``EERRenderer::renderFrames`` and Thermo Fisher's reader of those files read it).
    Returns the pixel index the codes reach: the strip's pixel count for a whole stream, less when the data
    end first (a strip cut short), more when a run jumps past the end; events past the end are not added.
    An event is placed in the pixel its run reaches, at one of that pixel's grid positions, and the walk then
    moves past the pixel: a stream adds at most 1 to any grid pixel, at every ``level`` (the bound that sizes
    the accumulators, :func:`noa_core.io.eer.accumulator_dtype`).

    A 64-bit buffer of bits (a code has at most 16), and the event's row and column followed as the runs add
    up, so that no event costs a division."""
    grid_width = out.shape[1]
    flat = out.reshape(-1)
    width = grid_width >> level
    pixels = (out.shape[0] >> level) * width
    size = data.size
    mask = np.uint64((1 << skipbits) - 1)
    skip = np.uint64(skipbits)
    code = np.uint64(skipbits + horzbits + vertbits)
    largest = code if full_codes else skip
    x_at, y_at = np.uint64(skipbits), np.uint64(skipbits + horzbits)
    x_mask, y_mask = np.uint64((1 << horzbits) - 1), np.uint64((1 << vertbits) - 1)
    x_flip, y_flip = np.uint64(1 << (horzbits - 1)), np.uint64(1 << (vertbits - 1))
    x_shift, y_shift = np.uint64(horzbits - level), np.uint64(vertbits - level)
    buffer = np.uint64(0)
    have = np.uint64(0)  # bits in the buffer
    at = 0  # the next byte to load
    reached = 0
    row = 0
    column = 0  # reached = row * width + column
    while True:
        if have < np.uint64(16):
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
        column += np.int64(run)
        while column >= width:
            column -= width
            row += 1
        if run == mask:  # the largest run: no event
            if have < largest:  # 65000: its unused sub-pixel bits are missing
                return reached
            buffer >>= largest
            have -= largest
        else:
            if have < code:  # an event whose sub-pixel bits are missing
                return reached
            x = np.int64((((buffer >> x_at) & x_mask) ^ x_flip) >> x_shift)
            y = np.int64((((buffer >> y_at) & y_mask) ^ y_flip) >> y_shift)
            flat[((row << level) + y) * grid_width + (column << level) + x] += 1
            reached += 1
            column += 1
            if column == width:
                column = 0
                row += 1
            buffer >>= code
            have -= code
