"""Read and write MRC, TIFF, OME-Zarr and EER files as 4-d BDHW arrays.

Entry points:

- :func:`read`: ``(Array, Metadata)`` from a file; the format comes from the
  magic bytes, then the extension. Large uncompressed files are memory-mapped read-only, so
  opening a 50 GB file only reads its header.
- :func:`probe`: shape, strides, element type and metadata from the header alone (no data read).
- :func:`write`: an Array to a file, atomically, returning notices for the user.
- :func:`create` and :func:`copy_into`: outputs filled block by block, for files larger than memory.

Each format is one module implementing :class:`~noa_core.io.protocol.ImageFormat` (:mod:`.mrc`,
:mod:`.tiff`, :mod:`.omezarr`, :mod:`.eer`), listed in :mod:`.formats`, with its read options declared in
:mod:`.read_options`.

Every failure caused by a file raises a :class:`noa_core.errors.FileFormatError` subclass whose
one-line message names the file and the header field.

Loaded on first use: ``import noa_core.io.read_options`` (the operations' declarations) loads no NumPy.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    ["atomic", "beneath", "compression", "eer", "formats", "libc", "mapped", "metadata", "mrc", "omezarr",
     "protocol", "read_options", "remote", "stream", "tiff"],
    {"formats": ["read", "probe"], "protocol": ["Probe"], "metadata": ["Metadata", "HeaderStatistics"],
     "stream": ["Writer", "copy_into", "create", "fill", "write"]})
