"""noa normalize: values shifted and scaled to a mean and standard deviation, over the file or per
section (newstack -meansd, noa C++ normalize_per_batch); or, with --bg-radius, each image from its
background as relion_preprocess --norm does (dust, ramp, then the background's mean and sd)."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import READING, Flag, Inputs, Options, Param, Real, Writes


def plan(inputs: Inputs, options: Options):
    from noa_core.images import intensity
    from noa_core.images import statistics
    from noa_core.array import asarray
    from noa_core.compute.conversion import convert_into
    from noa_core.errors import ShapeError
    from noa_core.operations.plan import region_plan

    array, meta = inputs.open(inputs[0])
    intensity.check_real_input(array.dtype, str(inputs[0]))
    intensity.check_normal(options.mean, options.std)
    intensity.check_background_options(options.bg_radius, options.ramp, options.white_dust, options.black_dust)
    if array.size == 0:
        raise ShapeError(f"{inputs[0]}: the array of shape {array.shape} is empty")
    if options.bg_radius is not None:
        return background_plan(inputs, options, array, meta)
    b, d, h, w = array.shape

    def measure() -> list[tuple[float, float]]:
        found = statistics.section_statistics(array) if options.per_section else [statistics.whole_statistics(array)]
        for stats in found:
            statistics.check_finite(stats, str(inputs[0]))
        return [(float(s.moments.mean), s.result().rms) for s in found]

    moments = statistics.remembered(inputs[0], ("mean-std", array.shape, options.per_section), measure)
    out_dtype = intensity.real_output_dtype(array.dtype)
    to = (options.mean, options.std)

    def reads(key):
        def compute(blocks, out) -> None:
            values = blocks[0].numpy()
            if not options.per_section:
                result = intensity.normalized(values, *moments[0], *to)
            else:  # each section of the tile with its own mean and standard deviation
                result = values.astype("float64")
                for i, bi in enumerate(range(*key[0].indices(b))):
                    for j, di in enumerate(range(*key[1].indices(d))):
                        result[i, j] = intensity.normalized(values[i, j], *moments[bi * d + di], *to)
            convert_into(asarray(result), out, mode="checked")

        return [array[key]], compute

    return region_plan(options, inputs=inputs, read=[array], meta=meta, shape=array.shape, reads=reads,
                       dtype=out_dtype, read_factor=3.0)


def background_plan(inputs: list[Path], options: Options, array, meta):
    """RELION's particle normalisation: whole images (volumes) per tile, each from its own background."""
    import numpy as np

    from noa_core.images import intensity
    from noa_core.errors import ValueRangeError
    from noa_core.operations.plan import whole_image_plan

    images = intensity.particle_images(array.shape, options.per_section)
    bg = intensity.background(images[1:], options.bg_radius, options.ramp)
    per_entry = array.shape[1] if len(images) == 3 else 1  # images in one batch entry

    def normalised(block, key):
        values = block.numpy()
        if not np.isfinite(values).all():
            raise ValueRangeError(f"{inputs[0]}: the data hold NaN or infinite values; this needs finite values")
        first = key[0].indices(array.shape[0])[0] * per_entry  # the index of the tile's first image
        t = intensity.background_normalized(values.reshape(-1, *images[1:]), bg, options.white_dust,
                                         options.black_dust, first, options.mean, options.std)
        return t.reshape(values.shape)

    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, images=normalised,
                            working=2.0, dtype=intensity.real_output_dtype(array.dtype))


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [] if dtype.startswith("complex") else [(dtype, {"per_section": True})]


OPERATION = Writes(
    name="normalize",
    summary="Shift and scale values to a mean and standard deviation, over the file or per section; or each "
            "particle from its background, as RELION does.",
    details="Without --bg-radius, a statistics pass reads the data first (mean and standard deviation, NumPy's: "
            "over N); a section or file of constant values becomes the mean. The output is float32 (float64 data "
            "stay float64). Data holding NaN or infinite values are refused. With --bg-radius R, every image of a "
            "stack (every volume; every section with --per-section) is normalised on its own as relion_preprocess "
            "--norm --bg_radius R does (src/image.cpp normalise): its background is the pixels with x² + y² (+ "
            "z²) > R², counted from the centre N//2 of each axis (2 x R may not exceed the box). In RELION's "
            "order: (1) --white-dust / --black-dust S: pixels more than S background standard deviations above / "
            "below the background mean are replaced by normal random values with that mean and sd (RELION draws "
            "them too; noa seeds each image by its index, so a run is repeatable); (2) the ramp: the "
            "least-squares plane a x + b y + c through the background pixels is subtracted from the whole image "
            "(2-d images only, as RELION; --no-ramp subtracts the background mean alone); (3) (value - mean) / sd "
            "x --std + --mean with the background's mean and sd (over N) measured again. An image whose "
            "background sd is below 1e-10 is left unscaled, as RELION leaves it. RELION's --bg_radius is an "
            "integer; noa takes any radius >= 0.",
    examples=("noa normalize particles.mrcs particles_norm.mrcs --per-section",
              "noa normalize map.mrc map_z.mrc --mean 0 --std 1",
              "noa normalize particles.mrcs particles_norm.mrcs --bg-radius 60 --white-dust 5 --black-dust 5"),
    params=(Param("per_section", Flag(), "Normalise each (height, width) section on its own (with --bg-radius, "
                  "images of a stack always are; this makes each section of a volume a 2-d image).", default=False),
            Param("mean", Real(), "Mean of the output (of the background with --bg-radius).", default=0.0),
            Param("std", Real(0, None), "Standard deviation of the output (of the background with --bg-radius; "
                  "positive).", default=1.0),
            Param("bg_radius", Real(0, None), "Normalise each image from its background, the pixels farther "
                  "than this many pixels from the centre N//2, as relion_preprocess --norm --bg_radius."),
            Param("ramp", Flag(), "With --bg-radius: subtract the least-squares plane through the background "
                  "first (RELION's default; --no-ramp is RELION's --no_ramp and is needed for volumes).",
                  default=True, flags=("--ramp/--no-ramp",)),
            Param("white_dust", Real(0, None), "With --bg-radius: replace pixels more than this many background "
                  "sd above the background mean by noise, as RELION's --white_dust."),
            Param("black_dust", Real(0, None), "With --bg-radius: replace pixels more than this many background "
                  "sd below the background mean by noise, as RELION's --black_dust."),
            *READING),
    plan=plan,
    chooses_format=True,
    warmup=warmup,
)
