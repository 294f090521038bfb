"""Geometry: affine transforms and RELION's rotations (:mod:`.transforms`, whose functions this face also
gives: ``noa_core.geometry.transform_3d``), point groups (:mod:`.symmetry`; their names, without NumPy, in
:mod:`.point_groups`) and masks (:mod:`.masks`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["masks", "point_groups", "symmetry", "transforms"],
    {"transforms": ["BORDERS", "INTERPOLATIONS", "affine_2d", "affine_3d", "as_matrices", "euler_zyz", "read_matrices",
                    "relion_rotated", "rotate_2d", "transform_2d", "transform_3d"]})
