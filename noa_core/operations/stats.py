"""noa stats: minimum, maximum, mean and standard deviation computed from the data (not the header)."""

from __future__ import annotations

from typing import Literal

from typing_extensions import NotRequired, TypedDict

from noa_core.operations.spec import DEVICE, READING, Flag, Inputs, Options, Param, Reports

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


def compute(inputs: Inputs, options: Options) -> dict:
    """Min, max, mean and std of the data, over the whole file and optionally per batch.

    On the CPU: one pass over the file in tiles (bounded memory; Chan's merge of per-tile moments).
    On CUDA: the array is moved to the device and reduced there.
    """
    from noa_core.errors import DTypeError, ShapeError

    path = inputs[0]
    array, _ = inputs.open(path, tiles=options.device == "cpu")  # the CPU reads it by tiles alone
    if array.size == 0:
        raise ShapeError(f"{path}: the array of shape {array.shape} is empty; it has no statistics")
    if array.dtype.kind == "c":
        raise DTypeError(f"{path}: min and max are not defined for complex data ({array.dtype})")
    measure = _on_cpu if options.device == "cpu" else _on_device
    whole, per_batch = measure(array, options.device, options.per_batch)
    result = {"path": str(path), "shape": list(array.shape), **whole}
    if options.per_batch:
        result["per_batch"] = [{"batch": b, **row} for b, row in enumerate(per_batch)]
    return result


def _row(found) -> dict:
    """A row of the result from :class:`noa_core.io.HeaderStatistics` (the RMS deviation is NumPy's std)."""
    return {"min": found.min, "max": found.max, "mean": found.mean, "std": found.rms}


def _on_cpu(array, device: str, per_batch: bool) -> tuple[dict, list[dict]]:
    from noa_core.io.stream import batch_statistics
    from noa_core.compute.moments import RunningStatistics

    batches = batch_statistics(array)
    total = RunningStatistics()
    for stats in batches:
        total.merge(stats)
    return _row(total.result()), [_row(stats.result()) for stats in batches]


def _on_device(array, device: str, per_batch: bool) -> tuple[dict, list[dict]]:
    from noa_core.compute import reduction

    array = array.to(device)

    def table(axes) -> dict:
        return {name: getattr(reduction, name)(array, axes).to("cpu").numpy().reshape(-1) for name in STATISTICS}

    whole = {name: float(values[0]) for name, values in table(None).items()}
    if not per_batch:
        return whole, []
    rows = table((1, 2, 3))
    return whole, [{name: float(values[b]) for name, values in rows.items()} for b in range(array.shape[0])]


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
    params=(Param("per_batch", Flag(), "Also give the statistics of each batch index (one line per image).", default=False), *READING, DEVICE),
    report=compute,
    text=as_text,
    result=StatsResult,
    warmup=warmup,
)
