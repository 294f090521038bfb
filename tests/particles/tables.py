"""Particle tables for the tests of noa_core.particles: RELION 3.1 STARs laid out as RELION writes them, whose
rows name the images of the particle set RELION 3.1.3 extracted (tests/data/relion_particles), with classes,
CTF, poses and shifts drawn at random."""

from __future__ import annotations

import shutil
from pathlib import Path

import mrcfile
import numpy as np
import starfile

from tests.helpers import REPO

RELION = REPO / "tests" / "data" / "relion_particles"
IMAGES = [("Particles/Movies/mic0.mrcs", i) for i in range(1, 6)] + [("Particles/Movies/mic1.mrcs", i)
                                                                    for i in range(1, 7)]
OPTICS_LABELS = ["rlnOpticsGroupName", "rlnOpticsGroup", "rlnVoltage", "rlnSphericalAberration",
                 "rlnAmplitudeContrast", "rlnImagePixelSize", "rlnImageSize", "rlnImageDimensionality"]
LABELS = ["rlnCoordinateX", "rlnCoordinateY", "rlnImageName", "rlnMicrographName", "rlnOpticsGroup",
          "rlnClassNumber", "rlnDefocusU", "rlnDefocusV", "rlnDefocusAngle", "rlnAngleRot", "rlnAngleTilt",
          "rlnAnglePsi", "rlnOriginXAngst", "rlnOriginYAngst", "rlnRandomSubset"]


def project(tmp_path: Path) -> Path:
    """A copy of the RELION particle set: a project folder of its own."""
    folder = tmp_path / "project"
    shutil.copytree(RELION, folder)
    return folder


def loop(name: str, labels: list[str], lines: list[str]) -> str:
    head = f"\n# version 30001\n\ndata_{name}\n\nloop_ \n" + "".join(f"_{label} #{i + 1} \n"
                                                                                     for i, label in enumerate(labels))
    return head + "".join(line + " \n" for line in lines) + " \n"


def optics_line(name: str, group: int, pixel_size: float = 1.5, voltage: float = 300.0, box: int = 32) -> str:
    return f"{name:>12} {group:12d} {voltage:12.6f} {2.7:12.6f} {0.1:12.6f} {pixel_size:12.6f} {box:12d} {2:12d}"


def particle_lines(rows: int, seed: int = 0, groups: tuple[int, ...] = (1,)) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    for r in range(rows):
        stack, index = IMAGES[r % len(IMAGES)]
        values = [f"{rng.uniform(0, 4000):12.6f}", f"{rng.uniform(0, 4000):12.6f}", f"{index:06d}@{stack}",
                  f"Movies/{Path(stack).stem}.mrc", f"{groups[r % len(groups)]:12d}", f"{rng.integers(1, 7):12d}",
                  f"{rng.uniform(5000, 30000):12.6f}", f"{rng.uniform(5000, 30000):12.6f}",
                  f"{rng.uniform(-90, 90):12.6f}", f"{rng.uniform(-180, 180):12.6f}", f"{rng.uniform(0, 180):12.6f}",
                  f"{rng.uniform(-180, 180):12.6f}", f"{rng.uniform(-5, 5):12.6f}", f"{rng.uniform(-5, 5):12.6f}",
                  f"{r % 2 + 1:12d}"]
        lines.append(" ".join(values))
    return lines


def relion31(path: Path, rows: int = 40, seed: int = 0, optics: list[str] | None = None,
             groups: tuple[int, ...] = (1,)) -> Path:
    """A RELION 3.1 particle STAR of ``rows`` rows (optics ``optics`` lines; one group of 1.5 Å by default)."""
    optics = optics or [optics_line("opticsGroup1", 1)]
    path.write_text(loop("optics", OPTICS_LABELS, optics) + loop("particles", LABELS,
                                                                  particle_lines(rows, seed, groups)))
    return path


def oracle_images(star_path: Path, project: Path) -> np.ndarray:
    """Each row's image as starfile and mrcfile read it: the oracle of a STAR's stack."""
    table = starfile.read(star_path, always_dict=True)
    frame = table.get("particles", next(iter(table.values())))
    images = []
    for name in frame["rlnImageName"]:
        index, path = name.split("@")
        with mrcfile.mmap(project / path, permissive=True) as m:
            images.append(np.array(m.data[int(index) - 1]))
    return np.stack(images)[:, None]


def cs_file(path: Path, rows: list[tuple[str, int]], box: int = 32, psize: float = 1.5, prefix: str = ">") -> Path:
    """A cryoSPARC particle file as cryoSPARC writes them: a structured array saved with np.save."""
    dtype = [("uid", "<u8"), ("blob/path", f"S{max(len(p) for p, _ in rows) + 2}"), ("blob/idx", "<u4"),
             ("blob/shape", "<u4", (2,)), ("blob/psize_A", "<f4"), ("blob/sign", "<f4"), ("ctf/df1_A", "<f4")]
    array = np.zeros(len(rows), dtype)
    array["uid"] = np.arange(len(rows)) + 10**18
    array["blob/path"] = [(prefix + p).encode() for p, _ in rows]
    array["blob/idx"] = [i for _, i in rows]
    array["blob/shape"] = box
    array["blob/psize_A"] = psize
    array["blob/sign"] = -1
    array["ctf/df1_A"] = np.linspace(1e4, 2e4, len(rows))
    with open(path, "wb") as f:
        np.save(f, array)
    return path


def binned(images: np.ndarray, k: int) -> np.ndarray:
    """``images`` (B, D, H, W) binned K x K as NumPy computes it: the oracle of noa bin."""
    b, d, h, w = images.shape
    return images.reshape(b, d, h // k, k, w // k, k).astype(np.float64).mean(axis=(3, 5)).astype(np.float32)


def micrographs_star(names: list[str], pixel: float) -> str:
    """A RELION 3.1 micrographs STAR (as CTF estimation leaves it, without the CTF columns): one optics group of
    ``pixel`` Å, the micrographs ``names``."""
    rows = "".join(f"{name} 1\n" for name in names)
    return ("\ndata_optics\nloop_\n_rlnOpticsGroupName\n_rlnOpticsGroup\n_rlnMicrographPixelSize\n_rlnVoltage\n"
            f"_rlnSphericalAberration\n_rlnAmplitudeContrast\nopticsGroup1 1 {pixel} 300 2.7 0.1\n\n"
            f"data_micrographs\nloop_\n_rlnMicrographName\n_rlnOpticsGroup\n{rows}")
