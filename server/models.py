"""Request and response bodies, and how each operation's parameters become a ``noa_core.ops`` call.

One parameter model per operation serves all three doors: upload routes read it from form
fields, path routes and jobs from JSON (where the request models add the server-side paths).
``call`` is the only place that knows an operation's signature in ``ops``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from annotated_types import Interval
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from noa_core import ops
from noa_core.dtypes import SCALAR_NAMES
from noa_core.expr import MAX_INPUTS, MAX_LENGTH

RelPath = Annotated[str, Field(min_length=1, max_length=1024, description="A path relative to the data root.")]
DType = Literal[SCALAR_NAMES]  # type: ignore[valid-type]
Format = Literal["mrc", "tiff"]


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON Schema's "integer" includes 2.0, which pydantic's strict mode (used for JSON bodies) refuses.
# (The bounds come first so that they land in the schema as minimum/maximum.)
Axis = Annotated[int, Interval(ge=0, le=3), BeforeValidator(_integral)]
Size = Annotated[int, Interval(ge=0, le=2**40), BeforeValidator(_integral)]
Index = Annotated[int, Interval(ge=0, le=10_000), BeforeValidator(_integral)]
Axes = Annotated[list[Axis], Field(
    min_length=4, max_length=4, description="New order of the BDHW axes, a permutation of 0,1,2,3.")]
Shape = Annotated[list[Size], Field(
    min_length=1, max_length=4, description="Target shape, padded on the left with 1s to BDHW.")]


def without_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def omittable(**kwargs: Any) -> Any:
    """A field left out for the default (None), but never null on the wire.

    Multipart forms have no null (a client would have to send the text 'null'), so these fields
    are typed without None: a value, when given, is validated as the type, and the schema shows
    neither null nor a null default.
    """
    return Field(None, json_schema_extra=without_default, **kwargs)


class OpParams(BaseModel):
    """How to read the inputs; every operation takes these."""

    op_name: ClassVar[str]
    writes: ClassVar[bool] = True  # the operation produces an output file
    checks_voxels: ClassVar[bool] = True  # the operation reads (or writes) every voxel

    as_stack: bool = omittable(description="Read an ambiguous MRC file as an image stack (true) or a volume (false).")
    series: Index = omittable(description="TIFF series to read (default 0).")

    def read(self) -> ops.ReadOptions:
        return ops.ReadOptions(as_stack=self.as_stack, series=self.series)

    def target_shapes(self) -> list[list[int]]:
        """Shapes the output may take beyond the inputs' (for the voxel limit)."""
        return []

    def call(self, inputs: list[Path], output: Path | None, *, overwrite: bool, progress: ops.Progress) -> Any:
        raise NotImplementedError


class InfoParams(OpParams):
    op_name = "info"
    writes = False
    checks_voxels = False  # only the header is read

    def call(self, inputs, output, *, overwrite, progress):
        return ops.info(inputs[0], self.read())


class StatsParams(OpParams):
    op_name = "stats"
    writes = False
    per_batch: bool = Field(False, description="Also give the statistics of each batch index.")

    def call(self, inputs, output, *, overwrite, progress):
        return ops.stats(inputs[0], per_batch=self.per_batch, read=self.read())


class PermuteParams(OpParams):
    op_name = "permute"
    axes: Axes

    def call(self, inputs, output, *, overwrite, progress):
        return ops.permute(inputs[0], output, self.axes, read=self.read(), overwrite=overwrite, progress=progress)


class BroadcastParams(OpParams):
    op_name = "broadcast"
    shape: Shape

    def target_shapes(self) -> list[list[int]]:
        return [self.shape]

    def call(self, inputs, output, *, overwrite, progress):
        return ops.broadcast(inputs[0], output, self.shape, read=self.read(), overwrite=overwrite, progress=progress)


class CopyParams(OpParams):
    op_name = "copy"
    order: Literal["C", "F", "K"] = Field("C", description="Memory order of the output: C, F, or K (keep the input's).")
    dtype: DType = omittable(description="Convert to this element type.")
    clamp: bool = Field(False, description="Clamp values to the range of dtype (NaN -> 0 for integers); without it, values that do not fit are refused (422).")

    def call(self, inputs, output, *, overwrite, progress):
        return ops.copy(inputs[0], output, order=self.order, dtype=self.dtype, clamp=self.clamp, read=self.read(),
                        overwrite=overwrite, progress=progress)


class EwiseParams(OpParams):
    op_name = "ewise"
    expression: str = Field(min_length=1, max_length=MAX_LENGTH,
                            description="Expression over the inputs a, b, c, ... e.g. 'a * b' (the CLI's language).")
    dtype: DType = omittable(description="Output element type (default: NumPy's result type).")

    def call(self, inputs, output, *, overwrite, progress):
        return ops.ewise(self.expression, inputs, output, dtype=self.dtype, read=self.read(), overwrite=overwrite,
                         progress=progress)


# -- server-side paths (JSON) ---------------------------------------------------------------------

# A misspelt option must fail, not be ignored; and JSON types are exact ("true" is not a boolean).
_STRICT = ConfigDict(extra="forbid", strict=True)


class PathRequest(BaseModel):
    """Adds where the inputs are and where the output goes, relative to the data root."""

    def input_paths(self) -> list[str]:
        raise NotImplementedError

    def output_path(self) -> str | None:
        return None


class _OneInput(PathRequest):
    path: RelPath

    def input_paths(self):
        return [self.path]


class _Output(PathRequest):
    dst: RelPath = Field(description="Output path relative to the data root; the extension picks the format.")
    overwrite: bool = Field(False, description="Replace dst if it exists.")

    def output_path(self):
        return self.dst


class _WritesOne(_Output):
    src: RelPath

    def input_paths(self):
        return [self.src]


class InfoRequest(InfoParams, _OneInput):
    model_config = _STRICT


class StatsRequest(StatsParams, _OneInput):
    model_config = _STRICT


class PermuteRequest(PermuteParams, _WritesOne):
    model_config = _STRICT


class BroadcastRequest(BroadcastParams, _WritesOne):
    model_config = _STRICT


class CopyRequest(CopyParams, _WritesOne):
    model_config = _STRICT


class EwiseRequest(EwiseParams, _Output):
    model_config = _STRICT
    srcs: list[RelPath] = Field(min_length=1, max_length=MAX_INPUTS, description="Inputs, named a, b, c, ... in order.")

    def input_paths(self):
        return list(self.srcs)


# -- jobs: any path request, tagged with its operation ---------------------------------------------


class InfoJob(InfoRequest):
    operation: Literal["info"]


class StatsJob(StatsRequest):
    operation: Literal["stats"]


class PermuteJob(PermuteRequest):
    operation: Literal["permute"]


class BroadcastJob(BroadcastRequest):
    operation: Literal["broadcast"]


class CopyJob(CopyRequest):
    operation: Literal["copy"]


class EwiseJob(EwiseRequest):
    operation: Literal["ewise"]


JobRequest = Annotated[Union[InfoJob, StatsJob, PermuteJob, BroadcastJob, CopyJob, EwiseJob],
                       Field(discriminator="operation")]


# -- responses -------------------------------------------------------------------------------------

Number = float | Literal["NaN", "Infinity", "-Infinity"]  # JSON has no non-finite numbers


class InfoResult(BaseModel):
    model_config = ConfigDict(extra="allow")
    path: str
    format: str
    dtype: str
    shape: list[int]
    strides: list[int]
    order: str
    kind: str
    ndim: int
    notices: list[str]


class BatchStats(BaseModel):
    batch: int
    min: Number
    max: Number
    mean: Number
    std: Number


class StatsResult(BaseModel):
    path: str
    shape: list[int]
    min: Number
    max: Number
    mean: Number
    std: Number
    per_batch: list[BatchStats] | None = None


class WriteResult(BaseModel):
    output: str = Field(description="The output path relative to the data root.")
    notices: list[str]


class Progress(BaseModel):
    done: int
    total: int


class JobStatus(BaseModel):
    id: str
    operation: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    cancel_requested: bool
    progress: Progress
    created: str
    started: str | None
    finished: str | None
    request: dict[str, Any]
    error: dict[str, Any] | None = Field(description="The problem (RFC 9457) when the job failed.")
    result: InfoResult | StatsResult | WriteResult | None = Field(description="The result once the job succeeded.")


class Health(BaseModel):
    status: str
    checks: dict[str, str] = {}
