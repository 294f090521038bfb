"""Tilt series: SerialEM's ``.mdoc`` read into tilts (angles, dose, acquisition time, the stack section each
describes), their order, exclusion and accumulated dose, and the files IMOD and RELION 5 read beside a stack
(:mod:`.tiltseries`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, ["sidefiles", "tiltseries"])
