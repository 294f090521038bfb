"""noa transform: rotate, shift and scale every image of a stack (or volume), or apply given matrices."""

from __future__ import annotations

from noa_core.operations.spec import DEVICE, READING, Choice, InputFile, Param, Real, Reals, Writes, implemented


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    # The kernel is compiled per float type; other inputs are converted to float32 first.
    if dtype not in ("float32", "float64"):
        return []
    euler = (10.0, 20.0, 30.0) if shape[1] > 1 else None
    cases = [{"interp": i, **({"euler": euler} if euler else {"rotate": 10.0})} for i in ("linear", "cubic", "nearest")]
    return [(dtype, case) for case in cases]


OPERATION = Writes(
    name="transform",
    summary="Rotate, shift and scale every image (volumes: RELION's ZYZ Euler angles) about its centre, or "
            "apply given matrices.",
    details="The centre is N//2 of each axis (RELION's origin); the content is scaled, rotated and then shifted. "
            "--rotate turns images counter-clockwise with x right and y up. --euler ROT,TILT,PSI means what it means "
            "in RELION: the map is rotated by RELION's Euler_angles2matrix(rot, tilt, psi) A about the centre (the "
            "output voxel at r, x,y,z from the centre, takes the input's value at A^T r), which is the map "
            "relion_project --3d_rot --rot ROT --tilt TILT --psi PSI writes and the map whose projection along z is "
            "relion_project's image for those angles. In active right-handed rotations A turns the map by -ROT about "
            "z, then -TILT about y, then -PSI about z. --shift moves the content by +DZ,DY,DX; relion_project's "
            "--xoff X --yoff Y --zoff Z is --shift -Z,-Y,-X. --matrices FILE gives one inverse matrix per batch "
            "entry (or one for all): the output pixel (y, x) samples the input at M @ (y, x, 1), as "
            "scipy.ndimage.affine_transform; a text file "
            "of rows of whitespace-separated numbers, 2x3 or 3x3 per image (3x4 or 4x4 per volume), or a .npy of "
            "shape (n, rows, cols). Over HTTP give matrix_values, a flat list of 2x3 (3x4) matrices. Pixel size and "
            "origin are kept; the output is float32. noa rotates in real space: content leaving the box is gone "
            "(--border), and RELION's map agrees (correlation >= 0.999) where the content lies inside the box's "
            "inscribed sphere and the box is even. --like relion computes what relion_project --3d_rot writes "
            "(RELION 3.1.3's projector transcribed, within float32 rounding of its output) for --euler and --shift "
            "of a cube: the map interpolated trilinearly in its transform padded twice, so content rotated or "
            "shifted out of the box comes back in at the opposite face, frequencies beyond the Nyquist sphere are "
            "dropped, and an odd box comes out one voxel further along every axis (RELION's origin N//2 + 1). "
            "It holds about 40 times the map's float32 size in memory.",
    examples=("noa transform stack.mrcs rotated.mrcs --rotate 30 --shift 2.5,-4",
              "noa transform map.mrc turned.mrc --euler 30,60,90 --interp cubic",
              "noa transform tilts.st aligned.st --matrices xf.txt"),
    params=(Param("rotate", Real(-36000.0, 36000.0), "Rotate images by DEG degrees, counter-clockwise."),
            Param("euler", Reals(3, 3, -36000.0, 36000.0), "Rotate volumes by RELION's ZYZ Euler angles ROT,TILT,PSI "
                  "(degrees) about the centre N//2, as relion_project --3d_rot --rot --tilt --psi does."),
            Param("shift", Reals(2, 3, -1e6, 1e6), "Shift the content by DY,DX pixels (DZ,DY,DX for volumes)."),
            Param("scale", Real(1e-3, 1e3), "Magnify the content by S."),
            Param("matrices", InputFile(), "File of inverse matrices, one per image (or one for all): text rows "
                  "(2x3/3x3 per image, 3x4/4x4 per volume) or .npy.", doors=frozenset({"cli"})),
            Param("matrix_values", Reals(6, 6 * 100_000), "Inverse matrices as one flat list, row by row: 2x3 per "
                  "image, 3x4 per volume; 1 or one per batch entry.", doors=frozenset({"http"})),
            Param("interp", Choice(("linear", "cubic", "nearest")),
                  "Interpolation: linear, cubic (B-spline) or nearest.", default="linear"),
            Param("border", Choice(("zero", "clamp", "mirror")), "Values outside the input: zero, clamp (edge) or "
                  "mirror.", default="zero"),
            Param("like", Choice(("noa", "relion")), "noa: real-space interpolation about N//2; relion: what "
                  "relion_project --3d_rot writes for --euler and --shift of a cube (Fourier space: wraps at the "
                  "faces, odd boxes one voxel further).", default="noa"),
            *READING, DEVICE),
    plan=implemented("transform", "plan"),
    warmup=warmup,
)
