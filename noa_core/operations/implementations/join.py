"""noa join: stacks joined in order along the batch axis; each output tile copies the inputs' parts it covers. A tilt
series' angle, mdoc and STAR files beside the first input are not written beside it (a notice says so)."""

from __future__ import annotations

from noa_core.compute.conversion import convert_into
from noa_core.images import stacks
from noa_core.io import Metadata
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    opened = [inputs.open(src) for src in inputs]  # missing or unreadable files are named first
    arrays = [array for array, _ in opened]
    names = [str(src) for src in inputs]
    shape = stacks.check_joinable([a.shape for a in arrays], [a.dtype for a in arrays], names)
    meta = Metadata.joined([m for _, m in opened], names)
    starts = [0]
    for array in arrays:
        starts.append(starts[-1] + array.shape[0])

    def reads(key):
        """The inputs' parts that output tile ``key`` covers along the batch, and how to place them."""
        first, last = key[0].start or 0, key[0].stop if key[0].stop is not None else shape[0]
        views, places = [], []
        for array, begin, end in zip(arrays, starts, starts[1:]):
            lo, hi = max(first, begin), min(last, end)
            if lo < hi:
                views.append(array[(slice(lo - begin, hi - begin), *key[1:])])
                places.append(slice(lo - first, hi - first))
        return views, _placer(places)

    _, notices = beside.in_step(inputs, options, arrays[0].shape, None,
                                   why_not=f"joined with {len(inputs) - 1} other input(s)")
    return region_plan(options, inputs=inputs, read=arrays, meta=meta, shape=shape, reads=reads,
                       detail=f"{len(inputs)} inputs, {shape[0]} entries", notices=notices)


def _placer(places: list[slice]):
    def compute(blocks, out) -> None:
        for block, place in zip(blocks, places):
            convert_into(block, out[place], mode="checked")

    return compute
