"""noa info: describe image files from their headers (no data is read)."""

from __future__ import annotations

from typing_extensions import TypedDict

from noa_core.operations.spec import READING, Reports, implemented


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
    report=implemented("info", "report"),
    text=as_text,
    result=InfoResult,
    reads_data=False,
)
