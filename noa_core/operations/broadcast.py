"""noa broadcast: repeat size-1 dimensions to reach a shape (every other dimension must match)."""

from __future__ import annotations

from noa_core.operations.spec import DEVICE, READING, REQUIRED, Integers, Param, Writes, implemented


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [(dtype, {"shape": (2, *shape[1:])})]


OPERATION = Writes(
    name="broadcast",
    summary="Repeat size-1 dimensions to reach SHAPE (every other dimension must match).",
    examples=("noa broadcast gain.mrc gain_stack.mrc --shape 40,1,512,512",),
    params=(Param("shape", Integers(1, 4, 0, 2**40), "Target BDHW shape, e.g. 10,1,64,64 (padded on the left "
                  "with 1s).", default=REQUIRED),
            *READING, DEVICE),
    plan=implemented("broadcast", "plan"),
    warmup=warmup,
)
