"""noa join: stacks joined in order along the batch axis (same depth, height, width and element type)."""

from __future__ import annotations


from noa_core.operations.spec import DEVICE, READING, Inputs, Options, Writes

MAX_INPUTS = 1000  # the most files a multipart upload may hold (Starlette's max_files): every door takes as many


def plan(inputs: Inputs, options: Options):
    from noa_core.images import stacks
    from noa_core.io import Metadata
    from noa_core.operations.plan import region_plan

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

    return region_plan(options, inputs=inputs, read=arrays, meta=meta, shape=shape, reads=reads,
                       detail=f"{len(inputs)} inputs, {shape[0]} entries")


def _placer(places: list[slice]):
    from noa_core.compute.conversion import convert_into

    def compute(blocks, out) -> None:
        for block, place in zip(blocks, places):
            convert_into(block, out[place], mode="checked")

    return compute


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [(dtype, {})]  # one input: the checked copy of each type


OPERATION = Writes(
    name="join",
    summary="Join stacks in order along the batch (same depth, height, width and element type; the first misfit "
            "is named).",
    details="Images join into an image stack, volumes of one size into a volume stack. The output keeps the "
            "first input's pixel size, origin and labels; per-section extended header records are concatenated "
            "when every input has them of one type (else dropped, with a notice). Convert inputs of another "
            "element type first (noa copy --dtype).",
    examples=("noa join a.mrcs b.mrcs c.mrcs -o abc.mrcs",),
    params=(*READING, DEVICE),
    max_inputs=MAX_INPUTS,
    plan=plan,
    warmup=warmup,
)
