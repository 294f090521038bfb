"""Pictures of the data: planes read in bounded bands, contrast, colour maps, montages and PNG/JPEG
(:mod:`.drawing`, whose functions this face also gives: ``noa_core.pictures.preview``), plots
(:mod:`.plots`), the terminal's half blocks (:mod:`.terminal`) and the viewer's engine (:mod:`.viewer`: tiles,
overviews, the identity answers are cached by). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["drawing", "plots", "terminal", "viewer"],
    {"drawing": ["colorize", "contrast_limits", "draw", "encode", "histogram", "log_spectrum", "parse_contrast",
                 "plane_shape", "png_picture", "preview", "read_plane", "to_gray"]})
