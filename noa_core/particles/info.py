"""``info``: what a particle file holds: its rows, how many per optics group, per class and per micrograph, and
the stacks its rows name, with those that are missing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from noa_core.io.particle_files import StarTable
from noa_core.io.particles import FolderProject, stack_runs
from noa_core.particles.table import Particles

# The columns counted, by kind of file: optics group, class, micrograph.
STAR_COLUMNS = {"classes": "rlnClassNumber", "micrographs": "rlnMicrographName"}
CS_COLUMNS = {"optics_groups": "ctf/exp_group_id", "classes": "alignments3D/class",
              "micrographs": "location/micrograph_path"}


def counts(values: np.ndarray) -> dict[str, int]:
    """How many rows hold each value (text), by value (numbers in their order)."""
    distinct, number = np.unique(values, return_counts=True)
    keys = [v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in distinct.tolist()]
    try:
        order = np.argsort([float(k) for k in keys], kind="stable")
    except ValueError:
        order = np.arange(len(keys))
    return {keys[i]: int(number[i]) for i in order}


def layout(particles: Particles) -> str:
    table = particles.table
    if not isinstance(table, StarTable):
        return "cryoSPARC"
    return "RELION 3.1" if table.optics is not None else "RELION 3.0"


def _optics_groups(table: StarTable) -> list[dict[str, Any]] | None:
    groups = table.groups()
    if table.optics is None:
        return None
    text, optics = table.text, table.optics
    numbers = text.numbers(optics, "rlnOpticsGroup", np.int64)
    names = text.values(optics, "rlnOpticsGroupName") if "rlnOpticsGroupName" in optics.labels else None
    per_group = counts(groups.astype(np.int64)) if groups is not None else {str(numbers[0]): table.rows}
    return [{"group": int(n), "name": None if names is None else names[i].decode(errors="replace"),
             "particles": per_group.get(str(int(n)), 0)} for i, n in enumerate(numbers)]


def info(path: str | os.PathLike, project_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """What ``path`` holds (a JSON-ready dict): its layout, rows, counts per optics group, class and micrograph
    (None where the file has no such column), and its stacks (relative to ``project_dir``, the current folder
    by default) with those missing."""
    particles = Particles(path)
    table = particles.table
    columns = STAR_COLUMNS if particles.is_star else CS_COLUMNS
    found: dict[str, Any] = {key: counts(particles.text(label, key)) if label in particles.labels else None
             for key, label in columns.items()}
    if isinstance(table, StarTable):
        found["optics_groups"] = _optics_groups(table)
    elif found["optics_groups"] is not None:
        found["optics_groups"] = [{"group": int(k), "name": None, "particles": n}
                                  for k, n in found["optics_groups"].items()]
    paths, _ = table.image_names()
    names, _ = stack_runs(paths)
    project = FolderProject(project_dir)
    missing = []
    for raw in names.tolist():
        name = raw.decode(errors="surrogateescape")
        try:
            os.close(project.open(name))
        except OSError:
            missing.append(name)
    return {"file": str(Path(path)), "layout": layout(particles), "rows": particles.rows,
            "columns": len(particles.labels), "optics_groups": found["optics_groups"],
            "classes": found["classes"], "micrographs": found["micrographs"],
            "stacks": {"count": len(names), "missing": missing}}
