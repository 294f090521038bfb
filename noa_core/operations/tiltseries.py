"""noa tiltseries: a tilt-series stack built from SerialEM's mdoc and the stack it describes (or the sums of the
frames of each tilt), with IMOD's angle
files, an mdoc in the stack's order and RELION 5's tilt-series STAR beside it."""

from __future__ import annotations

from noa_core.operations.spec import PROJECT_DIR, Choice, Param, Real, Text, WritesDataSet, implemented


def stack_output(values) -> tuple[str, str]:
    """What the output is, whatever the options: an MRC stack, IMOD's .st (named IN.st with --out-dir)."""
    return ".st", "application/octet-stream"


OPERATION = WritesDataSet(
    name="tiltseries",
    summary="Build a tilt series from SerialEM's mdoc: the stack sorted by angle, tilts excluded in one place, and "
            "beside it .rawtlt/.tlt, an mdoc in the stack's order and RELION 5's tilt-series STAR with each tilt's "
            "pre-exposure.",
    details="INPUT is SerialEM's mdoc of a tilt series; its images are the stack it describes, beside it (TS.mrc.mdoc "
            "-> TS.mrc; else its ImageFile, TS.mrc or TS.st), section k being [ZValue = k]; with --images FOLDER, "
            "the motion-corrected sums of each tilt's frames, one 2-d MRC or TIFF image each, named after the "
            "frames file of its section's SubFramePath (X:\\frames\\TS_01_001_-0.0.tif -> "
            "FOLDER/TS_01_001_-0.0.mrc, .tif or .tiff, as MotionCor2, RELION and Warp name them). Sections may "
            "come in any order (PACEtomo's sorted mdocs); a frame tilt series' [FrameSet = k] sections are left "
            "aside; a montage's mdoc is refused. OUT (an MRC stack, e.g. "
            "TS.st) holds the tilts sorted by angle (--order acquisition: as taken, by DateTime, else ZValue), "
            "copied section by section, its header with the mdoc's pixel size and a 'Tilt axis angle' label. "
            "Beside it, same stem: TS.rawtlt and TS.tlt (the nominal angles in stack order), TS.st.mdoc (the "
            "mdoc, sections renumbered as the stack's) and TS.star (RELION 5: rlnMicrographName N@TS.st, "
            "rlnTomoNominalStageTiltAngle, rlnTomoNominalTiltAxisAngle, rlnMicrographPreExposure). The "
            "pre-exposure is the dose received before each tilt: --dose-per-tilt times the tilts taken before it, "
            "else the mdoc's PriorRecordDose, else its ExposureDose summed in acquisition order. --exclude (IMOD's "
            "view numbers, from 1, in the mdoc's ZValue order), --max-angle and --exclude-dark leave tilts out of "
            "every file together; each is reported. Every file is written, or none.",
    examples=("noa tiltseries TS_01.mrc.mdoc -o TS_01.st",
              "noa tiltseries TS_01.mdoc --images MotionCorr -o TS_01.st",
              "noa tiltseries TS_01.mrc.mdoc --exclude 1-3,40-41 --max-angle 60 --exclude-dark 0.3 -o TS_01.st",
              "noa tiltseries TS_01.mrc.mdoc --order acquisition --dose-per-tilt 3 -o TS_01.st"),
    params=(Param("order", Choice(("angle", "acquisition")), "The stack's order: by tilt angle, or as the tilts "
                  "were taken (DateTime, else ZValue).", default="angle"),
            Param("exclude", Text(1, 10_000), "Views to leave out, as IMOD numbers them (from 1, in the mdoc's "
                  "ZValue order): e.g. 1-9,28-41."),
            Param("max_angle", Real(0.0, 90.0), "Leave out tilts beyond this angle either way, in degrees."),
            Param("exclude_dark", Real(0.0, 1.0), "Leave out tilts whose mean is below this fraction of the median "
                  "of the means of the tilts --exclude and --max-angle keep (a blank or shuttered tilt), e.g. 0.3."),
            Param("dose_per_tilt", Real(0.0), "The dose of each tilt in e/Å², instead of the mdoc's: each tilt's "
                  "pre-exposure is this times the tilts taken before it."),
            Param("tilt_axis", Real(-360.0, 360.0), "The tilt axis angle in degrees, instead of the mdoc's "
                  "(a title's 'Tilt axis angle', or Tomography 5's 'TiltAxisAngle', else RotationAngle - 90)."),
            Param("images", Text(1, 4096), "The folder of the tilts' motion-corrected sums (one MRC or TIFF image "
                  "per tilt, named after its frames: SubFramePath's name, its extension .mrc, .tif or .tiff), "
                  "instead of the stack the mdoc describes; relative to the project folder (over HTTP, beneath the "
                  "data root)."),
            PROJECT_DIR),
    max_inputs=1_000,  # the CLI's INPUTS... -o OUT form; each tilt series is its own call (--out-dir)
    text_output=stack_output,
    write=implemented("tiltseries", "write"),
)
