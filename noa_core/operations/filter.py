"""noa filter: RELION's band-pass (low-pass, high-pass, raised-cosine edge) and B-factor, per image or volume."""

from __future__ import annotations

from noa_core.operations.spec import PIXEL_SIZE, READING, SIDE_FILES, Integer, Param, Real, Writes, implemented

OPERATION = Writes(
    name="filter",
    summary="Band-pass each image (volumes in 3-d) as RELION does: low-pass, high-pass, raised-cosine edge, "
            "B-factor.",
    details="Resolutions are in Å at the header's pixel size (or --angpix). The edge is a raised cosine "
            "2 x (--edge-width // 2) Fourier shells wide (RELION's --filter_edge_width, default 2, halved in whole "
            "shells as RELION does: 3 gives 2) centred on the shell floor(width x pixel size / resolution + 0.5) "
            "(RELION's rounding: a half shell rounds up). A lowpass finer than Nyquist (2 x pixel size) is refused. "
            "A B-factor multiplies each frequency s (1/Å) up to Nyquist by exp(-B s²/4) and zeroes everything "
            "beyond Nyquist (the corners of the box), as RELION's --bfactor; a sample exactly at Nyquist falls on the "
            "side RELION's own test in double precision puts it (--angpix and --bfactor read as float32, as RELION "
            "reads them). Frequencies are measured per axis, so "
            "square boxes filter exactly as RELION; RELION measures a rectangular image's every axis in units of "
            "its width. The output is float32.",
    examples=("noa filter particles.mrcs filtered.mrcs --lowpass 8 --highpass 200",
              "noa filter map.mrc sharpened.mrc --bfactor -80"),
    params=(Param("lowpass", Real(0.0), "Low-pass resolution in Å: detail finer than it is removed."),
            Param("highpass", Real(0.0), "High-pass resolution in Å: features coarser than it are removed."),
            Param("edge_width", Integer(0, 1000), "Width of the raised-cosine edge in Fourier shells, a whole number "
                  "(RELION's --filter_edge_width).", default=2),
            Param("bfactor", Real(-10000.0, 10000.0),
                  "B-factor in Å² applied as exp(-B/4 s²) up to Nyquist, zero beyond (RELION's --bfactor); negative "
                  "sharpens."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å, when the header's is unknown or wrong."),
            *READING, SIDE_FILES),
    plan=implemented("filter", "plan"),
)
