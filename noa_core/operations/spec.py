"""How a file operation is declared: its parameters (typed, with help, defaults and checks) and what it does.

A declaration is plain data plus light functions (warm-up cases, a result's text); the functions that do the
work are named by :class:`Implementation` references, so importing one loads nothing heavy (no NumPy, no
numba): ``noa --help`` lists every operation from their declarations. The doors derive their
surface from it: the CLI command (:mod:`noa_cli.commands`), the HTTP routes and job type
(:mod:`noa_server.routes`), the Dask tasks and warmup (:mod:`noa_core.run`).
"""

from __future__ import annotations

import contextvars
import importlib
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from noa_core import compute, io, limits  # compute, io: lazy faces, their modules load on first use
from noa_core.errors import DTypeError, ParameterError
from noa_core.io import read_options

if TYPE_CHECKING:
    from noa_core.array import Array
    from noa_core.io import Metadata, Probe
    from noa_core.operations.plan import Plan


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of a parameter that must be given


# -- the work, referred to by name ------------------------------------------------------------------

IMPLEMENTATIONS = "noa_core.operations.implementations"  # the package of the built-in operations' work


@dataclass(frozen=True)
class Implementation:
    """The function ``function`` of the module ``module``, imported on its first call.

    A declaration names the functions that do its work this way, so that importing it loads none of their
    modules (NumPy, the domain modules): ``noa --help`` imports every declaration, and a command line loads
    only what its call runs. Plain data, it pickles as its two names (a :class:`FileTask` travels into Dask
    tasks, where the module is imported again)."""

    module: str
    function: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.function)(*args, **kwargs)


def implemented(operation: str, function: str) -> Implementation:
    """The function ``function`` of the built-in operation ``operation``'s implementation module
    (``noa_core.operations.implementations.OPERATION``)."""
    return Implementation(f"{IMPLEMENTATIONS}.{operation}", function)


# -- parameter types: what a value may be, checked the same way for every door ---------------------


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ParameterError(f"{value!r} is not an integer", name)
    try:
        return operator.index(value)
    except TypeError:
        raise ParameterError(f"{value!r} is not an integer", name) from None


def _bounds(low: float | None, high: float | None) -> str:
    """What a value outside ``low..high`` is told: 'must be >= 0', 'must be between 1 and 3'."""
    shown = lambda v: f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    if low is not None and high is not None:
        return f"must be between {shown(low)} and {shown(high)}"
    return f"must be >= {shown(low)}" if low is not None else f"must be <= {shown(high)}"


def _in_range(name: str, value: int, low: int | None, high: int | None) -> int:
    if (low is not None and value < low) or (high is not None and value > high):
        raise ParameterError(f"{value} {_bounds(low, high)}", name)
    return value


@dataclass(frozen=True)
class Flag:
    """True or false (a CLI switch)."""

    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ParameterError(f"{value!r} is not true or false", name)
        return value


@dataclass(frozen=True)
class Integer:
    """One integer within ``low..high`` (either bound may be open)."""

    low: int | None = None
    high: int | None = None

    def check(self, name: str, value: Any) -> int:
        return _in_range(name, _integer(name, value), self.low, self.high)

    def parse(self, name: str, text: str) -> int:
        """The integer written as text ('42')."""
        try:
            return int(text.strip())
        except ValueError:
            raise ParameterError(f"{text!r} is not a valid integer", name) from None


@dataclass(frozen=True)
class Integers:
    """A list of integers: comma-separated on the CLI ('0,1,3,2'), a JSON array over HTTP."""

    min_length: int = 1
    max_length: int | None = None
    low: int | None = None
    high: int | None = None

    def check(self, name: str, value: Any) -> tuple[int, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ParameterError(f"{value!r} is not a list of integers", name)
        values = tuple(_in_range(name, _integer(name, v), self.low, self.high) for v in value)
        _check_length(name, len(values), self.min_length, self.max_length)
        return values

    def parse(self, name: str, text: str) -> tuple[int, ...]:
        """The list written as text, '0,1,3,2' (spaces allowed)."""
        return _parse_list(name, text, int, "integers")


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(f"{value!r} is not a number", name)
    if not math.isfinite(value):
        raise ParameterError(f"{value!r} is not a finite number", name)
    return float(value)


def _real_in_range(name: str, value: float, low: float | None, high: float | None) -> float:
    if (low is not None and value < low) or (high is not None and value > high):
        raise ParameterError(f"{value:g} {_bounds(low, high)}", name)
    return value


@dataclass(frozen=True)
class Real:
    """One finite number within ``low..high`` (either bound may be open): a pixel size, an angle."""

    low: float | None = None
    high: float | None = None

    def check(self, name: str, value: Any) -> float:
        return _real_in_range(name, _real(name, value), self.low, self.high)

    def parse(self, name: str, text: str) -> float:
        """The number written as text ('1.5', '2e-3')."""
        try:
            return float(text.strip())
        except ValueError:
            raise ParameterError(f"{text!r} is not a valid number", name) from None


@dataclass(frozen=True)
class Reals:
    """A list of finite numbers: comma-separated on the CLI ('0.1,99.9'), a JSON array over HTTP."""

    min_length: int = 1
    max_length: int | None = None
    low: float | None = None
    high: float | None = None

    def check(self, name: str, value: Any) -> tuple[float, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ParameterError(f"{value!r} is not a list of numbers", name)
        values = tuple(_real_in_range(name, _real(name, v), self.low, self.high) for v in value)
        _check_length(name, len(values), self.min_length, self.max_length)
        return values

    def parse(self, name: str, text: str) -> tuple[float, ...]:
        """The list written as text, '0.1,99.9' (spaces allowed)."""
        return _parse_list(name, text, float, "numbers")


@dataclass(frozen=True)
class PerAxis(Reals):
    """One number for every axis, or one for each of D,H,W: one or three, never two."""

    max_length: int | None = 3

    def check(self, name: str, value: Any) -> tuple[float, ...]:
        values = super().check(name, value)
        if len(values) == 2:
            raise ParameterError("2 values given; give one for every axis, or three (D,H,W)", name)
        return values


def _parse_list(name: str, text: str, convert: Callable[[str], Any], words: str) -> tuple:
    """A comma-separated list typed on the CLI ('0,1,3,2', spaces allowed), each part ``convert``ed."""
    try:
        return tuple(convert(part) for part in text.replace(" ", "").split(","))
    except ValueError:
        raise ParameterError(f"{text!r} is not a comma-separated list of {words}", name) from None


def _check_length(name: str, count: int, low: int, high: int | None) -> None:
    if count < low or (high is not None and count > high):
        wanted = f"{low}" if high == low else f"{low} to {high if high is not None else 'any'}"
        raise ParameterError(f"{count} values given, {wanted} expected", name)


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of words; ``spelling`` maps other spellings a user may type onto them
    (the CLI's ``--order f``, ``--dtype f4``); HTTP bodies must use the words themselves."""

    values: tuple[str, ...]
    spelling: Callable[[str], str] | None = None

    def check(self, name: str, value: Any) -> str:
        if self.spelling is not None and isinstance(value, str) and value not in self.values:
            value = self.spelling(value)
        if value not in self.values:
            raise ParameterError(f"{value!r} is not one of {', '.join(self.values)}", name)
        return value


@dataclass(frozen=True)
class Text:
    """Free text of bounded length (an expression, a label); ``pattern``: the grammar of the words accepted, for
    the HTTP schema (a JSON Schema regex); the operation checks them itself, in its words."""

    min_length: int = 1
    max_length: int | None = None
    pattern: str | None = None

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise ParameterError(f"{value!r} is not text", name)
        if len(value) < self.min_length or (self.max_length is not None and len(value) > self.max_length):
            raise ParameterError(f"{len(value)} characters, {self.min_length} to {self.max_length or 'any'} "
                                 "expected", name)
        return value


@dataclass(frozen=True)
class Name:
    """A name from a grammar (a point group): ``read(text, param)`` returns its canonical spelling or raises
    ParameterError saying why it is none; ``pattern`` is the same grammar as a JSON Schema regex (HTTP)."""

    pattern: str
    read: Callable[[str, str], str]
    max_length: int = 16

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or len(value) > self.max_length:
            raise ParameterError(f"{value!r} is not a name of at most {self.max_length} characters", name)
        return self.read(value, name)


@dataclass(frozen=True)
class InputFile:
    """The path of a file an operation reads beside its inputs (an EER gain). Each door resolves it as it
    resolves inputs: the CLI and Python take it as given; the service takes a path relative to its data
    root, checked and opened as ``src`` is (refused outside the root, naming the parameter), and refuses
    it with uploads."""

    max_length: int = 4096

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, (str, Path)) or not str(value):
            raise ParameterError(f"{value!r} is not a file path", name)
        if len(str(value)) > self.max_length:
            raise ParameterError(f"a path of {len(str(value))} characters; at most {self.max_length}", name)
        return str(value)


@dataclass(frozen=True)
class ProjectFolder:
    """The folder the paths named inside an input are relative to (a particle file's project folder). The CLI and
    Python take it as given; the service takes a path relative to its data root and opens every path named inside
    a file beneath it (:class:`noa_server.sandbox.Sandbox`), and refuses it with uploads."""

    max_length: int = 4096

    def check(self, name: str, value: Any) -> str:
        return InputFile(self.max_length).check(name, value)


# Parameters that name files or folders of the machine the operation runs on: the service resolves them under
# its data root, and an upload (which has none) does not take them.
SERVER_PATHS = (InputFile, ProjectFolder)
ParamType = Flag | Integer | Integers | Real | Reals | Choice | Text | Name | InputFile | ProjectFolder
Door = Literal["cli", "http"]


@dataclass(frozen=True)
class Param:
    """One parameter of an operation.

    Attributes:
        name: the Python and JSON name (``per_batch``).
        type: what a value may be (:class:`Flag`, :class:`Integer`, ...).
        help: one sentence for ``--help`` and the OpenAPI description.
        default: the value when not given; None means "not given" (the operation decides);
            :data:`REQUIRED` means it must be given.
        flags: CLI spellings (default ``--per-batch``); ``"--as-stack/--as-volume"`` is a
            true/false/unset switch pair.
        argument: on the CLI, a positional argument instead of an option.
        doors: where the parameter is offered ('cli', 'http').
    """

    name: str
    type: ParamType
    help: str
    default: Any = None
    flags: tuple[str, ...] = ()
    argument: bool = False
    doors: frozenset[Door] = frozenset({"cli", "http"})

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    def words(self, value: Any) -> str:
        """``value`` as a user types it on the CLI: ``--lowpass 5``, ``--axes 0,1,3,2``, ``--depth``."""
        flags = self.cli_flags[0].split("/")
        if isinstance(self.type, Flag):
            return flags[0] if value else (flags[1] if len(flags) > 1 else "--no-" + flags[0][2:])
        if isinstance(value, (tuple, list)):
            text = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        else:
            text = f"{value:g}" if isinstance(value, float) else str(value)
        return text if self.argument else f"{flags[0]} {text}"

    def check(self, value: Any) -> Any:
        """``value`` checked against the type; None stands for 'not given' where the default is None."""
        if value is None and self.default is None:
            return None
        return self.type.check(self.name, value)


# NumPy's name for a type spelling ('f4' -> 'float32'); the text itself when NumPy knows none.
element_type_name = Implementation(f"{IMPLEMENTATIONS}.element_types", "element_type_name")


# Element type names an operation may convert to (noa_core.array.dtypes.SCALAR_NAMES, without importing NumPy;
# a test keeps the two equal).
ELEMENT_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128")

# -- parameters most operations share -------------------------------------------------------------

# Reading: each format declares its read options, their names and defaults (noa_core.io.read_options); here is
# what the doors say of each (a test keeps every one of them here). MRC's as_stack and as_volume are one switch.
AS_STACK = Param("as_stack", Flag(), "Read an ambiguous MRC file as an image stack (true) or a volume (false).",
                 flags=("--as-stack/--as-volume",))


def _read_option(name: str, kind: ParamType, text: str) -> Param:
    """The parameter of the read option ``name``: its type and help here, the default its format declares."""
    return Param(name, kind, text, default=read_options.default(name))


SERIES = _read_option("series", Integer(0, 10_000), "TIFF series to read (default 0).")
CHANNEL = _read_option("channel", Integer(0, 10_000), "TIFF or OME-Zarr channel (C axis or RGB sample) to read; "
                       "needed when the channels cannot be the batch axis.")
LEVEL = _read_option("level", Integer(0, 100), "TIFF or OME-Zarr pyramid level to read (default 0, the full "
                     "resolution).")
# EER movies (noa_core.io.eer): refused, naming the option, for any other input.
EER_GROUP = _read_option("eer_group", Integer(1, 65535), "EER: hardware frames summed into each fraction (default "
                         "1), as RELION's --eer_grouping (whose default is 40).")
EER_GROUP_LAST = _read_option("eer_group_last", Choice(("drop", "keep")), "EER: frames left over when --eer-group "
                              "does not divide the count: drop (with a notice, as RELION does) or keep (a last, "
                              "smaller fraction).")
EER_UPSAMPLING = _read_option("eer_upsampling", Integer(1, 3), "EER: grid of the fractions: 1 (the detector's "
                              "pixels, 4K), 2 (8K) or 3 (16K), from the events' sub-pixel bits as RELION's "
                              "--eer_upsampling.")
GAIN = _read_option("gain", InputFile(), "EER: gain file multiplying each fraction (float32 output), as RELION's "
                    "motion correction: a .gain TIFF is multiplicative, any other (MRC counts) becomes mean/gain with "
                    "0 kept (defects read 0); rows as stored (RELION's TIFF reader flips .gain images and loadEERGain "
                    "flips them back); a gain of the detector's size is repeated onto a finer grid, a finer gain "
                    "summed. Over HTTP: a path under the data root (paths mode and jobs; refused with uploads).")
GAIN_FLIP_Y = _read_option("gain_flip_y", Flag(), "EER: turn the gain upside down (after --gain-rotate), as "
                           "RELION's --gain_flip 1.")
GAIN_ROTATE = _read_option("gain_rotate", Integer(0, 3), "EER: rotate the gain N x 90 degrees clockwise with row 0 "
                           "at the top (relion_display's view), as RELION's --gain_rot N and MotionCor2's -RotGain N.")
EER_READING = (EER_GROUP, EER_GROUP_LAST, EER_UPSAMPLING, GAIN, GAIN_FLIP_Y, GAIN_ROTATE)
PROJECT_DIR = _read_option("project_dir", ProjectFolder(), "Particle files (RELION .star, cryoSPARC .cs): the "
                           "project folder their rows' paths are relative to (default: the current folder, where "
                           "RELION and cryoSPARC run; over HTTP: the data root, or a folder under it).")
READING = (AS_STACK, SERIES, CHANNEL, LEVEL, *EER_READING, PROJECT_DIR)
DEVICE = Param("device", Choice(("cpu", "cuda")), "Where kernels run: cpu or cuda.", default="cpu",
               doors=frozenset({"cli"}))
# Parameters an output's command line leaves out: how inputs were read, where kernels ran. By identity: a dataclass
# comparison, field by field, cost a small file's request 0.2 ms.
_NOT_IN_COMMAND = frozenset(map(id, (*READING, DEVICE)))


# How an MRC output stores uint8 data (noa_core.io.mrc.UINT8_MODES; that module loads NumPy, a test keeps
# these equal). For the operations that can write uint8 from any input (copy, ewise).
UINT8_MODE = Param("uint8_mode", Choice(("widen", "imod")),
                   "MRC outputs: store uint8 as uint16 (widen: every reader agrees) or as IMOD's unsigned mode 0 "
                   "(imod: only IMOD reads 0..255; MRC2014 readers see signed bytes).", default="widen")
# How an OME-Zarr output is stored; every operation that writes files takes these (see Operation).
CHUNKS = Param("chunks", Integers(2, 4, 1, 1 << 30),
               "OME-Zarr outputs: the chunk shape, one size per stored axis (t, z, y, x; t and z only when larger "
               "than 1), e.g. 8,512,512 (default: whole sections, several up to 16 MiB a chunk).")
SHARDS = Param("shards", Integers(2, 4, 1, 1 << 30),
               "OME-Zarr 0.5 outputs: the shard shape, one size per stored axis as for chunks, each a multiple of "
               "the chunk size along its axis: the chunks of a shard are stored in one file (zarr v3 sharding; "
               "default: none, a file per chunk; with shards, chunks default to whole rows of the shard up to 1 MiB). "
               "A tile holds whole shards of every level: at most 16 MiB.")
NGFF = Param("ngff", Choice(("0.4", "0.5")),
             "OME-Zarr outputs: the NGFF version: 0.4 (zarr v2, what most viewers read) or 0.5 (zarr v3).",
             default="0.4")
# Pixel sizes a user may give, in Å (every pixel-size parameter's range): beyond them a typing mistake, and what
# is computed from them (Nyquist, shells, a scale bar's length in pixels) would overflow or divide by zero.
SMALLEST_PIXEL_SIZE = 1e-6  # (1e-45 would be a float32 denormal)
LARGEST_PIXEL_SIZE = 1e9
PIXEL_SIZE = Real(SMALLEST_PIXEL_SIZE, LARGEST_PIXEL_SIZE)
PIXEL_SIZES = PerAxis(low=SMALLEST_PIXEL_SIZE, high=LARGEST_PIXEL_SIZE)

# The output's pixel size, as relion_image_handler --angpix and e2proc2d --apix set it on the way (a TIFF
# without one converted to MRC); an operation that resamples declares its own (rescale's target).
OUTPUT_PIXEL_SIZE = Param("pixel_size", PIXEL_SIZES,
                          "Pixel size of the output in Å, replacing the input's: one value for every axis, or D,H,W.")
LEVELS = Param("levels", Integer(1, 64),
               "OME-Zarr outputs: levels of the multiscale pyramid in all, full resolution included, each halving "
               "height and width (and the depth of a volume; never the sections of a stack or tilt series) from "
               "the one above (default 1).")
PYRAMID = Param("pyramid", Flag(), "OME-Zarr outputs: as many levels as it takes for the smallest level's height "
                "and width to be at most 256.", default=False)
# How a pyramid's levels are made (noa_core.io.omezarr.DOWNSAMPLING, which loads NumPy; a test keeps them equal)
DOWNSAMPLE = Param("downsample", Choice(("mean", "nearest")),
                   "OME-Zarr pyramids: a level's pixel from the 2x2(x2) box above: mean (images; the default) or "
                   "nearest (its first value: labels and masks).")
STORE_OUTPUT = (CHUNKS, SHARDS, NGFF, LEVELS, PYRAMID, DOWNSAMPLE)
# How a particle output (.star, .cs) stores its images (noa_core.io.particles); refused for any other output.
STACK_PER_INPUT = Param("stack_per_input", Flag(),
                        "Particle outputs (.star, .cs): one stack per source stack instead of one beside the output "
                        "(b.star -> b.mrcs): the images of each go to the folder named as the output without its "
                        "extension, as NAME.mrcs, NAME the source stack's file name without its extension "
                        "(Particles/mic001.mrcs -> b/mic001.mrcs); sources of one name in different folders become "
                        "NAME-2.mrcs, NAME-3.mrcs, ... in the order the output's rows first name them. Each row names "
                        "its image's section in its own stack, the rows in the output's order.", default=False)
# The files beside a tilt series (noa_core.tomography.sidefiles), kept in step with the output's sections: a
# parameter of the operations that keep them (sections, bin, flip, ...), not of every writing one.
SIDE_FILES = Param("side_files", Flag(),
                   "Tilt series: write the files beside the input (TS.rawtlt, TS.tlt, TS.st.mdoc or TS.mdoc, TS.star) "
                   "beside the output too, named after it, with the rows of the sections it keeps in its order (and "
                   "its pixel size); none where they disagree with the stack or the output does not keep sections "
                   "one to one (a notice says why).", default=True, flags=("--side-files/--no-side-files",))
# what every writing operation takes besides its own parameters
OUTPUT = (OUTPUT_PIXEL_SIZE, *STORE_OUTPUT, STACK_PER_INPUT)
# what the output format, not the operation, decides with
WRITE_OPTIONS = ("uint8_mode", "chunks", "shards", "ngff", "levels", "pyramid", "downsample", "stack_per_input")


class Options(Mapping[str, Any]):
    """The checked values of one call's parameters, by name (``options["axes"]``, also ``options.axes``): made
    once from the declaration (:meth:`Operation.options`), frozen. ``command`` is the operation's name and the
    options given, as typed: "noa filter --lowpass 5"."""

    __slots__ = ("_values", "command")

    def __init__(self, values: Mapping[str, Any], command: str = "") -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "command", command)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"options are frozen: {name} cannot be set")

    def __reduce__(self) -> tuple:
        return Options, (self._values, self.command)  # picklable: a task's options travel to Dask workers

    def __repr__(self) -> str:
        return f"Options({self._values!r})"

    def output_label(self, detail: str = "") -> str:
        """The label an output records of what made it: the command, and ``detail`` (e.g. the range a
        scale found) after a colon. The format cuts it to what its header holds."""
        return f"{self.command}: {detail}" if detail else self.command

    def write_options(self) -> dict[str, Any]:
        """The output format's own choices among these options (:data:`WRITE_OPTIONS`)."""
        return {name: self[name] for name in WRITE_OPTIONS if name in self}

    def input_pixel_size(self, meta: Metadata) -> float | None:
        """The input's pixel size in Å: ``angpix`` when given, else the header's width axis (None: unknown)."""
        if self.get("angpix") is not None:
            return self.angpix
        return meta.width_pixel_size()

    def reading(self) -> dict[str, Any]:
        """How inputs are read, as :func:`noa_core.io.read` takes it (MRC stack or volume, TIFF series, channel and
        level, EER grouping and gain)."""
        as_stack = self.get("as_stack")
        # the defaults (and off, 0) stand for "not given": only options given are refused for other formats
        eer = {param.name: self.get(param.name) for param in EER_READING
               if self.get(param.name) not in (None, False, param.default)}
        return {"as_stack": as_stack is True or None, "as_volume": as_stack is False or None,
                **{param.name: self.get(param.name) for param in (SERIES, CHANNEL, LEVEL, PROJECT_DIR)}, **eer}


class Inputs(Sequence[Path]):
    """The input files of one call (a, b, c, ... in order) and how they are read (the call's options, and the
    ``projects`` that open the paths a particle file names: :data:`noa_core.io.particles.Projects`, None for this
    machine's folders): :meth:`open` reads one, lazily, and keeps what the reading said in :attr:`notices`
    (frames an EER grouping dropped, the TIFF series chosen) for the caller to hand on with the output."""

    def __init__(self, paths: Sequence[str | Path], options: Options, projects: Any = None) -> None:
        self.paths = [io.remote.as_path(p) for p in paths]
        self.reading = options.reading()
        self.projects = projects
        self.notices: list[str] = []

    def __getitem__(self, index):
        return self.paths[index]

    def __len__(self) -> int:
        return len(self.paths)

    def open(self, path: str | Path, tiles: bool = False) -> tuple[Array, Metadata]:
        """``path`` read lazily, header first; ``tiles``: a plan's source, read only tile by tile
        (:func:`noa_core.io.read`)."""
        array, meta = io.read(path, tiles=tiles, projects=self.projects, **self.reading)  # within the voxel limit
        self.notices.extend(n for n in meta.notices if n not in self.notices)
        return array, meta

    def open_real(self, path: str | Path, what: str) -> tuple[Array, Metadata]:
        """:meth:`open` for an operation ``what`` that takes real images: complex data are refused."""
        array, meta = self.open(path)
        if array.dtype.kind == "c":
            raise DTypeError(f"{path}: {what} takes real images; the file holds {array.dtype} values")
        return array, meta

    def probe(self, path: str | Path) -> Probe:
        """What :meth:`open` would give, from the header alone (no data read or decompressed)."""
        probe = io.probe(path, projects=self.projects, **self.reading)
        limits.check_input_size(probe.shape, str(path))
        return probe


def _told(plan: Plan, notices: list[str]) -> Plan:
    """``plan`` whose notices start with ``notices`` (what reading its inputs said; each once)."""
    plan.notices = list(dict.fromkeys([*notices, *plan.notices]))
    return plan


# -- the declaration ------------------------------------------------------------------------------

PlanFunction = Callable[[Inputs, Options], "Plan"]
# Several outputs from one input (a split): [(name suffix, plan), ...], each written beside the others.
PlansFunction = Callable[[Inputs, Options], "list[tuple[str, Plan]]"]
# A data set written from all the inputs: (inputs, output, options, overwrite, progress, resume) -> {"output",
# "notices"}.
DataSetFunction = Callable[[Inputs, Path, Options, bool, Any, bool], dict]
# A report's inputs (one, or several when max_inputs > 1) and options -> the JSON-ready result.
ReportFunction = Callable[[Inputs, Options], dict]
# An edit of the input file itself (a header): (path, options, dry_run) -> the change, old and new values.
EditFunction = Callable[[Path, Options, bool], dict]
# (dtype, shape) of a small warmup input -> [(dtype of the input to run on, options), ...]
WarmupCases = Callable[[str, tuple[int, ...]], list[tuple[str, dict[str, Any]]]]


@dataclass(frozen=True)
class Query:
    """A question an operation answers from one parameter's value alone, reading no file (``noa symmetrize
    --list C4``: a point group's matrices). The CLI offers ``param`` as an option of ``noa NAME`` that,
    given, prints ``text(answer(value))`` instead of running (IN OUT left out); HTTP answers ``GET
    /v1/query/NAME?PARAM=VALUE`` with ``answer(value)``, described by the ``result`` TypedDict."""

    param: Param
    answer: Callable[[Any], dict]
    text: Callable[[dict], str]
    result: type | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Operation:
    """One file operation, declared once; every door derives its surface from this.

    An operation is of one of four kinds, each a class of its own: :class:`Writes` (one output file),
    :class:`WritesSeveral` (a folder of outputs from one input), :class:`Reports` (a JSON-ready result) and
    :class:`Edits` (its input changed in place). :func:`noa_core.run.execute` runs an operation of any kind,
    for every door (CLI, HTTP, jobs, Dask, warm-up); each door builds its surface for a kind in one place.

    Attributes:
        name: the command, route and job type (``noa NAME``, ``/v1/upload/NAME``).
        summary: one line: the CLI's short help and the routes' summary.
        examples: shell lines (``noa NAME ...``) for ``--help`` and the README table.
        params: parameters in CLI order.
        details: more help text for ``noa NAME --help``.
        max_inputs: how many input files it reads: 1, or more named a, b, c, ... (the first is
            the pair's input in a batch; the others are shared by every pair; a report gets them all
            as one list, as a plan does).
        min_inputs: the fewest it reads (two half maps for an FSC); the HTTP schemas say so, and the operation
            refuses fewer in its own words.
        reads_data: the operation reads every voxel (a service's voxel limit applies to its inputs); False for
            reports of headers alone, which describe files of any size.
        warmup: the kernel variants to compile ahead of time (``noa warmup``): option sets to run
            on small inputs of each file element type.
        needs_one_of: parameters of which at least one must be given (an edit with nothing to change is refused).
    """

    # What the kind does with files, for the doors' surfaces: writes one output "file", a "folder" of outputs, or
    # nothing (None); changes its input in place.
    writes: ClassVar[Literal["file", "folder"] | None] = None
    changes_input: ClassVar[bool] = False

    name: str
    summary: str
    examples: tuple[str, ...]
    params: tuple[Param, ...] = ()
    details: str = ""
    max_inputs: int = 1
    min_inputs: int = 1
    reads_data: bool = True
    warmup: WarmupCases | None = None
    needs_one_of: tuple[str, ...] = ()
    _by_name: dict[str, Param] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params})
        unknown = set(self.needs_one_of) - set(self._by_name)
        if unknown:
            raise ValueError(f"operation {self.name!r}: needs_one_of names no parameter {sorted(unknown)}")

    def _with_output_params(self) -> None:
        """The options of image outputs (:data:`OUTPUT`: pixel size, OME-Zarr chunks and version, particle
        stacks) added."""
        object.__setattr__(self, "params", self.params + tuple(
            p for p in OUTPUT if p.name not in {q.name for q in self.params}))

    def input_files(self, options: Mapping[str, Any]) -> list[Path]:
        """The files the :class:`InputFile` parameters given name (a gain, a mask, matrices): read beside the
        inputs, so, like them, never an output."""
        return [io.remote.as_path(options[p.name]) for p in self.params
                if isinstance(p.type, InputFile) and options.get(p.name) is not None]

    def params_for(self, door: Door) -> tuple[Param, ...]:
        return tuple(p for p in self.params if door in p.doors)

    def options(self, values: Mapping[str, Any] | None = None, **more: Any) -> Options:
        """Checked options from parameter values (defaults filled in); ParameterError names the first bad one.
        Options already checked pass through as they are."""
        if isinstance(values, Options) and not more:
            return values
        given = {**(values or {}), **more}
        unknown = sorted(set(given) - set(self._by_name))
        if unknown:
            raise ParameterError(f"{self.name}: unknown parameter {unknown[0]!r}; parameters: "
                                 f"{', '.join(self._by_name) or 'none'}")
        values = {}
        for name, param in self._by_name.items():
            if name in given:
                values[name] = param.check(given[name])
            elif param.required:
                raise ParameterError("is required", name)
            else:
                values[name] = param.default
        self.check_one_given(values)
        command = " ".join(["noa", self.name, *(
            param.words(values[param.name]) for param in self.params
            if id(param) not in _NOT_IN_COMMAND and values[param.name] is not None
            and (param.required or values[param.name] != param.default))])
        return Options(values, command)

    def check_one_given(self, values: Mapping[str, Any]) -> None:
        """ParameterError unless one of :attr:`needs_one_of` has a value."""
        if self.needs_one_of and all(values.get(name) is None for name in self.needs_one_of):
            raise ParameterError(f"nothing to {'change' if self.changes_input else 'do'}", among=self.needs_one_of)

    def check_inputs(self, count: int) -> None:
        if count > self.max_inputs:
            raise ParameterError(f"{self.name}: reads at most {self.max_inputs} input(s); {count} given")


@dataclass(frozen=True, eq=False, kw_only=True)
class Writes(Operation):
    """Writes one output file: ``plan(inputs, options)`` says what, from the input headers (no data read), and a
    driver writes it tile by tile (:mod:`noa_core.run`).

    Attributes:
        plan: ``(inputs, options) -> Plan``.
        chooses_format: the output format may differ from the input's (CLI ``--to``, upload ``format``).
        text_output: where the options may ask for a text file instead of an image (a table): the parameter
            values -> ``(extension, media type)`` of that file, or None for an image; the doors name outputs they
            choose with it (upload results, ``--out-dir``).
        show: where the output can also be drawn on the terminal (a CLI-only flag ``terminal``: ``noa NAME IN
            --terminal``, no OUT): ``(path, options, columns, lines) -> (text, notices)``: the text printed for
            each input, in pieces (a picture's text is written a band of lines at a time), and the notices a written
            output would have.
        query: a :class:`Query` it answers with no file (``noa NAME --PARAM VALUE``).
        image_output: the output may be an image file; False where it never is (a picture: ``noa preview``), so
            the options of image outputs (:data:`OUTPUT`) are not offered.
    """

    writes: ClassVar[Literal["file", "folder"] | None] = "file"

    plan: PlanFunction
    chooses_format: bool = False
    text_output: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None = None
    show: Callable[[Path, Options, int, int], tuple[Iterator[str], list[str]]] | None = None
    query: Query | None = None
    image_output: bool = True

    def __post_init__(self) -> None:
        if self.image_output:  # maybe OME-Zarr stores
            self._with_output_params()
        super().__post_init__()

    def task(self, values: Mapping[str, Any] | None = None, *, shared: Sequence[str | Path] = (),
             projects: Any = None, **more: Any) -> FileTask:
        """A :class:`FileTask` of this operation with checked options; ``shared`` are the inputs b, c, ...;
        ``projects`` open the paths particle files name (:class:`Inputs`)."""
        self.check_inputs(len(shared) + 1)
        return FileTask(self, self.options(values, **more), tuple(io.remote.as_path(p) for p in shared), projects)


@dataclass(frozen=True, eq=False, kw_only=True)
class WritesSeveral(Operation):
    """Writes several output files from one input (a split): ``plans(inputs, options)`` gives ``[(suffix,
    plan), ...]``, the outputs named ``STEM + suffix`` in an output folder, all written or none
    (:func:`noa_core.run.local.write_several`)."""

    writes: ClassVar[Literal["file", "folder"] | None] = "folder"

    plans: PlansFunction

    def __post_init__(self) -> None:
        if self.max_inputs != 1:
            raise ValueError(f"operation {self.name!r}: an operation writing several outputs reads one input")
        self._with_output_params()
        super().__post_init__()

    def task(self, values: Mapping[str, Any] | None = None, *, projects: Any = None, **more: Any) -> FileTask:
        """A :class:`FileTask` of this operation with checked options (``projects``: see :class:`Inputs`)."""
        return FileTask(self, self.options(values, **more), projects=projects)


@dataclass(frozen=True, eq=False, kw_only=True)
class WritesDataSet(Writes):
    """Writes a data set from all its inputs together (micrographs and coordinates -> particle stacks and the
    particle file naming them): ``write(inputs, output, options, overwrite, progress, resume)`` writes every file
    or none (with ``resume``: keeps the parts it finished should it stop, and keeps those it finds) and returns
    ``{"output", "notices"}``. Its doors are a writing operation's (``noa NAME INPUTS... -o OUT``, ``--out-dir``:
    one output per input; over HTTP ``srcs`` and ``dst``); no tile plan: it writes its own files. ``in_parts``: its
    write runs its independent parts (extract: micrographs) through :data:`PARTS` when a driver sets it, so a cluster
    calls it in the caller's process and runs the parts as its tasks."""

    write: DataSetFunction
    plan: PlanFunction | None = None  # type: ignore[assignment]  # it writes its own files, tile by tile plans none
    image_output: bool = False
    in_parts: bool = False


class PartsRunner(Protocol):
    """How a data set's independent parts run elsewhere (:data:`PARTS`): ``runner(fn, calls, done)`` runs
    ``fn(*call)`` for each call, ``threads`` at a time, and calls ``done(index, result)`` in this thread as each
    ends; at the first failure (or one raised by ``done``) it cancels the calls not ended and raises it."""

    threads: int

    def __call__(self, fn: Callable[..., Any], calls: Sequence[tuple], done: Callable[[int, Any], None]) -> None: ...


# Set by a driver running a WritesDataSet's parts as its tasks (noa_core.run.cluster); None: in this process.
PARTS: contextvars.ContextVar[PartsRunner | None] = contextvars.ContextVar("noa_parts", default=None)


@dataclass(frozen=True, eq=False, kw_only=True)
class Reports(Operation):
    """Reports on its input (the list of its inputs when ``max_inputs > 1``): ``report(input, options)`` gives a
    JSON-ready dict, shown by ``text`` on the CLI and described by the ``result`` TypedDict over HTTP. ``differs``:
    a check's, whether a result found its input inconsistent; the CLI then exits 1, as diff does."""

    report: ReportFunction
    text: Callable[[dict], str]
    result: type | None = None
    differs: Callable[[dict], bool] | None = None

    def describe(self, path: str | Path | Sequence[str | Path], values: Mapping[str, Any] | None = None,
                 **more: Any) -> dict:
        """The report on ``path`` (a list of paths when it reads several): its JSON-ready result."""
        return self.run_report(path, self.options(values, **more))

    def run_report(self, path: str | Path | Sequence[str | Path], options: Options, projects: Any = None) -> dict:
        """The report on ``path`` with checked ``options``, computed on the path its size calls for
        (:mod:`noa_core.compute.compute_path`); ``projects``: see :class:`Inputs`."""
        # several paths where max_inputs > 1, else one
        paths = ([io.remote.as_path(p) for p in path] if self.max_inputs > 1  # type: ignore[union-attr]
                 else [io.remote.as_path(path)])  # type: ignore[arg-type]
        self.check_inputs(len(paths))
        if not self.reads_data:  # a header alone: no compute path to choose, so no sizes to look up
            return self.report(Inputs(paths, options, projects), options)
        with compute.compute_path.for_size(io.formats.input_bytes(paths), self.name):
            return self.report(Inputs(paths, options, projects), options)


@dataclass(frozen=True, eq=False, kw_only=True)
class Edits(Operation):
    """Changes its input file in place (a header edit): ``edit(path, options, dry_run)`` returns the change (old
    and new values) as a JSON-ready dict, shown by ``text`` and described by ``result`` as a report's."""

    changes_input: ClassVar[bool] = True

    edit: EditFunction
    text: Callable[[dict], str]
    result: type | None = None
    reads_data: bool = False

    def __post_init__(self) -> None:
        if self.max_inputs != 1:
            raise ValueError(f"operation {self.name!r}: an operation editing its input reads one input")
        super().__post_init__()

    def apply(self, path: str | Path, values: Mapping[str, Any] | None = None, *, dry_run: bool = False,
              **more: Any) -> dict:
        """``path`` changed in place (with ``dry_run``, only what would change): the change as a JSON-ready dict."""
        return self.edit(io.remote.as_path(path), self.options(values, **more), dry_run)


@dataclass(frozen=True, eq=False)
class FileTask:
    """A writing operation with its checked options, to apply to any number of (input, output) pairs.

    ``shared`` are the inputs b, c, ... that every pair reads after its own input ``a``. Plain data
    (the operation's functions pickle by reference, its work as :class:`Implementation` names), so it travels
    into Dask tasks.

    Example: ``operations.get("permute").task(axes=(0, 1, 3, 2))``, then
    ``noa_core.run.local.write(task, src, dst)``.
    """

    operation: Writes | WritesSeveral
    options: Options
    shared: tuple[Path, ...] = ()
    projects: Any = None  # how the paths particle files name are opened (see Inputs); picklable for Dask

    @property
    def name(self) -> str:
        return self.operation.name

    @property
    def device(self) -> str:
        return self.options.get("device") or "cpu"

    def inputs(self, src: str | Path) -> list[Path]:
        """The input files (a, b, c, ...) of the pair whose input is ``src``."""
        return [io.remote.as_path(src), *self.shared]

    def reads(self, src: str | Path) -> list[Path]:
        """Every file read for the pair whose input is ``src``: its inputs and the input-file parameters'."""
        return [*self.inputs(src), *self.operation.input_files(self.options)]

    def plan(self, src: str | Path) -> Plan:
        """What the pair whose input is ``src`` writes, from the headers (no data is read)."""
        assert isinstance(self.operation, Writes)
        inputs = Inputs(self.inputs(src), self.options, self.projects)
        # plans may read statistics: on the path the inputs' size calls for
        with compute.compute_path.for_size(io.formats.input_bytes(inputs), f"planning {self.name}"):
            plan = self.operation.plan(inputs, self.options)
        return self._reading_all(src, self._with_pixel_size(_told(plan, inputs.notices)))

    def plans(self, src: str | Path) -> list[tuple[str, Plan]]:
        """The outputs of an operation writing several files from ``src``: (name suffix, plan) each."""
        assert isinstance(self.operation, WritesSeveral)
        inputs = Inputs(self.inputs(src), self.options, self.projects)
        with compute.compute_path.for_size(io.formats.input_bytes(inputs), f"planning {self.name}"):
            planned = self.operation.plans(inputs, self.options)
        if planned:  # told once, with the first output
            _told(planned[0][1], inputs.notices)
        return [(suffix, self._reading_all(src, self._with_pixel_size(plan))) for suffix, plan in planned]

    def _reading_all(self, src: str | Path, plan: Plan) -> Plan:
        """``plan`` whose inputs name every file it reads (an output that is one of them is refused)."""
        plan.inputs = list(dict.fromkeys([*plan.inputs, *self.reads(src)]))
        return plan

    def _with_pixel_size(self, plan: Plan) -> Plan:
        """``plan`` with the output pixel size the user gave (``--pixel-size``), where the operation takes
        the shared one (:data:`OUTPUT_PIXEL_SIZE`)."""
        given = self.options.get("pixel_size")
        if given is not None and self.operation._by_name.get("pixel_size") is OUTPUT_PIXEL_SIZE:
            plan.meta = plan.meta.with_pixel_size(given)
        return plan
