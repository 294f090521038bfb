"""``convert``: cryoSPARC ``.cs`` to RELION STAR and back, and RELION 3.0 (one table) to 3.1 (optics and
particles tables) and back.

cryoSPARC's fields become RELION's columns as pyem's ``csparc2star`` makes them: the image ``N@path`` from
``blob/idx`` (from 0) and ``blob/path`` (its ``>`` taken off); the pose from ``alignments3D/pose``, an axis-angle
vector whose rotation's transpose is RELION's Euler matrix (``rlnAngleRot/Tilt/Psi``, degrees; a 2D
classification's ``alignments2D/pose`` is ``rlnAnglePsi``); shifts from ``alignments3D/shift`` in pixels
(``rlnOriginXAngst/YAngst`` = pixels x ``blob/psize_A``; RELION 3.0's ``rlnOriginX/Y`` in pixels); the CTF from
``ctf/df1_A``, ``df2_A``, ``df_angle_rad`` (degrees), ``phase_shift_rad`` (degrees), ``cs_mm``, ``accel_kv``,
``amp_contrast``; classes, random subsets and exposure groups from 0 to RELION's from 1; coordinates from the
fractions of ``location/micrograph_shape`` ([y, x]), y counted from the top. STAR to ``.cs`` is the inverse.
A 3.1 file's optics group holds voltage, Cs, amplitude contrast, pixel size and box; 3.0 writes them on every
row with ``rlnDetectorPixelSize`` (the pixel size) and ``rlnMagnification`` 10000, as pyem does. Values carried
over are copied as their text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from scipy.spatial.transform import Rotation

from noa_core.errors import ParameterError
from noa_core.io import star
from noa_core.io.particle_files import CsTable, ParticleError, StarTable, open_table, split_names
from noa_core.io.particles import FolderProject, stack_header
from noa_core.particles.table import check_output, npy_bytes

LAYOUTS = ("3.0", "3.1")
MAGNIFICATION = 10000.0  # RELION 3.0's pixel size is rlnDetectorPixelSize (µm) x 1e4 / rlnMagnification
# cryoSPARC field -> RELION column, copied as they are (numbers)
CTF_COPIED = {"ctf/df1_A": "rlnDefocusU", "ctf/df2_A": "rlnDefocusV", "ctf/bfactor": "rlnCtfBfactor",
              "ctf/cross_corr_ctffind4": "rlnCtfFigureOfMerit", "ctf/ctf_fit_to_A": "rlnCtfMaxResolution"}
CTF_ANGLES = {"ctf/df_angle_rad": "rlnDefocusAngle", "ctf/phase_shift_rad": "rlnPhaseShift"}  # radians -> degrees
# The optics of a group, cryoSPARC field -> RELION column
OPTICS = {"ctf/accel_kv": "rlnVoltage", "ctf/cs_mm": "rlnSphericalAberration",
          "ctf/amp_contrast": "rlnAmplitudeContrast"}
ORIGINS_PIXELS = ("rlnOriginX", "rlnOriginY", "rlnOriginZ")
ORIGINS_ANGST = ("rlnOriginXAngst", "rlnOriginYAngst", "rlnOriginZAngst")
# RELION 3.1 optics columns RELION 3.0 does not have (the pixel size becomes rlnDetectorPixelSize)
ONLY_31 = ("rlnOpticsGroup", "rlnOpticsGroupName", "rlnImageSize", "rlnImageDimensionality", "rlnImagePixelSize")
ONLY_30 = ("rlnDetectorPixelSize", "rlnMagnification")
# RELION 3.0 columns that move into a 3.1 optics group
TO_OPTICS = ("rlnVoltage", "rlnSphericalAberration", "rlnAmplitudeContrast", "rlnBeamTiltX", "rlnBeamTiltY")


@dataclass(frozen=True)
class Converted:
    path: Path
    rows: int
    layout: str  # 'RELION 3.0', 'RELION 3.1', 'cryoSPARC'


# -- poses ---------------------------------------------------------------------------------------------------


def euler_matrices(rot: np.ndarray, tilt: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """RELION's rotation matrices (``Euler_angles2matrix``) of angles in radians, ``(n, 3, 3)``."""
    ca, cb, cg = np.cos(rot), np.cos(tilt), np.cos(psi)
    sa, sb, sg = np.sin(rot), np.sin(tilt), np.sin(psi)
    cc, cs, sc, ss = cb * ca, cb * sa, sb * ca, sb * sa
    return np.stack([np.stack([cg * cc - sg * sa, cg * cs + sg * ca, -cg * sb], -1),
                     np.stack([-sg * cc - cg * sa, -sg * cs + cg * ca, sg * sb], -1),
                     np.stack([sc, ss, cb], -1)], -2)


def matrix_eulers(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RELION's Euler angles (``Euler_matrix2angles``; rot, tilt, psi in radians) of rotation matrices ``(n, 3, 3)``."""
    epsilon = np.finfo(np.float64).eps
    abs_sb = np.hypot(r[:, 0, 2], r[:, 1, 2])
    gamma = np.arctan2(r[:, 1, 2], -r[:, 0, 2])
    alpha = np.arctan2(r[:, 2, 1], r[:, 2, 0])
    sin_gamma = np.sin(gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        sign_sb = np.where(np.abs(sin_gamma) < epsilon, np.sign(-r[:, 0, 2]) / np.cos(gamma),
                           np.where(sin_gamma > 0, np.sign(r[:, 1, 2]), -np.sign(r[:, 1, 2])))
    beta = np.arctan2(sign_sb * abs_sb, r[:, 2, 2])
    polar = abs_sb <= 16 * epsilon  # tilt 0 or 180: rot and psi are one angle, given to psi
    up = r[:, 2, 2] > 0
    alpha = np.where(polar, 0.0, alpha)
    beta = np.where(polar, np.where(up, 0.0, np.pi), beta)
    gamma = np.where(polar, np.where(up, np.arctan2(-r[:, 1, 0], r[:, 0, 0]), np.arctan2(r[:, 1, 0], -r[:, 0, 0])),
                     gamma)
    return alpha, beta, gamma


def pose_matrices(pose: np.ndarray) -> np.ndarray:
    """RELION's matrices of cryoSPARC's axis-angle poses ``(n, 3)``: the transposes of the rotations they name."""
    return Rotation.from_rotvec(-np.asarray(pose, np.float64)).as_matrix().reshape(-1, 3, 3)


def matrix_poses(r: np.ndarray) -> np.ndarray:
    """cryoSPARC's axis-angle poses of RELION's matrices (the inverse of :func:`pose_matrices`)."""
    return -Rotation.from_matrix(r).as_rotvec().reshape(-1, 3)


# -- cryoSPARC -> STAR ---------------------------------------------------------------------------------------


def _float_text(values: np.ndarray) -> np.ndarray:
    """Numbers as STAR text: float32 fields as their shortest float32 text (12345.67, not 12345.669921875)."""
    values = np.asarray(values)
    if values.dtype == np.float32:
        return values.astype("U24").astype("S")
    return values


def _groups(columns: list[np.ndarray]) -> np.ndarray:
    """Each row's group (from 1) by its values in ``columns`` together, numbered in order of appearance."""
    keys = np.empty(len(columns[0]), [(f"f{i}", column.dtype) for i, column in enumerate(columns)])
    for i, column in enumerate(columns):
        keys[f"f{i}"] = column
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)] + 1


def _cs_columns(table: CsTable) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray,
                                          np.ndarray | None]:
    """A ``.cs`` table as RELION's columns: the particles', the optics' (one value per row), each row's pixel
    size and each row's pixel shifts (n, 2; None without)."""
    array, names = table.array, table.array.dtype.names or ()
    paths, sections = table.image_names()
    particles: dict[str, np.ndarray] = {}
    particles["rlnImageName"] = np.strings.add(np.strings.add(np.strings.zfill(
        (sections + 1).astype("S20"), 6), b"@"), paths)
    if "location/micrograph_path" in names:
        particles["rlnMicrographName"] = np.strings.lstrip(np.asarray(array["location/micrograph_path"]).astype("S"),
                                                           b">")
    if {"location/center_x_frac", "location/center_y_frac", "location/micrograph_shape"} <= set(names):
        shape = np.asarray(array["location/micrograph_shape"]).reshape(-1, 2)  # [y, x]
        particles["rlnCoordinateX"] = np.round(array["location/center_x_frac"] * shape[:, 1]).astype(np.int64)
        particles["rlnCoordinateY"] = np.round((1 - array["location/center_y_frac"]) * shape[:, 0]).astype(np.int64)
    for field, label in CTF_COPIED.items():
        if field in names:
            particles[label] = _float_text(array[field])
    for field, label in CTF_ANGLES.items():
        if field in names:
            particles[label] = np.rad2deg(np.asarray(array[field], np.float64))
    if "rlnDefocusU" in particles and "rlnPhaseShift" not in particles:
        particles["rlnPhaseShift"] = np.zeros(table.rows)
    shifts = None
    for kind in ("alignments3D", "alignments2D"):
        if f"{kind}/pose" not in names:
            continue
        pose = np.asarray(array[f"{kind}/pose"], np.float64)
        if kind == "alignments3D":
            rot, tilt, psi = matrix_eulers(pose_matrices(pose.reshape(-1, 3)))
            particles.update(rlnAngleRot=np.rad2deg(rot), rlnAngleTilt=np.rad2deg(tilt), rlnAnglePsi=np.rad2deg(psi))
        else:
            particles["rlnAnglePsi"] = np.rad2deg(pose.reshape(-1))
        if f"{kind}/shift" in names:
            shifts = np.asarray(array[f"{kind}/shift"], np.float64).reshape(-1, 2)
        if f"{kind}/class" in names:
            particles["rlnClassNumber"] = np.asarray(array[f"{kind}/class"]).astype(np.int64) + 1
        if f"{kind}/split" in names and np.unique(array[f"{kind}/split"]).size > 1:  # pyem drops a single subset
            particles["rlnRandomSubset"] = np.asarray(array[f"{kind}/split"]).astype(np.int64) + 1
        break
    if "filament/filament_uid" in names:
        particles["rlnHelicalTubeID"] = np.asarray(array["filament/filament_uid"])
    optics = {label: _float_text(array[field]) for field, label in OPTICS.items() if field in names}
    pixel_size = table.pixel_sizes()
    boxes = table.boxes()
    if boxes is None:
        raise ParticleError(f"{table.where(0, 'blob/shape')}: missing; RELION's optics table needs the box size")
    optics["rlnImagePixelSize"] = _float_text(array["blob/psize_A"]) if "blob/psize_A" in names else pixel_size
    optics["rlnImageSize"] = boxes
    groups = np.asarray(array["ctf/exp_group_id"]).astype(np.int64) if "ctf/exp_group_id" in names else \
        np.zeros(table.rows, np.int64)
    optics["rlnOpticsGroup"] = groups
    return particles, optics, pixel_size, shifts


def _cs_to_star(table: CsTable, layout: str) -> list[bytes | np.ndarray]:
    particles, optics, pixel_size, shifts = _cs_columns(table)
    if layout == "3.0":
        particles.update({label: values for label, values in optics.items() if label not in ONLY_31})
        particles["rlnDetectorPixelSize"] = optics["rlnImagePixelSize"]
        particles["rlnMagnification"] = np.full(table.rows, MAGNIFICATION)
        if shifts is not None:
            particles["rlnOriginX"], particles["rlnOriginY"] = shifts[:, 0], shifts[:, 1]
        return star.loop_text("", particles, version=None)
    if shifts is not None:
        particles["rlnOriginXAngst"] = shifts[:, 0] * pixel_size
        particles["rlnOriginYAngst"] = shifts[:, 1] * pixel_size
    group = _groups([np.asarray(values) for values in optics.values()])
    particles["rlnOpticsGroup"] = group
    first = np.unique(group, return_index=True)[1]
    columns = {"rlnOpticsGroupName": np.strings.add(b"opticsGroup", np.arange(1, first.size + 1).astype("S20")),
               "rlnOpticsGroup": np.arange(1, first.size + 1)}
    columns.update({label: np.asarray(values)[first] for label, values in optics.items() if label != "rlnOpticsGroup"})
    columns["rlnImageDimensionality"] = np.full(first.size, 2)
    return [*star.loop_text("optics", columns), *star.loop_text("particles", particles)]


# -- STAR -> cryoSPARC ---------------------------------------------------------------------------------------


def _per_row(table: StarTable, label: str) -> np.ndarray | None:
    """Each particle's value of ``label``: its own column, or its optics group's; None where neither has it."""
    if label in table.block.labels:
        return table.text.numbers(table.block, label)
    return table.optics_value(label)


def _star_to_cs(table: StarTable) -> bytes:
    count = table.rows
    paths, sections = table.image_names()
    pixel_size = table.pixel_sizes()
    boxes = table.boxes()
    if boxes is None:
        raise ParticleError(f"{table.path}: no rlnImageSize in data_optics; a .cs file needs each image's box "
                            "(convert RELION 3.0 files to 3.1 first)")
    columns: dict[str, tuple[Any, np.ndarray]] = {
        "uid": ("<u8", np.arange(1, count + 1, dtype=np.uint64)),
        "blob/path": (f"S{max(paths.dtype.itemsize, 1)}", paths),
        "blob/idx": ("<u4", sections),
        "blob/shape": (("<u4", (2,)), np.stack([boxes, boxes], -1)),
        "blob/psize_A": ("<f4", pixel_size)}
    labels = table.block.labels
    if "rlnMicrographName" in labels:
        names = table.text.values(table.block, "rlnMicrographName")
        columns["location/micrograph_path"] = (names.dtype, names)
    for field, label in OPTICS.items():
        values = _per_row(table, label)
        if values is not None:
            columns[field] = ("<f4", values)
    for field, label in {**CTF_COPIED, **CTF_ANGLES}.items():
        if label in labels:
            values = table.text.numbers(table.block, label)
            columns[field] = ("<f4", np.deg2rad(values) if field in CTF_ANGLES else values)
    groups = table.groups()
    if groups is not None:
        columns["ctf/exp_group_id"] = ("<u4", groups - 1)
    if {"rlnAngleRot", "rlnAngleTilt", "rlnAnglePsi"} <= set(labels):
        rot, tilt, psi = (np.deg2rad(table.text.numbers(table.block, f"rlnAngle{a}")) for a in ("Rot", "Tilt", "Psi"))
        columns["alignments3D/pose"] = (("<f4", (3,)), matrix_poses(euler_matrices(rot, tilt, psi)))
        shifts = [table.text.numbers(table.block, label) / pixel_size for label in ORIGINS_ANGST[:2] if label in labels]
        if len(shifts) < 2:
            shifts = [table.text.numbers(table.block, label) for label in ORIGINS_PIXELS[:2] if label in labels]
        if len(shifts) == 2:
            columns["alignments3D/shift"] = (("<f4", (2,)), np.stack(shifts, -1))
        columns["alignments3D/psize_A"] = ("<f4", pixel_size)
        if "rlnClassNumber" in labels:
            columns["alignments3D/class"] = ("<u4", table.text.numbers(table.block, "rlnClassNumber", np.int64) - 1)
        if "rlnRandomSubset" in labels:
            columns["alignments3D/split"] = ("<u4", table.text.numbers(table.block, "rlnRandomSubset", np.int64) - 1)
    out = np.zeros(count, [(name, dtype) for name, (dtype, _) in columns.items()])
    for name, (_, values) in columns.items():
        out[name] = values
    return npy_bytes(out)


# -- RELION 3.0 <-> 3.1 --------------------------------------------------------------------------------------


def _to_30(table: StarTable) -> list[bytes | np.ndarray]:
    """A RELION 3.1 file's particles with their optics group's values on every row, shifts in pixels."""
    text, block, optics = table.text, table.block, cast(star.Block, table.optics)  # a 3.1 file's
    rows_group = table.optics_row()
    pixel_size = table.pixel_sizes()
    columns: dict[str, np.ndarray] = {}
    for label in block.labels:
        if label in ORIGINS_ANGST:
            columns[ORIGINS_PIXELS[ORIGINS_ANGST.index(label)]] = text.numbers(block, label) / pixel_size
        elif label not in ONLY_31:
            columns[label] = text.values(block, label)
    for label in optics.labels:
        if label not in ONLY_31 and label not in columns:
            columns[label] = text.values(optics, label)[rows_group]
    columns["rlnDetectorPixelSize"] = pixel_size
    columns["rlnMagnification"] = np.full(table.rows, MAGNIFICATION)
    return star.loop_text("", columns, version=None)


def _to_31(table: StarTable, project_dir: str | os.PathLike | None) -> list[bytes | np.ndarray]:
    """A RELION 3.0 file as 3.1: one optics group per distinct voltage, Cs, amplitude contrast, beam tilt, pixel
    size and box (the box read from the first stack of each group, relative to ``project_dir``)."""
    text, block = table.text, table.block
    pixel_size = np.round(table.pixel_sizes(), 6)
    if not (pixel_size > 0).all():
        row = int(np.argmin(pixel_size > 0))
        raise ParticleError(f"{table.where(row)}: no pixel size (rlnDetectorPixelSize and rlnMagnification, or "
                            "rlnImagePixelSize): RELION 3.1's optics table needs it")
    moved = {label: text.values(block, label) for label in TO_OPTICS if label in block.labels}
    group = _groups([*moved.values(), pixel_size])
    first = np.unique(group, return_index=True)[1]
    paths = split_names(text.values(block, "rlnImageName", first))[1]
    project = FolderProject(project_dir)
    boxes = [stack_header(project, path.decode(errors="surrogateescape"), table.where(int(row), "rlnImageName")).width
             for path, row in zip(paths.tolist(), first)]
    optics = {"rlnOpticsGroupName": np.strings.add(b"opticsGroup", np.arange(1, first.size + 1).astype("S20")),
              "rlnOpticsGroup": np.arange(1, first.size + 1),
              **{label: values[first] for label, values in moved.items()},
              "rlnImagePixelSize": pixel_size[first], "rlnImageSize": np.array(boxes),
              "rlnImageDimensionality": np.full(first.size, 2)}
    particles: dict[str, np.ndarray] = {}
    for label in block.labels:
        if label in ORIGINS_PIXELS:
            particles[ORIGINS_ANGST[ORIGINS_PIXELS.index(label)]] = text.numbers(block, label) * pixel_size
        elif label not in moved and label not in ONLY_30 and label not in ONLY_31:
            particles[label] = text.values(block, label)
    particles["rlnOpticsGroup"] = group
    return [*star.loop_text("optics", optics), *star.loop_text("particles", particles)]


def _layout_of(table: StarTable) -> str:
    return "3.1" if table.optics is not None else "3.0"


def convert(src: str | os.PathLike, dst: str | os.PathLike, *, layout: str | None = None,
            project_dir: str | os.PathLike | None = None, overwrite: bool = False) -> Converted:
    """Write ``src`` as ``dst``: ``.cs`` -> STAR (RELION ``layout`` 3.1 by default, or 3.0), STAR -> ``.cs``, or
    STAR -> STAR in the other RELION ``layout`` (3.0 -> 3.1 reads each optics group's box from its first stack,
    relative to ``project_dir``)."""
    if layout is not None and layout not in LAYOUTS:
        raise ParameterError(f"{layout!r}: one of {', '.join(LAYOUTS)}", "layout")
    table = open_table(src)
    to_cs = Path(dst).suffix.lower() == ".cs"
    if not to_cs and Path(dst).suffix.lower() != ".star":
        raise ParameterError(f"{dst}: name the output .star or .cs", "dst")
    path = check_output(dst, [table.path], overwrite)
    if isinstance(table, CsTable):
        if to_cs:
            raise ParameterError(f"{src} and {dst} are both cryoSPARC files: nothing to convert", "dst")
        written, layout = _cs_to_star(table, layout or "3.1"), layout or "3.1"
    elif to_cs:
        table = cast(StarTable, table)
        if layout is not None:
            raise ParameterError("a RELION layout is for a STAR output, not a .cs", "layout")
        written, layout = [_star_to_cs(table)], None
    else:
        table = cast(StarTable, table)
        if layout is None or layout == _layout_of(table):
            raise ParameterError(f"{src} is RELION {_layout_of(table)}: give the other layout to convert it to",
                                 "layout")
        written = _to_30(table) if layout == "3.0" else _to_31(table, project_dir)
    star.write(path, written, overwrite=overwrite)
    return Converted(path, table.rows, "cryoSPARC" if layout is None else f"RELION {layout}")

