"""noa info: describe image files from their headers (no data is read)."""

from __future__ import annotations


from typing_extensions import TypedDict

from noa_core.operations.spec import READING, Inputs, Options, Reports


class InfoResult(TypedDict, total=False):
    """What ``info`` reports; more keys (pixel size, origin, labels, ...) may follow."""

    path: str
    format: str
    dtype: str
    shape: list[int]
    strides: list[int]
    order: str
    kind: str
    ndim: int
    notices: list[str]


def describe(inputs: Inputs, options: Options) -> dict:
    """A JSON-ready description of an image file (nothing but the header is read)."""
    import dataclasses

    from noa_core.array import dtypes

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
    from noa_core.io.mrc import section_records

    return {"exttyp": fields.exttyp, "extended_header_bytes": len(fields.extended_header or b""),
            "sections": section_records(fields, sections)}


def _values(values) -> str:
    if values is None:
        return "-"
    if isinstance(values, (list, tuple)):
        return ", ".join(_values(v) for v in values)
    if isinstance(values, float):
        return f"{values:.6g}"
    return str(values)


def _pixel_size(described: dict) -> str:
    """Each axis's pixel size, 0 shown as 'unknown' (JSON keeps 0)."""
    sizes = described["pixel_size"]
    if not any(sizes):
        return "unknown"
    return ", ".join(_values(v) if v else "unknown" for v in sizes) + f" {described.get('pixel_unit') or ''}".rstrip()


def as_text(described: dict) -> str:
    """Human-readable lines for a description."""
    mode = described.get("mode")
    rows = [
        ("file", described["path"]),
        ("format", described["format"]),
        ("dtype", described["dtype"] + (f" (MRC mode {mode})" if mode is not None else "")),
        ("shape (BDHW)", _values(described["shape"])),
        ("strides", _values(described["strides"]) + " (elements, as stored)"),
        ("order", described["order"]),
        ("kind", described["kind"]),
        ("pixel size (DHW)", _pixel_size(described)),
        ("origin (DHW)", _values(described["origin"])),
        ("statistics", ", ".join(f"{k} {_values(v)}" for k, v in (described.get("statistics") or {}).items()) or "-"),
    ]
    if described.get("exttyp") or described.get("extended_header_bytes"):
        rows.append(("extended header", f"{described['exttyp'] or 'no type'}, {described['extended_header_bytes']} "
                                        "bytes"))
    lines = [f"{name:<18}{value}" for name, value in rows]
    for i, label in enumerate(described.get("labels") or []):
        lines.append(f"{'labels' if i == 0 else '':<18}{label}")
    for note in described.get("notices") or []:
        lines.append(f"{'note':<18}{note}")
    return "\n".join(lines)


OPERATION = Reports(
    name="info",
    summary="Describe image files: format, dtype, BDHW shape and strides, order, kind, pixel size, origin, "
            "statistics and labels.",
    examples=("noa info emd_3197.map --json",),
    params=READING,
    report=describe,
    text=as_text,
    result=InfoResult,
    reads_data=False,
)
