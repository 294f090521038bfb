"""noa sections: keep or drop sections (batch entries of a stack, depth slices of a volume)."""

from __future__ import annotations

from noa_core.operations.spec import READING, SIDE_FILES, Param, Text, Writes, implemented

OPERATION = Writes(
    name="sections",
    summary="Keep or drop sections (entries of a stack, slices of a volume); FEI/SERI records follow.",
    examples=("noa sections tilts.st kept.st --keep 0-9,12", "noa sections movie.mrcs fewer.mrcs --drop 0,1"),
    details="A range list counts from 0: '0-9,12'. --keep writes the sections in the order listed (repeats "
            "allowed); --drop writes the others in their order.",
    params=(Param("keep", Text(1, 10_000), "Sections to keep, in this order, e.g. 0-9,12."),
            Param("drop", Text(1, 10_000), "Sections to leave out, e.g. 3,7."),
            *READING, SIDE_FILES),
    plan=implemented("sections", "plan"),
)
