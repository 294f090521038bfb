"""Images and volumes in real space: a box's voxels cropped, padded, binned and flipped (:mod:`.boxes`), a
stack's sections picked, split, joined and averaged (:mod:`.stacks`), values scaled and normalised
(:mod:`.intensity`), and streamed statistics (:mod:`.statistics`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, ["boxes", "intensity", "stacks", "statistics"])
