"""noa preview: a PNG or JPEG picture of an image, a stack's section or montage, or a volume's slices, projection
or montage, with RELION's sigma contrast by default; or the same picture drawn on this terminal (--terminal)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, Integer, Param, Text, Writes, implemented

# noa_core.pictures.drawing's names (that module loads NumPy; declarations do not): a test keeps them equal.
CMAPS = ("gray", "fire", "ice", "viridis")
PICTURES = {"png": (".png", "image/png"), "jpeg": (".jpg", "image/jpeg")}  # --format: (extension, media type)


def picture_output(values: Mapping[str, Any]) -> tuple[str, str]:
    """``(extension, media type)`` of the picture: --format's, PNG when not given (--out-dir, uploads); an
    unknown format is PNG's here and refused, naming --format, when the options are checked."""
    return PICTURES.get(values.get("format") or "png", PICTURES["png"])


OPERATION = Writes(
    name="preview",
    summary="A PNG or JPEG picture of an image, a stack's section or montage, a volume's central slices, slice, "
            "projection or montage, or its log power spectrum; or drawn on this terminal (--terminal).",
    details="What is drawn: an image, or section --section N of a stack (default 0); a volume's three central "
            "slices side by side, XY (z = D//2), XZ (y = H//2, rows z) and YZ (x = W//2, rows z, columns y), or the "
            "one of --slice z|y|x at --index N (default the centre, N//2), or the mean along an axis "
            "(--projection z|y|x); --montage: a stack's sections (a volume's z slices) every --every N, in a grid "
            "of --columns (default about square), left to right, top to bottom. Panels are 4 pixels apart on "
            "black. --spectrum draws the natural log of each panel's power spectrum |F|^2/N (zero frequency at "
            "H//2, W//2, both halves), as noa powerspectrum --log computes it. Contrast, over every finite value "
            "drawn (NaN and infinities are left out; a written picture's notice says how many): sigma:K (default "
            "sigma:3) is mean ± K standard deviations (n - 1), as relion_image_handler --sigma_contrast K; "
            "percentiles:LO,HI; minmax; range:A,B. Levels are floor((v - black) / ((white - black) / 255)) of the "
            "values clipped to black..white, RELION's PNG formula (NaN is drawn black); --invert swaps black and "
            "white. Size: each panel is averaged in k x k blocks (nothing dropped; a partial block at the end is "
            "the mean of its pixels), k = --bin, or the smallest k whose picture has its longest side at most "
            "--size; a smaller picture is magnified to fit --size, each value drawn m x m pixels (m a whole number: "
            "voxels stay visible; not with --bin, nor on the terminal). Rows as stored: MRC row 0 at the top, as "
            "RELION, mrcfile + Pillow and TIFF viewers show "
            "them; --flip-y puts it at the bottom (IMOD's 3dmod view; MRC's y axis points up). --scale-bar draws "
            "a bar of 1, 2 or 5 x 10^n Å (at most a quarter of the first panel's width; labelled in nm from 10 "
            "nm) with the header's pixel size (or --angpix); refused where it is unknown. --labels names each "
            "panel at its top left: XY, XZ, YZ (a volume's central slices), the slice or 'mean' (one slice or "
            "projection), the section number (a montage, a stack's section). Text is white, outlined in black, a "
            "sixteenth of the panel's shorter side high (12 pixels at least). The format is the "
            "output's extension (.png, .jpg, .jpeg), or --format (png for --out-dir and uploads). Only what is "
            "drawn is read, in bands of 16 MiB (memory stays bounded): an XY slice reads its plane, an XZ slice a "
            "row of each section; a YZ slice needs a value of every row, so it reads the sections in turn.",
    examples=("noa preview micrograph.mrc micrograph.jpg",
              "noa preview map.mrc map.png --scale-bar --cmap viridis",
              "noa preview particles.mrcs montage.png --montage --every 10",
              "noa preview micrograph.mrc --terminal"),
    params=(Param("section", Integer(0), "Which image of a stack (or volume of a stack of volumes) to draw "
                  "(default 0)."),
            Param("slice", Choice(("z", "y", "x")), "Draw one slice of a volume across this axis (z: XY, y: XZ, "
                  "x: YZ) instead of the three central ones."),
            Param("index", Integer(0), "The slice --slice draws (default the centre, N//2)."),
            Param("projection", Choice(("z", "y", "x")), "Draw the mean of a volume along this axis."),
            Param("montage", Flag(), "Draw a stack's sections (a volume's z slices) in a grid.", default=False),
            Param("columns", Integer(1, 10_000), "Columns of the montage (default about square)."),
            Param("every", Integer(1), "Montage: draw every N-th section (default 1).", default=1),
            Param("spectrum", Flag(), "Draw the log power spectrum of each panel (centred, |F|^2/N, as noa "
                  "powerspectrum --log).", default=False),
            Param("contrast", Text(1, 64), "Black and white: sigma:K (mean ± K sd, RELION's --sigma_contrast), "
                  "percentiles:LO,HI, minmax or range:A,B.", default="sigma:3"),
            Param("invert", Flag(), "Swap black and white.", default=False),
            Param("cmap", Choice(CMAPS), "Colour map: gray, fire (black, red, yellow, white), ice (black, blue, "
                  "cyan, white) or viridis (matplotlib's).", default="gray"),
            Param("size", Integer(16, 16_384), "Longest side of the picture in pixels (block means; a smaller "
                  "picture is magnified by a whole factor to fit).", default=1024),
            Param("bin", Integer(1, 65_536), "Average K x K pixels (instead of fitting --size)."),
            Param("scale_bar", Flag(), "Draw a scale bar of a round length in Å or nm (needs the pixel size).",
                  default=False),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å for the scale bar, when the header's is unknown "
                  "or wrong."),
            Param("labels", Flag(), "Name each panel: XY, XZ, YZ on a volume's slices, the section number on a "
                  "montage.", default=False),
            Param("flip_y", Flag(), "Draw MRC row 0 at the bottom (IMOD's view) instead of the top (RELION's).",
                  default=False),
            Param("format", Choice(tuple(PICTURES)), "png or jpeg (default: OUT's extension; png for --out-dir "
                  "and uploads)."),
            Param("quality", Integer(1, 95), "JPEG quality (Pillow's 1..95).", default=90),
            Param("terminal", Flag(), "Draw the picture on this terminal (Unicode half blocks, 24-bit colour), "
                  "sized to it, instead of writing OUT.", default=False, doors=frozenset({"cli"})),
            *READING),
    plan=implemented("preview", "plan"),
    text_output=picture_output,
    show=implemented("preview", "show"),
    image_output=False,
)
