"""noa info: describe image files from their headers (no data is read)."""

from __future__ import annotations

from pathlib import Path

from typing_extensions import TypedDict

from noa_core.operations.spec import READING, Operation, Options


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


def describe(path: Path, options: Options) -> dict:
    """A JSON-ready description of an image file (nothing but the header is read)."""
    import dataclasses

    from noa_core import dtypes

    probe = options.probe_input(path)
    meta = probe.metadata
    return {
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


def _values(values) -> str:
    if values is None:
        return "-"
    if isinstance(values, (list, tuple)):
        return ", ".join(_values(v) for v in values)
    if isinstance(values, float):
        return f"{values:.6g}"
    return str(values)


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
        ("pixel size (DHW)", _values(described["pixel_size"]) + f" {described.get('pixel_unit') or ''}".rstrip()),
        ("origin (DHW)", _values(described["origin"])),
        ("statistics", ", ".join(f"{k} {_values(v)}" for k, v in (described.get("statistics") or {}).items()) or "-"),
    ]
    lines = [f"{name:<18}{value}" for name, value in rows]
    for i, label in enumerate(described.get("labels") or []):
        lines.append(f"{'labels' if i == 0 else '':<18}{label}")
    for note in described.get("notices") or []:
        lines.append(f"{'note':<18}{note}")
    return "\n".join(lines)


OPERATION = Operation(
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
