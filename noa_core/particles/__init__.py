"""The work on particle tables themselves (``noa particles``): what a file holds (:mod:`.info`), whether every
image it names is there (:mod:`.check`), rows chosen by ranges or a condition (:mod:`.select`, the condition's
grammar in :mod:`.condition`), files joined (:mod:`.join`) or split (:mod:`.split`), and conversions between
cryoSPARC ``.cs`` and RELION STAR, RELION 3.0 and 3.1 layouts (:mod:`.convert`). Every table is read once and
written by copying the bytes of what it keeps (:mod:`noa_core.io.star`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["check", "condition", "convert", "info", "join", "select", "split", "table"])
