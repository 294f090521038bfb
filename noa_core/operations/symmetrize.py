"""noa symmetrize: a map averaged over the operators of its point group, as relion_image_handler --sym."""

from __future__ import annotations

from typing_extensions import TypedDict

from noa_core.geometry import point_groups
from noa_core.operations.spec import DEVICE, READING, Name, Param, Query, Writes, implemented

GROUPS = point_groups.DESCRIPTION
POINT_GROUP = Name(point_groups.PATTERN, point_groups.read, 8)


class GroupMatrices(TypedDict):
    """A point group's operators: 3x3 matrices on (x, y, z), the identity first, in RELION's order."""

    group: str
    order: int
    proper: bool
    matrices: list[list[list[float]]]


def group_text(result: dict) -> str:
    kinds = "rotations only" if result["proper"] else "with mirrors or an inversion"
    lines = [f"{result['group']}: {result['order']} operators ({kinds}), each acting on (x, y, z) from the centre "
             "N//2: the output at r samples the input at R r"]
    for number, matrix in enumerate(result["matrices"], 1):
        lines.append(f"R({number}) =")
        lines += ["  " + " ".join(f"{v:10.6f}" for v in row) for row in matrix]
    return "\n".join(lines)


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    # One fused kernel per float type (noa_core.kernels.symmetrize); other inputs are converted to float32 first.
    return [(dtype, {"sym": "C3"})] if dtype in ("float32", "float64") and shape[1] > 1 else []


OPERATION = Writes(
    name="symmetrize",
    summary="Average a map over the operators of its point group (C7, D3, T, O, I1...), as relion_image_handler "
            "--sym.",
    details="The output is the mean of the map and of the map sampled at R r for every other operator R of the group "
            "(r: x, y, z from the centre N//2 of each axis; trilinear interpolation within the box; a sample more than "
            "1e-6 voxel beyond the first or last voxel on any axis reads 0, RELION's bounds test), summed in double "
            "precision and divided by the group's order: what relion_image_handler --sym writes (RELION's "
            "symmetriseMap, its arithmetic transcribed, so the whole box matches). The "
            "groups and their settings are RELION 3.1.3's: Cn about z; Dn adds a 2-fold about x; T, O; the "
            "icosahedral settings I1 and I2 (= I, Crowther's 222) put 2-folds on x, y and z (I1 is I2 turned 90° "
            "about z), I3 and I4 a 5-fold on z and a 2-fold on y (the 2-fold nearest z leaning to -x in I3, +x in "
            "I4); I5 is not implemented by RELION and refused. The map must be centred on N//2. Over the whole box, "
            "faces included, the result is RELION's to float32 rounding (the same bits for C2, C7, D3 in the tests) "
            "and to RELION's decimal axes (T: 6 digits; a sample within 1e-6 of a face may fall on the other "
            "side), on the CPU and with --device cuda alike (one kernel source). A stack of volumes is symmetrized "
            "volume by volume. --list G prints the matrices of G (no "
            "files); over HTTP, GET "
            "/v1/query/symmetrize?list=G. Pixel size and origin are kept; the output is float32.",
    examples=("noa symmetrize map.mrc map_c7.mrc --sym C7",
              "noa symmetrize virus.mrc virus_i1.mrc --sym I1",
              "noa symmetrize --list D3"),
    params=(Param("sym", POINT_GROUP, f"Point group, as RELION names it: {GROUPS}."), *READING, DEVICE),
    plan=implemented("symmetrize", "plan"),
    warmup=warmup,
    query=Query(Param("list", POINT_GROUP, "Print the matrices of this point group (RELION's operators, in "
                      "RELION's order, each acting on x, y, z)."), implemented("symmetrize", "list_group"), group_text,
                GroupMatrices),
)
