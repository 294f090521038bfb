"""noa stats: minimum, maximum, mean and standard deviation of the data (not the header), over the whole file and
optionally per batch: in one pass of tiles on the CPU (per-tile moments merged), or reduced on the device."""

from __future__ import annotations

from noa_core import compute  # a lazy face: its reductions (numba kernels) load only on a device
from noa_core.compute.moments import RunningStatistics
from noa_core.errors import DTypeError, ShapeError
from noa_core.io.stream import batch_statistics
from noa_core.operations.spec import Inputs, Options
from noa_core.operations.stats import STATISTICS


def report(inputs: Inputs, options: Options) -> dict:
    """Min, max, mean and std of the data, over the whole file and optionally per batch.

    On the CPU: one pass over the file in tiles (bounded memory; Chan's merge of per-tile moments).
    On CUDA: the array is moved to the device and reduced there.
    """
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
    batches = batch_statistics(array)
    return _row(RunningStatistics.merged(batches).result()), [_row(stats.result()) for stats in batches]


def _on_device(array, device: str, per_batch: bool) -> tuple[dict, list[dict]]:
    array = array.to(device)

    def table(axes) -> dict:
        return {name: getattr(compute.reduction, name)(array, axes).to("cpu").numpy().reshape(-1)
                for name in STATISTICS}

    whole = {name: float(values[0]) for name, values in table(None).items()}
    if not per_batch:
        return whole, []
    rows = table((1, 2, 3))
    return whole, [{name: float(values[b]) for name, values in rows.items()} for b in range(array.shape[0])]
