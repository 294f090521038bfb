"""noa split: one file per section (or per N sections) of a stack; all files written, or none."""

from __future__ import annotations

from noa_core.operations.spec import DEVICE, READING, Integer, Param, WritesSeveral, implemented

NAMING = ("Outputs are named after the input and the number of their part: IN_000.EXT, IN_001.EXT, ... "
          "(as many digits as the count needs, at least 3), in IN's format; part k holds sections k*N to k*N+N-1 "
          "(--every N).")


OPERATION = WritesSeveral(
    name="split",
    summary="Write one file per section (or per N) of a stack, all or none; a single volume splits into its "
            "Z sections.",
    details=NAMING + " A stack (of images or volumes) splits along its batch; a single volume into its Z "
            "sections. Pixel size, origin and labels are kept; per-section extended header records (FEI, "
            "SerialEM) follow their sections. Every output is written to a hidden folder in OUT_DIR first and "
            "renamed into place once all are complete (an OUT_DIR on object storage: written here, then all "
            "uploaded, none left when one fails).",
    examples=("noa split tilt.mrcs --out-dir frames/",
              "noa split movie.mrcs --out-dir chunks/ --every 10"),
    params=(Param("every", Integer(1, None), "Sections (batch entries) per output file.", default=1),
            *READING, DEVICE),
    plans=implemented("split", "plans"),
)
