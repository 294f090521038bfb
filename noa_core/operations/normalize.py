"""noa normalize: values shifted and scaled to a mean and standard deviation, over the file or per
section (newstack -meansd, noa C++ normalize_per_batch)."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import READING, Flag, Operation, Options, Param, Real


def plan(inputs: list[Path], options: Options):
    from noa_core import stacks, statistics
    from noa_core.array import asarray
    from noa_core.elementwise import convert_into
    from noa_core.errors import ShapeError
    from noa_core.operations.plan import make_plan

    array, meta = options.open_input(inputs[0])
    stacks.check_real_input(array.dtype, str(inputs[0]))
    stacks.check_normal(options.mean, options.std)
    if array.size == 0:
        raise ShapeError(f"{inputs[0]}: the array of shape {array.shape} is empty")
    b, d, h, w = array.shape

    def measure() -> list[tuple[float, float]]:
        found = statistics.section_statistics(array) if options.per_section else [statistics.whole_statistics(array)]
        for stats in found:
            statistics.check_finite(stats, str(inputs[0]))
        return [(float(s.moments.mean), s.result().rms) for s in found]

    moments = statistics.remembered(inputs[0], ("mean-std", array.shape, options.per_section), measure)
    out_dtype = stacks.real_output_dtype(array.dtype)
    to = (options.mean, options.std)

    def reads(key):
        def compute(blocks, out) -> None:
            values = blocks[0].numpy()
            if not options.per_section:
                result = stacks.normalized(values, *moments[0], *to)
            else:  # each section of the tile with its own mean and standard deviation
                result = values.astype("float64")
                for i, bi in enumerate(range(*key[0].indices(b))):
                    for j, di in enumerate(range(*key[1].indices(d))):
                        result[i, j] = stacks.normalized(values[i, j], *moments[bi * d + di], *to)
            convert_into(asarray(result), out, mode="checked")

        return [array[key]], compute

    where = "per section" if options.per_section else "over the file"
    label = f"noa normalize {where}: mean {options.mean:g}, std {options.std:g}"
    return make_plan(inputs, [array], [array], None, meta, label, out_dtype, shape=array.shape, reads=reads,
                     read_factor=3.0)


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [] if dtype.startswith("complex") else [(dtype, {"per_section": True})]


OPERATION = Operation(
    name="normalize",
    summary="Shift and scale values to a mean and standard deviation, over the file or per section.",
    details="A statistics pass reads the data first (mean and standard deviation, NumPy's: over N). The output "
            "is float32 (float64 data stay float64). A section or file of constant values becomes the mean. "
            "Data holding NaN or infinite values are refused.",
    examples=("noa normalize particles.mrcs particles_norm.mrcs --per-section",
              "noa normalize map.mrc map_z.mrc --mean 0 --std 1"),
    params=(Param("per_section", Flag(), "Normalise each (height, width) section on its own.", default=False),
            Param("mean", Real(), "Mean of the output.", default=0.0),
            Param("std", Real(0, None), "Standard deviation of the output (positive).", default=1.0),
            *READING),
    plan=plan,
    chooses_format=True,
    warmup=warmup,
)
