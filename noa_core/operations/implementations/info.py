"""noa info: what an image file's header says, as a JSON-ready description (no data is read)."""

from __future__ import annotations

import dataclasses

from noa_core.array import dtypes
from noa_core.io.mrc import section_records
from noa_core.operations.spec import Inputs, Options


def report(inputs: Inputs, options: Options) -> dict:
    """A JSON-ready description of an image file (nothing but the header is read)."""
    path = inputs[0]
    probe = inputs.probe(path)
    meta = probe.metadata
    described = {
        "path": str(path),
        "format": meta.format,
        "dtype": str(dtypes.base_of(probe.dtype)),
        "mode": meta.mrc.mode if meta.mrc is not None else None,  # MRC's element type code
        "shape": list(probe.shape),
        "strides": list(probe.strides),
        "order": probe.order,
        "kind": probe.kind,
        "ndim": probe.ndim,
        "pixel_size": list(meta.pixel_size),
        "pixel_unit": meta.unit,
        "origin": list(meta.origin),
        "statistics": dataclasses.asdict(meta.statistics) if meta.statistics else None,
        "labels": list(meta.labels),
        "axes": meta.axes,
        "notices": list(meta.notices),
    }
    if meta.mrc is not None:
        described.update(_extended_header(meta.mrc, probe.shape[0] * probe.shape[1]))
    return described


def _extended_header(fields, sections: int) -> dict:
    """MRC's extended header: its type, size and, for FEI1/FEI2, each section's pixel size (Y, X, Å) and tilt."""
    return {"exttyp": fields.exttyp, "extended_header_bytes": len(fields.extended_header or b""),
            "sections": section_records(fields, sections)}
