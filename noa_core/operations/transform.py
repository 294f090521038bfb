"""noa transform: rotate, shift and scale every image of a stack (or volume), or apply given matrices."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import DEVICE, READING, Choice, InputFile, Inputs, Options, Param, Real, Reals, Writes

GEOMETRY = ("rotate", "shift", "scale", "euler")
# Output-sized (float32) buffers like relion holds: the map padded twice in float64 (16) and its half transform in
# complex128 (16) at once, then the rotated transform and its inverse (38 measured at 64^3 with tracemalloc)
RELION_WORKING = 40.0


def matrices_for(array, options: Options, path: Path):
    """The inverse matrices ``(n, ndim, ndim + 1)`` the options describe, checked against the input's kind
    and batch."""
    import numpy as np

    from noa_core.geometry import transforms
    from noa_core.errors import ParameterError, ShapeError

    volume = array.shape[1] > 1
    ndim = 3 if volume else 2
    given = [name for name in GEOMETRY if options.get(name) is not None]
    explicit = [name for name in ("matrices", "matrix_values") if options.get(name) is not None]
    if explicit and given:
        raise ParameterError(f"give either matrices or {', '.join(given)}, not both", explicit[0])
    if len(explicit) > 1:
        raise ParameterError("give the matrices once: a file or a list", "matrices")
    if not explicit and not given:
        raise ParameterError("give rotate (images), euler (volumes), shift, scale or matrices", "rotate")
    if volume and options.get("rotate") is not None:
        raise ShapeError(f"{path}: the input of shape {array.shape} is a volume; rotate turns images: "
                         "give euler ROT,TILT,PSI (RELION's ZYZ angles, degrees)")
    if not volume and options.get("euler") is not None:
        raise ShapeError(f"{path}: the input of shape {array.shape} is a stack of images; euler turns volumes: "
                         "give rotate DEG")
    shift = options.get("shift")
    if shift is not None and len(shift) != ndim:
        raise ParameterError(f"{len(shift)} values for the {'volume' if volume else 'images'} of shape {array.shape}; "
                             f"give {'DZ,DY,DX' if volume else 'DY,DX'}", "shift")
    if options.get("matrices") is not None:
        m = transforms.read_matrices(options.matrices, ndim, array.shape[0])
    elif options.get("matrix_values") is not None:
        flat = np.asarray(options.matrix_values, np.float64)
        size = ndim * (ndim + 1)
        if flat.size % size:
            raise ParameterError(f"{flat.size} numbers do not make whole {ndim}x{ndim + 1} matrices "
                                 f"(rows of the {'volume' if volume else 'images'} of shape {array.shape})",
                                 "matrix_values")
        m = transforms.as_matrices(flat.reshape(-1, ndim, ndim + 1), ndim)
    else:
        scale = options.get("scale") or 1.0
        shift = shift or (0.0,) * ndim
        if volume:
            m = transforms.affine_3d(array.shape, euler=options.get("euler") or (0.0, 0.0, 0.0), shift=shift, scale=scale)
        else:
            m = transforms.affine_2d(array.shape, rotate=options.get("rotate") or 0.0, shift=shift, scale=scale)
        m = transforms.as_matrices(m, ndim)
    batch = array.shape[0]
    if m.shape[0] not in (1, batch):
        where = options.get("matrices") or "the list"
        raise ParameterError(f"{where}: {m.shape[0]} matrices for the {batch} "
                             f"{'volumes' if volume else 'images'} of shape {array.shape}; give 1 or {batch}",
                             explicit[0] if explicit else "matrices")
    return m


def check_like_relion(array, options: Options, path: Path) -> None:
    """``like relion`` is relion_project --3d_rot: Euler angles and offsets of a cube, interpolated in Fourier
    space; anything else it cannot reproduce is refused."""
    from noa_core.errors import ParameterError

    others = [name for name in ("rotate", "scale", "matrices", "matrix_values") if options.get(name) is not None]
    if others:
        raise ParameterError(f"relion: relion_project --3d_rot takes Euler angles and offsets only: give "
                             f"euler and shift, not {', '.join(others)}", "like")
    if array.shape[1] == 1 or len(set(array.shape[1:])) > 1:
        what = "images" if array.shape[1] == 1 else "a " + " x ".join(map(str, array.shape[1:])) + " volume"
        raise ParameterError(f"{path}: relion_project --3d_rot rotates cubes; the input holds {what}", "like")
    if options.interp != "linear" or options.border != "zero":
        raise ParameterError("like relion interpolates in Fourier space and wraps at the faces, as RELION "
                             "does: interp and border do not apply",
                             "interp" if options.interp != "linear" else "border")


def plan(inputs: Inputs, options: Options):
    from noa_core.operations.plan import whole_image_plan

    array, meta = inputs.open_real(inputs[0], "transform")
    m = matrices_for(array, options, inputs[0])
    volume = array.shape[1] > 1
    relion = options.like == "relion"
    if relion:
        check_like_relion(array, options, inputs[0])

    def fill(block, key, out):
        from noa_core.geometry import transforms

        if relion:  # computed on the host, as RELION's transcription is NumPy
            import numpy as np

            from noa_core.array import asarray
            from noa_core.compute.conversion import convert_into

            euler, shift = options.get("euler") or (0.0, 0.0, 0.0), options.get("shift") or (0.0, 0.0, 0.0)
            rotated = [transforms.relion_rotated(v, euler, shift) for v in block.to("cpu").numpy()]
            result = asarray(np.stack(rotated).astype(np.float32))
            convert_into(result if out.device == "cpu" else result.to(out.device), out)
            return
        mine = m if m.shape[0] == 1 else m[key[0]]
        run = transforms.transform_3d if volume else transforms.transform_2d
        run(block, out, mine, options.interp, options.border)

    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, fill=fill,
                            working=RELION_WORKING if relion else 0.0)


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
            "entry (or one for all): the output pixel (y, x) samples the input at M @ (y, x, 1), as scipy.ndimage.affine_transform; a text file "
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
            Param("interp", Choice(("linear", "cubic", "nearest")), "Interpolation: linear, cubic (B-spline) or nearest.",
                  default="linear"),
            Param("border", Choice(("zero", "clamp", "mirror")), "Values outside the input: zero, clamp (edge) or "
                  "mirror.", default="zero"),
            Param("like", Choice(("noa", "relion")), "noa: real-space interpolation about N//2; relion: what "
                  "relion_project --3d_rot writes for --euler and --shift of a cube (Fourier space: wraps at the "
                  "faces, odd boxes one voxel further).", default="noa"),
            *READING, DEVICE),
    plan=plan,
    warmup=warmup,
)
