"""noa preview: a PNG or JPEG picture (uint8 pixels, grey or a colour map) of what the options pick from the input,
every option checked against its shape before anything is read; or the same picture as text for a terminal."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from noa_core import limits
from noa_core.errors import ParameterError
from noa_core.io.remote import as_path
from noa_core.operations.plan import WHOLE, Plan, RewrittenOutput, check_distinct, region_plan
from noa_core.operations.preview import PICTURES
from noa_core.operations.spec import Inputs, Options
from noa_core.pictures import drawing, terminal


def _drawing(options: Options, *, text: bool = False) -> dict[str, Any]:
    """What :func:`noa_core.pictures.drawing.plan_layout` and ``preview`` take from the options; ``text``: for a
    terminal, whose picture is drawn a pixel a value at most (sized to the terminal)."""
    return {"section": options.section, "axis": options.slice, "index": options.index,
            "projection": options.projection, "montage": options.montage, "columns": options.columns,
            "every": options.every or 1, "size": options.size, "bin": options.bin, "magnify": not text}


def _rendering(options: Options, pixel_size: float | None, *, text: bool = False) -> dict[str, Any]:
    return {**_drawing(options, text=text), "spectrum": options.spectrum, "contrast": options.contrast,
            "invert": options.invert, "cmap": options.cmap, "scale_bar": options.scale_bar,
            "pixel_size": pixel_size, "flip_y": options.flip_y, "labels": options.labels}


def _checked(array, options: Options, path: Path, box: tuple[int, int] | None = None, *, text: bool = False):
    """The layout of ``array``'s picture, every option checked against it before anything is read; the
    working memory of drawing it (and with ``text``, of its text for a terminal) checked against what the
    machine has."""
    drawing.parse_contrast(options.contrast)
    try:
        layout = drawing.plan_layout(array.shape, **_drawing(options, text=text), box=box)
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
    limits.check_working_memory(held, f"{path}: {options.output_label()}")
    return layout


def _pixel_size(options: Options, meta, path: Path) -> float | None:
    """The pixel size of the scale bar: --angpix, else the header's; refused when unknown."""
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

    def rewrite(values: Path, out) -> None:
        rows, width = shape[2], shape[3]
        pixels = np.fromfile(values, np.uint8, rows * width).reshape(rows, width // channels, channels)
        out.write(drawing.encode(pixels[..., 0] if channels == 1 else pixels, fmt, quality))

    return RewrittenOutput(path, shape, np.uint8, overwrite, rewrite, compute="numpy")


@dataclasses.dataclass
class PicturePlan(Plan):
    """A PNG or JPEG picture; the output's name must end as its format says (.png, .jpg or .jpeg)."""

    fmt: str | None = None
    channels: int = 1
    quality: int = 90

    def create(self, dst, *, overwrite: bool):
        """The writer of the picture, once ``dst``'s extension is found to match the format."""
        named = drawing.format_of(dst)
        if named is None:
            raise ParameterError(f"{Path(dst).name}: a preview is a PNG or JPEG picture; name the output .png, .jpg "
                                 "or .jpeg", "format")
        if self.fmt is not None and named != self.fmt:
            raise ParameterError(f"{Path(dst).name} names a {named.upper()} file, but --format {self.fmt} was asked "
                                 f"for; name it {PICTURES[self.fmt][0]}", "format")
        check_distinct(dst, self.inputs)
        return picture_file(as_path(dst), self.shape, named, self.channels, self.quality, overwrite)


def plan(inputs: Inputs, options: Options):
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
    planned = PicturePlan(**fields, fmt=options.format, channels=channels, quality=options.quality)
    return planned


def _non_finite_notice(path: Path, drawn) -> str | None:
    """What the user should know of the values a picture could not scale (NaN, infinities); None: every one could."""
    if not drawn.non_finite:
        return None
    verb = "is" if drawn.non_finite == 1 else "are"
    return (f"{path}: {drawn.non_finite} of the {drawn.count} values drawn {verb} NaN or infinite; the contrast "
            "leaves them out (NaN is drawn black)")


def show(path: Path, options: Options, columns: int, lines: int) -> tuple[Iterator[str], list[str]]:
    """The picture of ``path`` drawn for a terminal of ``columns`` x ``lines`` characters (Unicode half
    blocks in 24-bit colour, two pixels a character), fitting it unless --bin sets the scale, and the notices a
    written picture has (what reading the file said, the values not drawn to scale); drawn before the text's
    first piece is given."""
    inputs = Inputs([path], options)
    array, meta = inputs.open(path, tiles=True)  # read only through the planes drawn (EER: fractions decoded)
    box = None if options.bin else (2 * max(1, lines - 2), max(1, columns))
    rendering = _rendering(options, _pixel_size(options, meta, path), text=True)
    _checked(array, options, path, box=box, text=True)
    drawn = drawing.draw(array, **rendering, box=box)
    told = _non_finite_notice(path, drawn)
    return terminal.half_blocks(drawn.pixels), [*inputs.notices, *([told] if told else [])]
