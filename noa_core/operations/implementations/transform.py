"""noa transform: every image (volume) rotated, shifted and scaled about its centre N//2, or resampled at given
inverse matrices, in real space; or, like RELION, a cube rotated and shifted in Fourier space as relion_project
--3d_rot does."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noa_core.array import asarray
from noa_core.compute.conversion import convert_into
from noa_core.errors import ParameterError, ShapeError
from noa_core.geometry import transforms
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.spec import Inputs, Options

GEOMETRY = ("rotate", "shift", "scale", "euler")
# Output-sized (float32) buffers like relion holds: the map padded twice in float64 (16) and its half transform in
# complex128 (16) at once, then the rotated transform and its inverse (38 measured at 64^3 with tracemalloc)
RELION_WORKING = 40.0


def matrices_for(array, options: Options, path: Path):
    """The inverse matrices ``(n, ndim, ndim + 1)`` the options describe, checked against the input's kind
    and batch."""
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
            m = transforms.affine_3d(array.shape, euler=options.get("euler") or (0.0, 0.0, 0.0), shift=shift,
                                     scale=scale)
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
    array, meta = inputs.open_real(inputs[0], "transform")
    m = matrices_for(array, options, inputs[0])
    volume = array.shape[1] > 1
    relion = options.like == "relion"
    if relion:
        check_like_relion(array, options, inputs[0])

    def fill(block, key, out):
        if relion:  # computed on the host, as RELION's transcription is NumPy
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
