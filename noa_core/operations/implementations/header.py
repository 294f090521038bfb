"""noa header: an MRC header changed in place (pixel size, origin, stack or volume, labels) without rewriting
the data.

Only the first 1024 bytes are rewritten (one ``pwrite``, then ``fsync``), under an exclusive lock: the extended
header and the data bytes are never touched, so a 20 GB map takes milliseconds. TIFF files are refused (their
tags live among the data) and so are compressed files.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import numpy as np

from noa_core import io
from noa_core.array import layout
from noa_core.errors import FileFormatError, ParameterError
from noa_core.io import formats, mrc
from noa_core.io.mrc import _labels, check_field
from noa_core.operations.spec import Options


def _triple(values: tuple[float, ...] | None) -> tuple[float, float, float] | None:
    """One value for every axis, or one per D, H, W axis (:class:`PerAxis`: never two)."""
    if values is None:
        return None
    return (values[0],) * 3 if len(values) == 1 else tuple(values)  # type: ignore[return-value]


def _check(options: Options) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    pixel = _triple(options.pixel_size)
    origin = _triple(options.origin)
    if origin is not None:
        check_field(origin, "origin")
    if options.label is not None:
        text = options.label
        if not all(32 <= ord(c) < 127 for c in text):
            raise ParameterError("only printable ASCII characters fit an MRC label", "label")
    return pixel, origin


def _pixel(cell: float, sampling: int) -> float:
    size = cell / sampling if sampling > 0 else 0.0
    return size if size > 0 and size == size and size != float("inf") else 0.0


def _read_state(record) -> dict[str, Any]:
    """Pixel size and origin per D, H, W (Å), space group, mz and labels of a header record."""
    m = (int(record["mx"]), int(record["my"]), int(record["mz"]))
    cell = record["cella"]
    pixel_xyz = [_pixel(float(cell[a]), s) for a, s in zip("xyz", m)]
    origin = record["origin"]
    return {"pixel_size": [pixel_xyz[2], pixel_xyz[1], pixel_xyz[0]],
            "origin": [float(origin["z"]), float(origin["y"]), float(origin["x"])],
            "space_group": int(record["ispg"]), "mz": m[2], "labels": _labels(record)}


def _z_sections(record) -> int:
    """Sections along Z: the size of the file axis mapped to Z."""
    sizes = dict(zip((int(record["mapc"]), int(record["mapr"]), int(record["maps"])),
                     (int(record["nx"]), int(record["ny"]), int(record["nz"]))))
    return sizes[3]


def _sizes_xyz(record) -> tuple[int, int, int]:
    sizes = dict(zip((int(record["mapc"]), int(record["mapr"]), int(record["maps"])),
                     (int(record["nx"]), int(record["ny"]), int(record["nz"]))))
    return sizes[1], sizes[2], sizes[3]


def edit(path: Path, options: Options, dry_run: bool) -> dict:
    """Change the header of the MRC file ``path`` as ``options`` say (or with ``dry_run`` only say how):
    ``{path, dry_run, changed, changes: {field: {old, new}}}``, per-axis values in D, H, W order (Å)."""
    p = formats.check_input(path)  # the file first: a missing or unreadable one is named before any value
    fmt, compression = formats.detect(p)
    if fmt.name != "mrc":
        raise FileFormatError(f"{p}: only MRC headers are edited in place, not {fmt.title} ones (their metadata "
                              "lives among the data); write a copy with the new values instead (noa copy)")
    if compression is not None:
        raise FileFormatError(f"{p}: the file is {compression}-compressed, so its header cannot be rewritten in "
                              "place; decompress it first")
    pixel, origin = _check(options)
    fd = os.open(p, os.O_RDONLY if dry_run else os.O_RDWR)
    try:
        # Read-modify-write under an exclusive lock (shared for a dry run): two edits of one file at once
        # (two shells, two service workers) run one after the other, and neither change is lost.
        fcntl.flock(fd, fcntl.LOCK_SH if dry_run else fcntl.LOCK_EX)
        before_kind = io.probe(p).kind  # validates the whole header against the file, as any read does
        raw = os.pread(fd, mrc.HEADER_BYTES, 0)
        parsed = mrc.parse_header(p, raw)
        record = np.frombuffer(bytearray(raw[:mrc.HEADER_BYTES]), parsed.dtype, count=1)[0]
        old = _read_state(record)
        words = []
        x_size, y_size, z_size = _sizes_xyz(record)
        after_kind = before_kind
        if options.as_stack is not None:
            pixel_now = _read_state(record)["pixel_size"]
            sections = _z_sections(record)
            record["ispg"], record["mz"] = (0, 1) if options.as_stack else (1, sections)
            record["cella"]["z"] = pixel_now[0] * int(record["mz"])  # the Z pixel size stays
            h, w = y_size, x_size
            after_kind = layout.kind((sections, 1, h, w) if options.as_stack else (1, sections, h, w))
            words.append("--as-stack" if options.as_stack else "--as-volume")
        if pixel is not None:
            # Unknown sampling gets the axis size (a stack samples one section along Z).
            stack = int(record["ispg"]) == 0 and int(record["mz"]) <= 1
            for axis, size, value in zip("xyz", (x_size, y_size, 1 if stack else z_size), pixel[::-1]):
                sampling_field = "m" + axis
                if int(record[sampling_field]) <= 0:
                    record[sampling_field] = size
                record["cella"][axis] = value * int(record[sampling_field])
            words.append("--pixel-size " + ",".join(f"{v:g}" for v in pixel))
        if origin is not None:
            record["origin"]["z"], record["origin"]["y"], record["origin"]["x"] = origin
            words.append("--origin " + ",".join(f"{v:g}" for v in origin))
        labels = list(old["labels"])
        if words:
            labels = mrc.merge_labels(labels, mrc.stamp_label("noa header " + " ".join(words), ""))
        if options.label is not None:
            labels = mrc.merge_labels(labels, options.label)
        record["nlabl"] = len(labels)
        for i in range(mrc.MAX_LABELS):
            record["label"][i] = labels[i].encode("latin-1")[:mrc.LABEL_BYTES] if i < len(labels) else b""
        new = _read_state(record)
        changes = {name: {"old": old[name], "new": new[name]} for name in old if old[name] != new[name]}
        if after_kind != before_kind:
            changes["kind"] = {"old": before_kind, "new": after_kind}
        if not dry_run and changes:
            os.pwrite(fd, record.tobytes(), 0)  # the header alone: data and extended header stay as they are
            os.fsync(fd)
    finally:
        os.close(fd)
    return {"path": str(path), "dry_run": dry_run, "changed": bool(changes) and not dry_run, "changes": changes}
