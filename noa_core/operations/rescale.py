"""noa rescale: Fourier-rescale images (or volumes) to a pixel size or by a factor, to an even box, noa's way
(scipy.signal.resample) or RELION's; optionally windowed to a new box about the centre."""

from __future__ import annotations

from noa_core.operations.spec import PIXEL_SIZE, READING, SIDE_FILES, Choice, Integer, Param, Real, Writes, implemented

MAX_FACTOR = 64.0  # the most an axis may grow: 64 x 64 the pixels of an image


OPERATION = Writes(
    name="rescale",
    summary="Fourier-rescale images (volumes in 3-d) to a pixel size or by a factor, to an even box as RELION does; "
            "noa's way or RELION's, then optionally windowed to a new box.",
    details="The new size of each axis is round(size x factor) made even (RELION's --rescale_angpix), where the "
            "factor is the input's pixel size over --pixel-size. Values keep their scale; the output is float32. "
            "--like noa (default): each axis's Fourier transform is cropped or zero-padded on its own, the Nyquist "
            "bins +N/2 and -N/2 of an even size folded together (shrinking) or split in halves (enlarging): "
            "scipy.signal.resample along each axis. --like relion: RELION 3.1.3's relion_image_handler "
            "--rescale_angpix (resizeMap): a non-square image is padded with zeros to a square about its centre "
            "N//2 and scaled as one square of the larger side (then cropped about the centre to round(size x "
            "new / old) made even per axis); shrinking keeps only +N/2 of an even new size; enlarging keeps the "
            "sphere of radius old N//2 (zero beyond); pixel sizes are read as float32, as RELION reads them; "
            "volumes must be cubic. --new-box N then crops or zero-pads each image (D, H, W of a volume) to N "
            "about the centre N//2, as RELION's --new_box (noa resize --fill zero); with --like relion, as "
            "RELION, only where the width is not already N. The header gets the pixel size that results "
            "(input pixel size x old / new size; of the square side with --like relion, as RELION writes it on X "
            "and Y) and the origin moves so that the content stays in place; RELION writes "
            "origin 0, takes 1 Å where the header has 0 and writes a Z pixel size of 0 for single images, "
            "whereas noa keeps the others as they were (unknown stays unknown).",
    examples=("noa rescale particles.mrcs particles_2A.mrcs --pixel-size 2.0",
              "noa rescale map.mrc map_half.mrc --factor 0.5",
              "noa rescale particles.mrcs small.mrcs --pixel-size 3.0 --new-box 64 --like relion"),
    params=(Param("pixel_size", PIXEL_SIZE, "Target pixel size in Å."),
            Param("factor", Real(0.0, MAX_FACTOR),
                  "Size factor instead: 0.5 halves every axis (the pixel size doubles)."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å, when the header's is unknown or wrong."),
            Param("like", Choice(("noa", "relion")),
                  "noa: scipy.signal.resample per axis (Nyquist bins folded or split); relion: "
                  "relion_image_handler --rescale_angpix (3.1.3), within 1e-5 of its output.", default="noa"),
            Param("new_box", Integer(1, 2**31 - 1),
                  "After rescaling, crop or zero-pad each image (volume) to N x N (x N) about the centre N//2, "
                  "as RELION's --new_box."),
            *READING, SIDE_FILES),
    plan=implemented("rescale", "plan"),
)
