"""noa symmetrize: each map averaged over the operators of its point group (RELION's, in RELION's order), as
relion_image_handler --sym; and a group's matrices, answered from its name alone."""

from __future__ import annotations

from noa_core.errors import ParameterError, ShapeError
from noa_core.geometry import symmetry
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.operations.symmetrize import GROUPS, GroupMatrices


def plan(inputs: Inputs, options: Options):
    if options.sym is None:
        raise ParameterError(f"is required: the point group ({GROUPS})", "sym")
    group = symmetry.point_group(options.sym)  # a name RELION does not know is refused before any file is read
    array, meta = inputs.open_real(inputs[0], "symmetrize")
    if min(array.shape[1:]) < 2:
        b, d, h, w = array.shape
        what = (f"a stack of images ({b} of {h} x {w} pixels)" if d == 1 and b > 1 else
                f"an image ({h} x {w} pixels)" if d == 1 else f"{d} x {h} x {w} voxels: flat, not a 3-d map")
        raise ShapeError(f"{inputs[0]}: the input is {what}; symmetrize takes 3-d maps (volumes, or a stack of "
                         "volumes) at least 2 voxels deep, high and wide")

    def fill(block, key, out):
        symmetry.symmetrize(block, group, out)

    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, fill=fill,
                            working=symmetry.working_volumes(array.dtype, options.device),
                            detail=f"mean over {group.order} operators")


def list_group(name: str) -> GroupMatrices:
    """The matrices of the point group ``name``: RELION's operators in RELION's order, the identity first."""
    group = symmetry.point_group(name)
    return {"group": group.name, "order": group.order, "proper": group.proper,
            "matrices": [[[float(v) + 0.0 for v in row] for row in m] for m in group.matrices]}
