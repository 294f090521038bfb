"""Pictures of the data: planes read in bounded bands, contrast, colour maps, montages and PNG/JPEG
(:mod:`.drawing`, whose functions this face also gives: ``noa_core.pictures.preview``), plots
(:mod:`.plots`) and the terminal's half blocks (:mod:`.terminal`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["drawing", "plots", "terminal"],
    {"drawing": ["colorize", "contrast_limits", "draw", "encode", "histogram", "log_spectrum", "parse_contrast",
                 "plane_shape", "png_picture", "preview", "read_plane", "to_gray"]})
