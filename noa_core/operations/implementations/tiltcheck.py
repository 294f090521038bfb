"""noa tiltcheck: a stack's header read, the files beside it (found by its stem) opened through the project as the
stack an mdoc names is (over HTTP: beneath the data root), read within their size limits and compared by
noa_core.tomography.check."""

from __future__ import annotations

from pathlib import Path

from noa_core.io import formats
from noa_core.io.particles import folder_projects
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside, sidefiles, tiltseries
from noa_core.tomography import check as consistency


def report(inputs: Inputs, options: Options) -> dict:
    """The disagreements between the stack ``inputs[0]`` and the files beside it (found by its stem)."""
    project = (inputs.projects or folder_projects)(None)  # over HTTP: the data root, beneath which each is opened
    stack_name = project.name_of(inputs[0])
    probe = formats.probe(inputs[0], as_stack=True)
    meta = probe.metadata
    axes = [axis for axis in map(tiltseries.axis_in, meta.labels) if axis is not None]
    stack = consistency.Stack(stack_name, probe.shape[0], probe.shape[3], probe.shape[2], meta.width_pixel_size(),
                              axes[-1] if axes else None)  # the newest label: what the last program said
    found = {kind: (file.name, file.data) for kind, file in sidefiles.files_beside(project, stack_name).items()}
    angles = {kind: consistency.read_angles(*found[kind]) for kind in ("rawtlt", "tlt") if kind in found}
    names = {kind: found[kind][0] if kind in found else None for kind in consistency.SIDE_FILES}
    side = consistency.SideFiles(
        names, rawtlt=angles.get("rawtlt"), tlt=angles.get("tlt"),
        mdoc=tiltseries.parse(Path(found["mdoc"][0]), found["mdoc"][1]) if "mdoc" in found else None,
        star=consistency.read_star(*found["star"], stack_name) if "star" in found else None)
    findings = consistency.check(stack, side)
    missing = [" or ".join(candidates) for kind, candidates in beside.side_names(stack_name).items()
               if kind not in found]
    return {"path": str(inputs[0]), "stack": stack_name, "sections": stack.sections,
            "files": {kind: name for kind, (name, _) in found.items()}, "missing": missing,
            "consistent": not findings,
            "findings": [{"file": f.file, "section": f.section, "problem": f.problem} for f in findings]}

