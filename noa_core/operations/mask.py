"""noa mask: a soft mask of a map (or image) as relion_mask_create makes it, or a sphere or cylinder in its box."""

from __future__ import annotations

from noa_core.operations.spec import PIXEL_SIZE, READING, Flag, Param, Real, Writes, implemented

OPERATION = Writes(
    name="mask",
    summary="A soft mask of a map as relion_mask_create makes it (threshold, extend, raised-cosine edge), or a "
            "sphere or cylinder in the box.",
    details="With --threshold T: the map (low-passed first with --lowpass, RELION's filter with its 2-shell edge) "
            "becomes 1 where its value >= T and 0 elsewhere; --extend E then adds every voxel nearer than E pixels "
            "to the mask (E < 0 removes every voxel nearer than -E to the outside); --soft-edge W finally gives each "
            "voxel at a distance d < W pixels from the mask 0.5 + 0.5 cos(pi d / W). Distances are Euclidean, voxel "
            "centre to voxel centre, within the box: the mask relion_mask_create --i IN --ini_threshold T "
            "--extend_inimask E --width_soft_edge W [--lowpass A] [--invert] writes, computed with an exact distance "
            "transform instead of RELION's search (RELION caps distances at sqrt(9999) pixels, so it differs for "
            "edges wider than 99.99 pixels). A threshold above every value refuses (the mask would be empty). "
            "--sphere R and --cylinder R take only IN's box and pixel size: a ball of radius R pixels about the box "
            "centre N//2 (RELION's origin), 1 for d < R, 0.5 - 0.5 cos(pi (R + W - d) / W) up to R + W, as "
            "relion_mask_create --denovo --box_size N --outer_radius R --width_soft_edge W; a cylinder about Z, "
            "the same edge on the distance from the axis and, with --height H, on |z| with H / 2 (the lower of the "
            "two). --invert writes 1 - mask. IN is one volume or one image (2-d: a disc, and a threshold mask "
            "in 2-d); a stack is refused. The output is float32 with IN's pixel size and origin.",
    examples=("noa mask map.mrc mask.mrc --threshold 0.02 --extend 3 --soft-edge 6",
              "noa mask map.mrc mask.mrc --threshold 0.01 --lowpass 15 --soft-edge 8",
              "noa mask map.mrc sphere.mrc --sphere 60 --soft-edge 5"),
    params=(Param("threshold", Real(), "Binarise the map at value >= T (RELION's --ini_threshold)."),
            Param("extend", Real(-1000.0, 1000.0), "Grow the binary mask by E pixels, or shrink it for E < 0 "
                  "(RELION's --extend_inimask).", default=0.0),
            Param("soft_edge", Real(0.0, 1000.0), "Width in pixels of the raised-cosine edge added outside the mask "
                  "(RELION's --width_soft_edge).", default=0.0),
            Param("lowpass", Real(0.0), "Low-pass the map to A Å before the threshold (RELION's --lowpass)."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å for --lowpass, when the header's is unknown or "
                  "wrong (RELION's --angpix)."),
            Param("invert", Flag(), "Write 1 - mask (RELION's --invert).", default=False),
            Param("sphere", Real(0.0, 1e6), "A sphere (a disc for an image) of radius R pixels about the box centre "
                  "N//2 instead of a threshold (RELION's --denovo --outer_radius)."),
            Param("cylinder", Real(0.0, 1e6), "A cylinder of radius R pixels about the Z axis through the box centre "
                  "N//2 instead of a threshold."),
            Param("height", Real(0.0, 1e6), "The cylinder's length along Z in pixels, centred (default: the whole "
                  "box)."),
            *READING),
    plan=implemented("mask", "plan"),
)
