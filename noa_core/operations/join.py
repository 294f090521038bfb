"""noa join: stacks joined in order along the batch axis (same depth, height, width and element type)."""

from __future__ import annotations

from noa_core.operations.spec import DEVICE, READING, SIDE_FILES, Writes, implemented

MAX_INPUTS = 1000  # the most files a multipart upload may hold (Starlette's max_files): every door takes as many


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
    params=(*READING, SIDE_FILES, DEVICE),
    max_inputs=MAX_INPUTS,
    plan=implemented("join", "plan"),
    warmup=warmup,
)
