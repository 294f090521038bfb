"""Images and volumes in real space: a box's voxels cropped, padded, binned and flipped (:mod:`.boxes`), a
stack's sections picked, split, joined and averaged (:mod:`.stacks`), values scaled and normalised
(:mod:`.intensity`), streamed statistics (:mod:`.statistics`), and an array paired with its metadata, which the
operations that change a header take and return (:mod:`.image`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, ["boxes", "image", "intensity", "stacks", "statistics"])
