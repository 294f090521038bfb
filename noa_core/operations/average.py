"""noa average: average (or sum) groups of N consecutive sections, e.g. movie frames into fractions."""

from __future__ import annotations

from noa_core.operations.spec import READING, REQUIRED, SIDE_FILES, Flag, Integer, Param, Writes, implemented

OPERATION = Writes(
    name="average",
    summary="Average (or --sum) groups of N consecutive sections: movie frames into fractions.",
    examples=("noa average movie.mrcs fractions.mrcs --group 4",),
    details="Integer and float16 data give float32; sums are taken in float64. An incomplete last group is "
            "left out (with a notice); each group keeps the extended-header record of its first section.",
    params=(Param("group", Integer(1, 1 << 20), "Sections per group (N).", default=REQUIRED),
            Param("sum", Flag(), "Sum the groups instead of averaging them.", default=False),
            *READING, SIDE_FILES),
    plan=implemented("average", "plan"),
)
