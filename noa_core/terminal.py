"""Pictures drawn on a text terminal: Unicode upper half blocks in 24-bit colour, two pixels a character.

Each character cell shows the pixel above as the glyph's colour (``ESC[38;2;R;G;Bm``) and the pixel below
as the cell's background (``ESC[48;2;R;G;Bm``) under ``▀`` (U+2580); an odd last row leaves the background
the terminal's own (``ESC[49m``). Terminals that speak ISO 8613-6 direct colour (xterm, kitty, iTerm2,
GNOME's VTE, tmux with ``Tc``, Windows Terminal) draw it; what an SSH session to a cluster has.
"""

from __future__ import annotations

import numpy as np

UPPER_HALF = "\u2580"
RESET = "\x1b[0m"


def half_blocks(picture: np.ndarray) -> str:
    """The text drawing ``picture`` (uint8 (H, W) gray or (H, W, 3) RGB): ceil(H / 2) lines of W characters,
    each line ending in a colour reset and a newline."""
    pixels = np.asarray(picture, dtype=np.uint8)
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], 3, axis=2)
    rows = pixels.shape[0]
    lines = []
    for top in range(0, rows, 2):
        upper = pixels[top]
        lower = pixels[top + 1] if top + 1 < rows else None
        cells = []
        for x in range(pixels.shape[1]):
            r, g, b = upper[x]
            below = "\x1b[49m" if lower is None else "\x1b[48;2;{};{};{}m".format(*lower[x])
            cells.append(f"\x1b[38;2;{r};{g};{b}m{below}{UPPER_HALF}")
        lines.append("".join(cells) + RESET + "\n")
    return "".join(lines)
