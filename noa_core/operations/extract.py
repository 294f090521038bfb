"""noa extract: particles boxed out of micrographs at their coordinates, as relion_preprocess --extract does."""

from __future__ import annotations

from noa_core.operations.spec import (
    PROJECT_DIR,
    REQUIRED,
    Choice,
    Flag,
    InputFile,
    Integer,
    Integers,
    Param,
    Real,
    Text,
    WritesDataSet,
    implemented,
)


def star_output(values) -> tuple[str, str]:
    """What the output is, whatever the options: a particles STAR (named IN.star with --out-dir)."""
    return ".star", "text/plain"


OPERATION = WritesDataSet(
    name="extract",
    summary="Box particles out of micrographs at their coordinates, as relion_preprocess --extract: stacks in "
            "RELION's Particles/ layout and a particles STAR naming them.",
    details="INPUTS are micrographs (MRC, TIFF) or micrographs STARs (rlnMicrographName, with the optics table's "
            "rlnMicrographPixelSize). --coords names one file of coordinates: a RELION coordinate STAR, EMAN .box or "
            "x y text for a single micrograph; a particles STAR (rlnMicrographName, rlnCoordinateX/Y: re-extraction, "
            "every other column kept) or a cryoSPARC .cs of picks for many, matched by micrograph name; or "
            "--coord-suffix finds RELION's per-micrograph files beside each micrograph (mic.mrc -> "
            "mic_autopick.star). Each box is centred on the coordinate truncated toward zero (RELION's integer "
            "position), N//2 being the centre; pixels beyond the micrograph repeat its edge pixels as RELION's do "
            "(--edge zero or mean fill them instead; --edge drop leaves such particles out, with a notice). Then, as "
            "RELION and in its order: --scale (Fourier rescale to a new box), --norm (background ring beyond "
            "--bg-radius: ramp, mean 0, sd 1), --invert-contrast. OUT (.star) names the stacks, written beside it in "
            "Particles/<micrograph folder>/<micrograph>.mrcs (or --one-stack: OUT.mrcs), relative to the project "
            "folder; every file is written, or none. With --out-dir each micrograph gets its own STAR. --also-scale "
            "writes the same particles at other sizes from the same read: OUT_<size>px.star and its stacks.",
    examples=("noa extract Micrographs/*.mrc --coord-suffix _autopick.star --box 256 -o particles.star",
              "noa extract mics.star --coords picks.cs --box 320 --scale 80 --norm --bg-radius 30 -o bin4.star",
              "noa extract mics.star --coords run_data.star --recentre --box 256 -o reextracted.star"),
    params=(Param("box", Integer(2, 16384), "Box size in pixels (RELION's --extract_size).", default=REQUIRED),
            Param("coords", InputFile(), "The coordinates: a RELION coordinate or particles STAR, RELION's list of "
                  "coordinate files (autopick.star), a cryoSPARC .cs, an EMAN .box or x y text. Over HTTP: a path "
                  "under the data root (and so is every file a list names)."),
            Param("coord_suffix", Text(1, 255), "Per-micrograph coordinate files beside each micrograph: its name "
                  "without extension plus this suffix (RELION's --coord_suffix, e.g. _autopick.star)."),
            Param("edge", Choice(("repeat", "drop", "zero", "mean")), "Pixels beyond the micrograph: repeat its edge "
                  "pixels (RELION), drop such particles, or fill with zero or the micrograph's mean.",
                  default="repeat"),
            Param("scale", Integer(2, 16384), "Rescale the boxes to this size in pixels in Fourier space "
                  "(RELION's --scale)."),
            Param("also_scale", Integers(1, 8, 2, 16384), "More data sets of the same particles from the same read "
                  "of each micrograph, each rescaled in Fourier space to one of these sizes in pixels (e.g. 80,160): "
                  "OUT_<size>px.star naming stacks in Particles_<size>px/ (with --one-stack OUT_<size>px.mrcs), "
                  "normalised with the same background circle in their pixels."),
            Param("norm", Flag(), "Normalise each box to a background of mean 0 and sd 1, after removing a ramp "
                  "(RELION's --norm).", default=False),
            Param("bg_radius", Real(0.0, 16384.0), "Radius in pixels (of the final box) of the background ring for "
                  "--norm (RELION's --bg_radius)."),
            Param("white_dust", Real(0.0), "With --norm: replace pixels this many sds above the background "
                  "(RELION's --white_dust)."),
            Param("black_dust", Real(0.0), "With --norm: replace pixels this many sds below the background "
                  "(RELION's --black_dust)."),
            Param("invert_contrast", Flag(), "Negate the values (RELION's --invert_contrast).", default=False),
            Param("float16", Flag(), "Store the stacks as float16 (MRC mode 12) instead of float32.", default=False),
            Param("one_stack", Flag(), "Write every particle into one stack beside OUT (OUT.mrcs).", default=False),
            Param("recentre", Flag(), "Re-extraction: move each coordinate by its rlnOriginX/YAngst, rounded, keeping "
                  "the remainder (RELION's --recenter).", default=False),
            PROJECT_DIR),
    max_inputs=1_000_000,
    text_output=star_output,
    write=implemented("extract", "write"),
    in_parts=True,  # a cluster extracts the micrographs in parallel tasks (noa_core.run.cluster)
)
