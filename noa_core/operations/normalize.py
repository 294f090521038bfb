"""noa normalize: values shifted and scaled to a mean and standard deviation, over the file or per
section (newstack -meansd, noa C++ normalize_per_batch); or, with --bg-radius, each image from its
background as relion_preprocess --norm does (dust, ramp, then the background's mean and sd)."""

from __future__ import annotations

from noa_core.operations.spec import READING, SIDE_FILES, Flag, Param, Real, Writes, implemented


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
            *READING, SIDE_FILES),
    plan=implemented("normalize", "plan"),
    chooses_format=True,
    warmup=warmup,
)
