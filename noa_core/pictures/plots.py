"""Plots a person can read, drawn with Pillow's ImageDraw (no plotting library): the FSC curve.

Example::

    from noa_core.pictures import plots
    from noa_core.fourier import resolution
    curve = resolution.fsc(half1, half2, pixel_size=1.06)
    open("fsc.png", "wb").write(plots.fsc_png(curve, title="FSC of half1.mrc and half2.mrc"))
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np

from noa_core.fourier.resolution import THRESHOLDS, Curve
from noa_core.pictures import drawing

SIZE = (900, 560)  # pixels of the picture
MARGINS = (80, 56, 30, 84)  # left, top, right, bottom: room for the labels
CURVE_COLOUR = (31, 90, 180)
LINE_COLOURS = {0.143: (200, 40, 40), 0.5: (230, 140, 0)}  # the threshold lines
GRID = (225, 225, 225)
INK = (20, 20, 20)

__all__ = ["fsc_png", "ticks"]


def ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) from ``low`` to ``high``, about ``count`` of them."""
    span = high - low
    if not span > 0:
        return [low]
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(high / step + 1e-9) + 1)]


def fsc_png(curve: Curve, title: str = "FSC", thresholds: Sequence[float] = THRESHOLDS) -> bytes:
    """The curve as a PNG: FSC against spatial frequency in 1/Å (with the resolution in Å under each tick), or
    against the shell when the pixel size is unknown; shells from 1 (shell 0 is the mean); a dashed line at
    each threshold, with where the curve first falls below it (interpolated between shells)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    font, small, angstrom = _fonts()
    left, top, right, bottom = MARGINS[0], MARGINS[1], SIZE[0] - MARGINS[2], SIZE[1] - MARGINS[3]
    resolved = curve.pixel_size is not None
    unit = 1.0 / (curve.size * curve.pixel_size) if curve.pixel_size is not None else 1.0  # 1/Å (or shells) a shell
    last = max(curve.values.size - 1, 1)
    x_high = last * unit
    finite = curve.values[1:][np.isfinite(curve.values[1:])]
    y_low = min(0.0, math.floor(float(finite.min()) * 10) / 10) if finite.size else 0.0
    y_high = max(1.0, math.ceil(float(finite.max()) * 10) / 10) if finite.size else 1.0

    def at(x: float, y: float) -> tuple[float, float]:
        return (left + (right - left) * x / x_high, bottom - (bottom - top) * (y - y_low) / (y_high - y_low))

    for y in ticks(y_low, y_high, 6):  # grid and y labels
        _, py = at(0, y)
        draw.line([(left, py), (right, py)], fill=GRID)
        draw.text((left - 8, py), f"{y:g}", fill=INK, font=small, anchor="rm")
    for x in ticks(0.0, x_high, 7):
        px, _ = at(x, y_low)
        draw.line([(px, top), (px, bottom)], fill=GRID)
        label = f"{x:g}" if not resolved or x == 0 else f"{x:g}\n{1 / x:.3g} {angstrom}"
        draw.multiline_text((px, bottom + 6), label, fill=INK, font=small, anchor="ma", align="center")
    draw.rectangle([left, top, right, bottom], outline=INK)
    if y_low < 0:
        draw.line([at(0, 0), at(x_high, 0)], fill=(150, 150, 150))

    notes = []
    for threshold in thresholds:
        colour = LINE_COLOURS.get(threshold, (120, 120, 120))
        _, py = at(0, threshold)
        for start in range(left, right, 12):
            draw.line([(start, py), (min(start + 6, right), py)], fill=colour, width=2)
        draw.text((left + 6, py - 3), f"{threshold:g}", fill=colour, font=small, anchor="lb")
        crossing = curve.crossing(threshold)
        if crossing.interpolated is not None:
            px, _ = at(crossing.interpolated * unit, threshold)
            draw.ellipse([px - 5, py - 5, px + 5, py + 5], outline=colour, width=2)
            where = (f"{curve.in_angstrom(crossing.interpolated):.3g} {angstrom}" if resolved
                     else f"shell {crossing.interpolated:.3g}")
            notes.append((f"FSC = {threshold:g} at {where}", colour))

    points = [at(s * unit, float(v)) for s, v in enumerate(curve.values) if s > 0 and math.isfinite(v)]
    if len(points) > 1:
        draw.line(points, fill=CURVE_COLOUR, width=3, joint="curve")
    elif points:
        draw.ellipse([points[0][0] - 3, points[0][1] - 3, points[0][0] + 3, points[0][1] + 3], fill=CURVE_COLOUR)

    draw.text((left, 12), title, fill=INK, font=font)
    for n, (text, colour) in enumerate(notes):
        draw.text((right - 8, top + 8 + 20 * n), text, fill=colour, font=small, anchor="ra")
    x_label = (f"spatial frequency (1/{angstrom}); resolution ({angstrom}) below" if resolved
               else "shell (pixel size unknown)")
    draw.text(((left + right) / 2, SIZE[1] - 8), x_label, fill=INK, font=font, anchor="md")
    y_label = Image.new("RGB", (200, 22), "white")
    ImageDraw.Draw(y_label).text((100, 11), "FSC", fill=INK, font=font, anchor="mm")
    image.paste(y_label.rotate(90, expand=True), (6, (top + bottom) // 2 - 100))

    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _fonts():
    """Two sizes of the pictures' font (:func:`noa_core.pictures.drawing.font`), and the sign to write: 'Å', or
    'A' where the font has no glyph for it."""
    font, small = drawing.font(16), drawing.font(13)
    return font, small, "Å" if drawing.has_glyph(small, "Å") else "A"
