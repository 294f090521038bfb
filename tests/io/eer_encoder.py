"""A test-side EER writer, from the format's description (no sample EER file is public).

A frame is a bit stream read least significant bit first. Each code is a run length of ``skipbits``
bits (pixels skipped), then, unless the run is the largest the field holds (``2**skipbits - 1``:
"skip that many, no event"), the event's sub-pixel position: ``horzbits`` bits for x, then
``vertbits`` for y, each stored with its most significant bit inverted. Compression 65000 (the first
Falcon 4 files) keeps the sub-pixel bits after a largest run too, unused: every code is 12 bits, as
RELION's ``EERRenderer::renderFrames`` reads it (``FULL_CODES``). The stream ends with runs that
reach the frame's last pixel, padded with zero bytes to an even length. Pages are BigTIFF IFDs with
Compression 65000 (8-bit runs, 2+2 sub-pixel bits), 65001 (7, 2+2) or 65002 (widths in tags
65007-65009), and the acquisition XML in tag 65001 of the first page.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

BITS = {65000: (8, 2, 2), 65001: (7, 2, 2)}
FULL_CODES = {65000}  # compressions whose every code carries sub-pixel bits, a largest run too
XML = (b'<metadata><item name="numberOfFrames">{frames}</item>'
       b'<item name="exposureTime" unit="s">2.5</item>'
       b'<item name="meanDoseRate" unit="e/pixel/s">5.5</item>'
       b'<item name="sensorImageWidth" unit="pixel">{width}</item>'
       b'<item name="sensorImageHeight" unit="pixel">{height}</item>'
       b'<item name="sensorPixelSize.width" unit="m">1.4e-05</item>'
       b'<item name="sensorPixelSize.height" unit="m">1.4e-05</item></metadata>')


def pack(values: np.ndarray, widths: np.ndarray) -> bytes:
    """Codes ``values`` of ``widths`` bits, least significant bit first, padded to an even byte count."""
    widths = np.asarray(widths, np.int64)
    starts = np.repeat(np.cumsum(widths) - widths, widths)
    owner = np.repeat(np.arange(len(widths)), widths)
    bits = (np.asarray(values, np.int64)[owner] >> (np.arange(int(widths.sum())) - starts)) & 1
    nbytes = -(-len(bits) // 8)
    nbytes += nbytes % 2
    padded = np.zeros(nbytes * 8, np.uint8)
    padded[:len(bits)] = bits
    return np.packbits(padded, bitorder="little").tobytes()


def encode_frame(positions: Sequence[int], subx: Sequence[int], suby: Sequence[int], pixels: int,
                 bits: tuple[int, int, int], full_codes: bool = False) -> bytes:
    """One frame's stream: events at the increasing physical pixel indices ``positions`` (row-major, at
    most one per pixel), with sub-pixel positions ``subx``, ``suby``; ``pixels`` in the frame.
    ``full_codes``: every code has its sub-pixel bits (zero after a largest run), as in compression 65000."""
    skipbits, horzbits, vertbits = bits
    most = (1 << skipbits) - 1
    positions = np.asarray(positions, np.int64)
    gaps = np.diff(np.concatenate([[-1], positions])) - 1  # pixels skipped before each event
    tail = pixels - (positions[-1] + 1 if len(positions) else 0)
    full = gaps // most  # whole "skip the most" codes before each event
    code = (gaps % most) | ((np.asarray(subx, np.int64) ^ (1 << (horzbits - 1))) << skipbits) \
        | ((np.asarray(suby, np.int64) ^ (1 << (vertbits - 1))) << (skipbits + horzbits))
    nbits = skipbits + horzbits + vertbits
    values = np.concatenate([np.concatenate([[most] * int(f), [c]]) for f, c in zip(full, code)]
                            + [[most] * int(tail // most), [tail % most]]).astype(np.int64)
    widths = np.full(len(values), nbits if full_codes else skipbits, np.int64)
    ends = np.cumsum(full + 1) - 1  # where each event code sits among the codes
    widths[ends] = nbits
    return pack(values, widths)


def random_frame(rng: np.random.Generator, height: int, width: int, dose: float,
                 bits: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events of one frame: sorted unique pixel indices and random sub-pixel positions."""
    count = rng.binomial(height * width, dose)
    positions = np.sort(rng.choice(height * width, count, replace=False))
    return (positions, rng.integers(0, 1 << bits[1], count), rng.integers(0, 1 << bits[2], count))


def render(frames: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], height: int, width: int,
           bits: tuple[int, int, int], upsampling: int) -> np.ndarray:
    """The sum of ``frames`` on the grid of ``upsampling`` (1: physical pixels, 2: twice finer, 3: four
    times), written out from the events: the ground truth a decoder must give."""
    level = upsampling - 1
    fx, fy = 1 << min(level, bits[1]), 1 << min(level, bits[2])
    out = np.zeros((height * fy, width * fx), np.int64)
    for positions, subx, suby in frames:
        y, x = np.divmod(positions, width)
        np.add.at(out, (y * fy + (suby >> (bits[2] - min(level, bits[2]))),
                        x * fx + (subx >> (bits[1] - min(level, bits[1])))), 1)
    return out


def _entry(tag: int, kind: int, values: Sequence[int] | bytes, heap: bytearray, heap_at: int) -> bytes:
    """One 20-byte BigTIFF IFD entry; a value longer than 8 bytes goes to ``heap`` (at file offset ``heap_at``)."""
    size = {3: "H", 4: "I", 16: "Q"}
    data = bytes(values) if kind in (2, 7) else struct.pack(f"<{len(values)}{size[kind]}", *values)
    if len(data) <= 8:
        return struct.pack("<HHQ", tag, kind, len(values)) + data.ljust(8, b"\0")
    offset = heap_at + len(heap)
    heap += data + b"\0" * (len(data) % 2)
    return struct.pack("<HHQQ", tag, kind, len(values), offset)


def write_eer(path: Path, frames: Iterable[Sequence[bytes]], height: int, width: int, compression: int = 65001,
              bits: tuple[int, int, int] | None = None, rows_per_strip: int | None = None,
              xml: bytes | None = None, frame_count: int | None = None) -> None:
    """A BigTIFF EER file: one page per frame, each a list of encoded strips (``rows_per_strip`` rows each,
    default the whole frame). ``bits`` go to tags 65007-65009 for compression 65002."""
    frames = list(frames) if frame_count is None else frames
    count = len(frames) if frame_count is None else frame_count
    xml = XML.replace(b"{frames}", str(count).encode()).replace(b"{width}", str(width).encode()) \
        .replace(b"{height}", str(height).encode()) if xml is None else xml
    with open(path, "wb") as f:
        f.write(b"II" + struct.pack("<HHHQ", 43, 8, 0, 0))
        link = 8  # where the offset of the next IFD goes
        for number, strips in enumerate(frames):
            offsets = []
            for strip in strips:
                offsets.append(f.tell())
                f.write(strip)
            heap, heap_at = bytearray(), f.tell()
            tags = [(256, 4, [width]), (257, 4, [height]), (258, 3, [1]), (259, 3, [compression]), (262, 3, [1]),
                    (273, 16, offsets), (277, 3, [1]), (278, 4, [rows_per_strip or height]),
                    (279, 16, [len(s) for s in strips])]
            if number == 0:
                tags.append((65001, 7, xml))
            if compression == 65002:
                tags += [(65007, 3, [bits[0]]), (65008, 3, [bits[1]]), (65009, 3, [bits[2]])]
            entries = [_entry(tag, kind, values, heap, heap_at) for tag, kind, values in tags]
            f.write(heap)
            ifd = f.tell()
            f.write(struct.pack("<Q", len(entries)) + b"".join(entries) + struct.pack("<Q", 0))
            f.seek(link)
            f.write(struct.pack("<Q", ifd))
            f.seek(0, 2)
            link = ifd + 8 + 20 * len(entries)
