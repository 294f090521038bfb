"""noa preview: a PNG or JPEG picture of an image, a stack's section or montage, or a volume's slices, projection
or montage, with RELION's sigma contrast by default; or the same picture drawn on this terminal (--terminal)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, Inputs, Integer, Options, Param, Text, Writes

# noa_core.pictures.drawing's names (that module loads NumPy; declarations do not): a test keeps them equal.
CMAPS = ("gray", "fire", "ice", "viridis")
PICTURES = {"png": (".png", "image/png"), "jpeg": (".jpg", "image/jpeg")}  # --format: (extension, media type)


def picture_output(values: Mapping[str, Any]) -> tuple[str, str]:
    """``(extension, media type)`` of the picture: --format's, PNG when not given (--out-dir, uploads); an
    unknown format is PNG's here and refused, naming --format, when the options are checked."""
    return PICTURES.get(values.get("format") or "png", PICTURES["png"])


def _drawing(options: Options) -> dict[str, Any]:
    """What :func:`noa_core.pictures.drawing.plan_layout` and ``preview`` take from the options."""
    return {"section": options.section, "axis": options.slice, "index": options.index,
            "projection": options.projection, "montage": options.montage, "columns": options.columns,
            "every": options.every or 1, "size": options.size, "bin": options.bin}


def _rendering(options: Options, pixel_size: float | None) -> dict[str, Any]:
    return {**_drawing(options), "spectrum": options.spectrum, "contrast": options.contrast,
            "invert": options.invert, "cmap": options.cmap, "scale_bar": options.scale_bar,
            "pixel_size": pixel_size, "flip_y": options.flip_y}


def _checked(array, options: Options, path: Path, box: tuple[int, int] | None = None, *, text: bool = False):
    """The layout of ``array``'s picture, every option checked against it before anything is read; the
    working memory of drawing it (and with ``text``, of its text for a terminal) checked against what the
    machine has."""
    from noa_core.pictures import drawing
    from noa_core.pictures import terminal
    from noa_core.errors import ParameterError
    from noa_core.limits import check_working_memory

    drawing.parse_contrast(options.contrast)
    try:
        layout = drawing.plan_layout(array.shape, **_drawing(options), box=box)
    except ParameterError as exc:  # the library's `axis` is this operation's --slice
        if exc.param != "axis":
            raise
        raise ParameterError(exc.problem, "slice") from None
    if options.scale_bar and options.spectrum:
        raise ParameterError("a spectrum is in frequencies: it takes no scale bar", "scale_bar")
    full = max(p.rows * p.cols for p in layout.panels)
    held = drawing.working_bytes(layout.shape[0] * layout.shape[1], spectrum=full if options.spectrum else 0)
    if text:
        held += terminal.band_bytes(layout.shape[1])
    check_working_memory(held, f"{path}: {options.output_label()}")
    return layout


def _pixel_size(options: Options, meta, path: Path) -> float | None:
    """The pixel size of the scale bar: --angpix, else the header's; refused when unknown."""
    from noa_core.errors import ParameterError

    pixel = options.input_pixel_size(meta)
    if options.scale_bar and pixel is None:
        raise ParameterError(f"{path}: the pixel size is unknown (0 in the header), so no scale bar can be drawn; "
                             "give it with --angpix", "scale_bar")
    return pixel


def picture_file(path: Path, shape, fmt: str, channels: int, quality: int, overwrite: bool):
    """The output of a picture plan: the pixels (uint8, rows x cols x channels) written as any image's tiles,
    then encoded by Pillow (PNG or JPEG). The picture and its statistics are computed with NumPy while it is
    open, whatever its input file's size (which the driver chooses by): it reads only what it draws, and
    numba's import would cost more."""
    import numpy as np

    from noa_core.pictures import drawing
    from noa_core.operations.plan import RewrittenOutput

    def rewrite(values: Path, out) -> None:
        rows, width = shape[2], shape[3]
        pixels = np.fromfile(values, np.uint8, rows * width).reshape(rows, width // channels, channels)
        out.write(drawing.encode(pixels[..., 0] if channels == 1 else pixels, fmt, quality))

    return RewrittenOutput(path, shape, np.uint8, overwrite, rewrite, compute="numpy")


@functools.cache
def picture_plan() -> type:
    """The class of a picture's plans (made on first use: declarations import no NumPy, plans do)."""
    from noa_core.operations.plan import Plan

    @dataclasses.dataclass
    class PicturePlan(Plan):
        """A PNG or JPEG picture; the output's name must end as its format says (.png, .jpg or .jpeg)."""

        fmt: str | None = None
        channels: int = 1
        quality: int = 90

        def create(self, dst, *, overwrite: bool):
            return create_output(self, dst, overwrite=overwrite)

    return PicturePlan


def create_output(plan, dst, *, overwrite: bool):
    """The writer of a :func:`picture_plan`, once ``dst``'s extension is found to match the format."""
    from noa_core.pictures import drawing
    from noa_core.errors import ParameterError
    from noa_core.operations.plan import check_distinct

    named = drawing.format_of(dst)
    if named is None:
        raise ParameterError(f"{Path(dst).name}: a preview is a PNG or JPEG picture; name the output .png, .jpg "
                             "or .jpeg", "format")
    if plan.fmt is not None and named != plan.fmt:
        raise ParameterError(f"{Path(dst).name} names a {named.upper()} file, but --format {plan.fmt} was asked "
                             f"for; name it {PICTURES[plan.fmt][0]}", "format")
    check_distinct(dst, plan.inputs)
    return picture_file(Path(dst), plan.shape, named, plan.channels, plan.quality, overwrite)


def plan(inputs: Inputs, options: Options):
    import numpy as np

    from noa_core.pictures import drawing
    from noa_core.operations.plan import WHOLE, region_plan

    array, meta = inputs.open(inputs[0])
    layout = _checked(array, options, inputs[0])
    pixel = _pixel_size(options, meta, inputs[0])
    channels = 1 if options.cmap == "gray" else 3
    rows, cols = layout.shape
    shape = (1, 1, rows, cols * channels)

    def reads(key):
        def compute(blocks, out):
            drawn = drawing.draw(array, **_rendering(options, pixel))
            np.copyto(out.numpy().reshape(rows, cols * channels), drawn.pixels.reshape(rows, cols * channels))
            told = _non_finite_notice(inputs[0], drawn)
            if told and told not in planned.notices:  # known once drawn: the driver reports it with the output
                planned.notices.append(told)

        return [], compute

    made = region_plan(options, inputs=inputs, read=[array], meta=meta.derived(shape), shape=shape, reads=reads,
                       dtype="uint8", read_factor=max(1.0, array.nbytes / max(1, rows * cols)), whole_axes=WHOLE)
    fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    planned = picture_plan()(**fields, fmt=options.format, channels=channels, quality=options.quality)
    return planned


def _non_finite_notice(path: Path, drawn) -> str | None:
    """What the user should know of the values a picture could not scale (NaN, infinities); None: every one could."""
    if not drawn.non_finite:
        return None
    verb = "is" if drawn.non_finite == 1 else "are"
    return (f"{path}: {drawn.non_finite} of the {drawn.count} values drawn {verb} NaN or infinite; the contrast "
            "leaves them out (NaN is drawn black)")


def show(path: Path, options: Options, columns: int, lines: int) -> Iterator[str]:
    """The picture of ``path`` drawn for a terminal of ``columns`` x ``lines`` characters (Unicode half
    blocks in 24-bit colour, two pixels a character), fitting it unless --bin sets the scale; drawn before
    the text's first piece is given."""
    from noa_core.pictures import drawing
    from noa_core.pictures import terminal

    array, meta = Inputs([path], options).open(path)
    box = (2 * max(1, lines - 2), max(1, columns))
    rendering = _rendering(options, _pixel_size(options, meta, path))
    _checked(array, options, path, box=None if options.bin else box, text=True)
    picture = drawing.preview(array, **rendering, box=None if options.bin else box)
    return terminal.half_blocks(picture)


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
            "--size. Rows as stored: MRC row 0 at the top, as RELION, mrcfile + Pillow and TIFF viewers show "
            "them; --flip-y puts it at the bottom (IMOD's 3dmod view; MRC's y axis points up). --scale-bar draws "
            "a bar of 1, 2 or 5 x 10^n Å (at most a quarter of the first panel's width; labelled in nm from 10 "
            "nm) with the header's pixel size (or --angpix); refused where it is unknown. The format is the "
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
            Param("size", Integer(16, 16_384), "Longest side of the picture in pixels (block means).", default=1024),
            Param("bin", Integer(1, 65_536), "Average K x K pixels (instead of fitting --size)."),
            Param("scale_bar", Flag(), "Draw a scale bar of a round length in Å or nm (needs the pixel size).",
                  default=False),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å for the scale bar, when the header's is unknown "
                  "or wrong."),
            Param("flip_y", Flag(), "Draw MRC row 0 at the bottom (IMOD's view) instead of the top (RELION's).",
                  default=False),
            Param("format", Choice(tuple(PICTURES)), "png or jpeg (default: OUT's extension; png for --out-dir "
                  "and uploads)."),
            Param("quality", Integer(1, 95), "JPEG quality (Pillow's 1..95).", default=90),
            Param("terminal", Flag(), "Draw the picture on this terminal (Unicode half blocks, 24-bit colour), "
                  "sized to it, instead of writing OUT.", default=False, doors=frozenset({"cli"})),
            *READING),
    plan=plan,
    text_output=picture_output,
    show=show,
    image_output=False,
)
