"""noa header: change an MRC header in place (pixel size, origin, stack or volume, labels) without
rewriting the data (IMOD's alterheader, relion --force_header_angpix, e2proc --apix)."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from noa_core.operations.spec import PIXEL_SIZES, Edits, Flag, Param, PerAxis, Text, implemented


class Change(TypedDict):
    old: Any
    new: Any


class HeaderResult(TypedDict):
    path: str
    dry_run: bool
    changed: bool
    changes: dict[str, Change]


def _value(value: Any, unknown_zero: bool = False) -> str:
    if isinstance(value, list) and all(isinstance(v, float) for v in value):
        return ", ".join("unknown" if v == 0 and unknown_zero else f"{v:.6g}" for v in value)
    if isinstance(value, list):
        return " | ".join(map(str, value)) or "-"
    return str(value)


def as_text(result: dict) -> str:
    head = f"{result['path']}: " + ("would change (dry run)" if result["dry_run"] else
                                    "changed" if result["changed"] else "nothing changed")
    lines = [head]
    for name, change in result["changes"].items():
        if name == "labels":
            added = change["new"][len(change["old"]):] if change["new"][:len(change["old"])] == change["old"] \
                else change["new"]
            lines.extend(f"  label + {text}" for text in added)
            continue
        unit = " Å" if name in ("pixel_size", "origin") else ""
        zero = name == "pixel_size"  # a pixel size of 0 is unknown; an origin of 0 is 0
        lines.append(f"  {name.replace('_', ' ')}: {_value(change['old'], zero)} -> "
                     f"{_value(change['new'], zero)}{unit}")
    return "\n".join(lines)


OPERATION = Edits(
    name="header",
    summary="Change an MRC header in place (pixel size, origin, stack or volume, labels); the data are never "
            "rewritten.",
    details="Only the 1024 header bytes are rewritten (then synced to disk): a 20 GB map takes milliseconds, and "
            "the data and extended header bytes stay as they are. Per-axis values are D,H,W (Z,Y,X) in Å, or one "
            "value for every axis. --as-stack marks an image stack (ispg 0, mz 1), --as-volume a volume (ispg 1, "
            "mz = sections). A label saying what noa changed is appended. TIFF and compressed files are refused. "
            "--dry-run prints the change and writes nothing.",
    examples=("noa header map.mrc --pixel-size 1.06",
              "noa header tomo.rec --pixel-size 13.6,13.6,13.6 --origin 0,0,0 --dry-run",
              "noa header class_averages.mrc --as-stack --label 'classes from run 12'"),
    params=(Param("pixel_size", PIXEL_SIZES, "Pixel size in Å: one value for every axis, or D,H,W."),
            Param("origin", PerAxis(), "Origin in Å: one value for every axis, or D,H,W."),
            Param("as_stack", Flag(), "Mark the file as an image stack (ispg 0) or as a volume (ispg 1).",
                  flags=("--as-stack/--as-volume",)),
            Param("label", Text(1, 80), "Append this label (printable ASCII, at most 80 characters).")),
    needs_one_of=("pixel_size", "origin", "as_stack", "label"),
    edit=implemented("header", "edit"),
    text=as_text,
    result=HeaderResult,
)
