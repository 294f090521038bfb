"""Pictures drawn on a text terminal: Unicode upper half blocks in 24-bit colour, two pixels a character.

Each character cell shows the pixel above as the glyph's colour (``ESC[38;2;R;G;Bm``) and the pixel below
as the cell's background (``ESC[48;2;R;G;Bm``) under ``▀`` (U+2580); an odd last row leaves the background
the terminal's own (``ESC[49m``). Terminals that speak ISO 8613-6 direct colour (xterm, kitty, iTerm2,
GNOME's VTE, tmux with ``Tc``, Windows Terminal) draw it; what an SSH session to a cluster has.

The text is made with NumPy and given a band of lines at a time (memory: the picture and one band, whatever the
picture's size): each cell as fixed-width bytes, every number in three places and the places it leaves empty
holding 0 (a byte no sequence has), which are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

UPPER_HALF = "\u2580"
RESET = "\x1b[0m"
BAND_CELLS = 1 << 16  # cells made at a time (at least a line): their fixed-width bytes, 2.6 MB

_FOREGROUND, _BACKGROUND, _DEFAULT_BACKGROUND = b"\x1b[38;2;", b"\x1b[48;2;", b"\x1b[49m"
_COLOUR = len(_FOREGROUND) + 3 * 3 + 3  # a colour's bytes at most: 3 numbers of 3 digits, 2 ';' and 'm'
_GLYPH = UPPER_HALF.encode()
_CELL = 2 * _COLOUR + len(_GLYPH)  # the most UTF-8 bytes of a cell (41)
_LINE_END = (RESET + "\n").encode()
_DIGITS = np.array([list(str(level).encode().ljust(3, b"\0")) for level in range(256)], np.uint8)  # then 0s


def band_bytes(cols: int) -> int:
    """The most memory the text of a picture ``cols`` pixels wide takes at once: one band's cells as fixed-width
    bytes, their lines, which of them are kept and the kept ones (41 bytes a cell each), its string (2 bytes a
    character: ``▀`` is past Latin-1) as the UTF-8 decoder makes it (twice), and its bytes again as the terminal's
    stream encodes it."""
    return 8 * _CELL * max(BAND_CELLS, cols)


def half_blocks(picture: np.ndarray) -> Iterator[str]:
    """The text drawing ``picture`` (uint8 (H, W) gray or (H, W, 3) RGB), in pieces of whole lines: ceil(H / 2)
    lines of W characters, each line ending in a colour reset and a newline."""
    pixels = np.asarray(picture, dtype=np.uint8)
    rows, cols = pixels.shape[:2]
    lines = max(1, BAND_CELLS // max(1, cols))
    for top in range(0, rows, 2 * lines):
        yield str(_band(pixels[top:top + 2 * lines]).data, "utf-8")


def _band(pixels: np.ndarray) -> np.ndarray:
    """The UTF-8 bytes of the lines drawing ``pixels`` (an even number of rows, or the last ones)."""
    if pixels.ndim == 2:
        pixels = pixels[..., None]  # gray: the same level in each channel (the digit table broadcasts)
    upper, lower = pixels[0::2], pixels[1::2]
    lines, cols = upper.shape[:2]
    cells = np.zeros((lines, cols, _CELL), np.uint8)
    _colour(cells[..., :_COLOUR], _FOREGROUND, upper)
    _colour(cells[:len(lower), :, _COLOUR:2 * _COLOUR], _BACKGROUND, lower)
    if len(lower) < lines:  # an odd last row: the terminal's background below it
        cells[-1, :, _COLOUR:_COLOUR + len(_DEFAULT_BACKGROUND)] = np.frombuffer(_DEFAULT_BACKGROUND, np.uint8)
    cells[..., 2 * _COLOUR:] = np.frombuffer(_GLYPH, np.uint8)
    text = np.concatenate([cells.reshape(lines, -1),
                           np.broadcast_to(np.frombuffer(_LINE_END, np.uint8), (lines, len(_LINE_END)))], axis=1)
    return text[text != 0]


def _colour(out: np.ndarray, introducer: bytes, levels: np.ndarray) -> None:
    """``introducer`` R;G;B m of ``levels`` (..., 3 or 1 channels) into ``out`` (..., :data:`_COLOUR`), each
    number in three places."""
    start = len(introducer)
    out[..., :start] = np.frombuffer(introducer, np.uint8)
    for channel in range(3):
        at = start + 4 * channel
        out[..., at:at + 3] = _DIGITS[levels[..., min(channel, levels.shape[-1] - 1)]]
        out[..., at + 3] = ord(";") if channel < 2 else ord("m")
