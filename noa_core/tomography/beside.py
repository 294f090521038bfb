"""Whether an operation's output gets the files of a tilt series beside it (IMOD's ``.rawtlt`` and ``.tlt``, its
mdoc, RELION 5's tilt-series STAR): the names they have beside a stack, and the operations' one call
(:func:`in_step`), which looks for them by name before anything reads them. Most stacks have none, and the
modules that read and rewrite them (:mod:`.sidefiles`, with the STAR and mdoc readers) load only where one is
there: a small command on a lone file does not wait for them."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from noa_core import tomography  # a face: the side files' readers load when a file is found
from noa_core.images.stacks import section_axis
from noa_core.io import remote

if TYPE_CHECKING:
    from noa_core.io.particles import Projects

# The files to write beside an output (a plan's side files), given its path: each file's path (in its folder) and
# content, and what the user should know of them.
SideFiles = Callable[[Path], tuple[dict[Path, bytes], list[str]]]
# why an output of mirrored images gets none: their tilt axis is no longer the one the files give
MIRRORED = "its images are mirrored, which turns their tilt axis"


class Inputs(Protocol):
    """The inputs of an operation (:class:`noa_core.operations.spec.Inputs`): the files, and how the files a file
    names are opened (None: this machine's folders)."""

    projects: Projects | None

    def __getitem__(self, index: int) -> Path: ...


def side_names(stack_name: str) -> dict[str, list[str]]:
    """The names the files beside the stack ``stack_name`` may have, by kind, first found first: TS.st -> TS.rawtlt,
    TS.tlt, TS.st.mdoc (SerialEM's and noa's) or TS.mdoc, TS.star."""
    folder, name = posixpath.split(stack_name)
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    names = {"rawtlt": [f"{stem}.rawtlt"], "tlt": [f"{stem}.tlt"], "mdoc": [f"{name}.mdoc", f"{stem}.mdoc"],
             "star": [f"{stem}.star"]}
    return {kind: [posixpath.join(folder, n) for n in found] for kind, found in names.items()}


def in_step(inputs: Inputs, options: Mapping[str, Any], shape: Sequence[int], kept: Sequence[int] | None, *,
            image_size: tuple[int, int] | None = None, pixel_scale: float = 1.0,
            why_not: str = "") -> tuple[SideFiles | None, list[str]]:
    """The files to write beside the output of an operation on the stack ``inputs[0]`` (of ``shape``, BDHW) whose
    section ``i`` is the input's ``kept[i]`` (None: the output does not keep sections one to one, ``why_not`` says
    why), its images ``image_size`` (width, height; default the input's) of pixels ``pixel_scale`` times the
    input's: None where there are none to write (or the ``side_files`` option says not to), and the notices of the
    plan (why none are written)."""
    stack = inputs[0]
    if not options.get("side_files") or remote.remote_path(stack) is not None:  # a URL: no files beside it are read
        return None, []
    if inputs.projects is None and not _any_beside(stack):  # a project (over HTTP) looks beneath its data root
        return None, []
    return tomography.sidefiles.in_step(inputs, shape, kept, image_size=image_size, pixel_scale=pixel_scale,
                                        why_not=why_not)


def unchanged(inputs: Inputs, options: Mapping[str, Any], shape: Sequence[int]) -> tuple[SideFiles | None, list[str]]:
    """:func:`in_step` for an output of the input's sections, in their order, and of its images' size and pixel size
    (a filter, a copy)."""
    return in_step(inputs, options, shape, range(shape[section_axis(shape)]))


def _any_beside(stack: Path) -> bool:
    """Whether any of the names a side file may have is taken beside the local file ``stack``: one ``stat`` each."""
    return any(os.path.lexists(name) for names in side_names(os.fspath(stack)).values() for name in names)
