"""noa stats: minimum, maximum, mean and standard deviation computed from the data (not the header)."""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from noa_core.operations.spec import DEVICE, READING, Flag, Param, Reports, implemented

JsonFloat = float | Literal["NaN", "Infinity", "-Infinity"]  # JSON has no non-finite numbers


class BatchStats(TypedDict):
    batch: int
    min: JsonFloat
    max: JsonFloat
    mean: JsonFloat
    std: JsonFloat


class StatsResult(TypedDict):
    path: str
    shape: list[int]
    min: JsonFloat
    max: JsonFloat
    mean: JsonFloat
    std: JsonFloat
    per_batch: NotRequired[list[BatchStats] | None]


STATISTICS = ("min", "max", "mean", "std")


def as_text(result: dict) -> str:
    lines = [f"file {result['path']}", f"{'batch':>6} " + " ".join(f"{name:>14}" for name in STATISTICS)]
    for row in result.get("per_batch") or [dict(result, batch="all")]:
        lines.append(f"{row['batch']!s:>6} " + " ".join(f"{row[name]:>14.6g}" for name in STATISTICS))
    return "\n".join(lines)


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    # complex data have no order, so no minimum or maximum
    return [] if dtype.startswith("complex") else [(dtype, {"per_batch": True})]


OPERATION = Reports(
    name="stats",
    summary="Min, max, mean and standard deviation computed from the data (not the header).",
    examples=("noa stats movie.mrc --per-batch",),
    params=(Param("per_batch", Flag(), "Also give the statistics of each batch index (one line per image).",
                  default=False), *READING, DEVICE),
    report=implemented("stats", "report"),
    text=as_text,
    result=StatsResult,
    warmup=warmup,
)
