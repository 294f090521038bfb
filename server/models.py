"""Request and response bodies, derived from the operation declarations (:mod:`noa_core.operations`).

For each operation: ``<Name>Params`` (its HTTP parameters; upload routes read them from form
fields), ``<Name>Request`` (the same plus server-side paths, a strict JSON body for path routes)
and ``<Name>Job`` (the same tagged with ``operation``, one member of the job union). The models are
built once per operation from its :class:`~noa_core.operations.Param` types, so a new operation
needs no edit here.
"""

from __future__ import annotations

import functools
import types
from typing import Annotated, Any, ClassVar, Literal, Self, Union

from annotated_types import Interval
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetJsonSchemaHandler, create_model, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from noa_core.errors import ParameterError
from noa_core.io import formats
from noa_core.operations import (
    Choice,
    Edits,
    Flag,
    Integer,
    Integers,
    Name,
    Operation,
    Param,
    PerAxis,
    Real,
    Reals,
    Reports,
    Text,
    WritesDataSet,
)
from noa_core.operations.spec import SERVER_PATHS, InputFile

RelPath = Annotated[str, Field(min_length=1, max_length=1024, description="A path relative to the data root.")]
Format = Literal[tuple(fmt.name for fmt in formats.FORMATS)]  # type: ignore[valid-type]


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def without_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def omittable(**kwargs: Any) -> Any:
    """A field left out for the default (None), but never null on the wire.

    Multipart forms have no null (a client would have to send the text 'null'), so these fields
    are typed without None: a value, when given, is validated as the type, and the schema shows
    neither null nor a null default.
    """
    return Field(None, json_schema_extra=without_default, **kwargs)


def _integer(low: int | None, high: int | None) -> Any:
    # JSON Schema's "integer" includes 2.0, which pydantic's strict mode (used for JSON bodies) refuses.
    # (The bounds come first so that they land in the schema as minimum/maximum.)
    return Annotated[int, Interval(ge=low, le=high), BeforeValidator(_integral)]


def _real(low: float | None, high: float | None) -> Any:
    return Annotated[float, Interval(ge=low, le=high), Field(allow_inf_nan=False)]


class NeverTwo:
    """The schema of a :class:`PerAxis` value: one or three, never two (the declaration refuses two)."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["not"] = {"minItems": 2, "maxItems": 2}
        return schema


def value_type(param: Param) -> Any:
    """The type (with its bounds, lengths or words) of one declared parameter's value on the wire."""
    kind = param.type
    if isinstance(kind, Flag):
        annotation: Any = bool
    elif isinstance(kind, Integer):
        annotation = _integer(kind.low, kind.high)
    elif isinstance(kind, Integers):
        annotation = Annotated[list[_integer(kind.low, kind.high)], Field(  # type: ignore[misc]
            min_length=kind.min_length, max_length=kind.max_length)]
    elif isinstance(kind, Real):
        annotation = _real(kind.low, kind.high)
    elif isinstance(kind, Reals):
        annotation = Annotated[list[_real(kind.low, kind.high)], Field(  # type: ignore[misc]
            min_length=kind.min_length, max_length=kind.max_length)]
        if isinstance(kind, PerAxis):
            annotation = Annotated[annotation, NeverTwo()]
    elif isinstance(kind, Choice):
        annotation = Literal[kind.values]
    elif isinstance(kind, Text):
        annotation = Annotated[str, Field(min_length=kind.min_length, max_length=kind.max_length,
                                          pattern=kind.pattern)]
    elif isinstance(kind, Name):  # the grammar as the schema's pattern; read (canonical) by the declaration
        annotation = Annotated[str, Field(min_length=1, max_length=kind.max_length, pattern=kind.pattern)]
    elif isinstance(kind, SERVER_PATHS):  # resolved under the data root as inputs are (execution.plan)
        annotation = RelPath
    else:
        raise TypeError(f"parameter {param.name}: no HTTP form for {kind!r}")
    return annotation


def _field(param: Param) -> tuple[Any, Any]:
    """``(annotation, FieldInfo)`` of one declared parameter."""
    annotation = value_type(param)
    if param.required:
        return annotation, Field(description=param.help)
    if param.default is None:
        return annotation, omittable(description=param.help)
    return annotation, Field(param.default, description=param.help)


class OpParams(BaseModel):
    """An operation's HTTP parameters; ``declaration`` is the operation."""

    declaration: ClassVar[Operation]

    @model_validator(mode="after")
    def _one_given(self) -> Self:
        try:
            self.declaration.check_one_given(self.values())
        except ParameterError as exc:
            raise ValueError(str(exc)) from None
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # The schema says what the validator checks, so that a client (or a fuzzer) can tell a valid request.
        schema = handler.resolve_ref_schema(handler(core_schema))
        names = getattr(cls, "declaration", None) and cls.declaration.needs_one_of
        if names:
            schema["anyOf"] = [{"required": [name]} for name in names if name in schema.get("properties", {})]
        return schema

    def values(self) -> dict[str, Any]:
        """The parameter values given (or defaulted) for :meth:`Operation.options`."""
        return {p.name: getattr(self, p.name, p.default) for p in self.declaration.params_for("http")}

    def input_files(self) -> dict[str, str]:
        """The :class:`~noa_core.operations.spec.InputFile` parameters given: name -> path as the client sent it."""
        return {p.name: getattr(self, p.name) for p in self.declaration.params_for("http")
                if isinstance(p.type, InputFile) and getattr(self, p.name, None) is not None}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


@functools.cache
def params_model(operation: Operation, *, uploads: bool = False) -> type[OpParams]:
    """The parameters of ``operation`` over HTTP; ``uploads``: the form of ``POST /v1/upload/NAME``, without the
    parameters that name a file or folder of the server (an upload has no data root to find them in)."""
    fields = {p.name: _field(p) for p in operation.params_for("http")
              if not (uploads and isinstance(p.type, SERVER_PATHS))}
    name = f"{_pascal(operation.name)}{'Upload' if uploads else ''}Params"
    model = create_model(name, __base__=OpParams, **fields)  # type: ignore[call-overload]
    model.declaration = operation
    return model


# -- server-side paths (JSON) ---------------------------------------------------------------------

# A misspelt option must fail, not be ignored; and JSON types are exact ("true" is not a boolean).
_STRICT = ConfigDict(extra="forbid", strict=True)


class PathRequest(BaseModel):
    """Adds where the inputs are and where the output goes, relative to the data root."""

    declaration: ClassVar[Operation]  # the operation, set on each request model (:func:`request_model`)

    def input_paths(self) -> list[str]:
        raise NotImplementedError

    def output_path(self) -> str | None:
        return None


class _OneInput(PathRequest):
    path: RelPath

    def input_paths(self) -> list[str]:
        return [self.path]


class _Output(PathRequest):
    dst: RelPath = Field(description="Output path relative to the data root; the extension picks the format.")
    overwrite: bool = Field(False, description="Replace dst if it exists.")

    def output_path(self) -> str | None:
        return self.dst


class _WritesOne(_Output):
    src: RelPath

    def input_paths(self) -> list[str]:
        return [self.src]


class _WritesSeveral(_Output):
    srcs: list[RelPath]

    def input_paths(self) -> list[str]:
        return list(self.srcs)


class _ReadsSeveral(PathRequest):
    srcs: list[RelPath]

    def input_paths(self) -> list[str]:
        return list(self.srcs)


class _Edits(_OneInput):
    dry_run: bool = Field(False, description="Say what would change; change nothing.")


class _WritesFolder(PathRequest):
    src: RelPath
    dst: RelPath = Field(description="Output folder relative to the data root (created when missing); every output "
                                     "is written there, or none.")
    overwrite: bool = Field(False, description="Replace outputs that exist.")

    def input_paths(self) -> list[str]:
        return [self.src]

    def output_path(self) -> str | None:
        return self.dst


def _paths_base(operation: Operation) -> tuple[type[PathRequest], dict[str, Any]]:
    """The paths of a request, by what the operation does with files: changes its input, writes a folder of
    outputs, writes a file, or reports; from one input or several."""
    if operation.changes_input:
        return _Edits, {}
    if operation.writes == "folder":
        return _WritesFolder, {}
    # a data set keeps the parts it finished should it stop, and a rerun (a job resumed) keeps them: the CLI's --resume
    resume = {"resume": (bool, Field(False, description="Keep the parts of the data set finished should the call stop "
                                                        "(each micrograph's stacks), and keep those found instead of "
                                                        "writing them again."))} \
        if isinstance(operation, WritesDataSet) else {}
    if operation.max_inputs == 1:
        return (_WritesOne if operation.writes == "file" else _OneInput), resume
    srcs = Field(min_length=operation.min_inputs, max_length=operation.max_inputs,
                 description="Inputs, named a, b, c, ... in order.")
    return (_WritesSeveral if operation.writes == "file" else _ReadsSeveral), {"srcs": (list[RelPath], srcs), **resume}


@functools.cache
def request_model(operation: Operation) -> type[OpParams]:
    """The JSON body of ``POST /v1/paths/NAME``: the parameters and the paths."""
    base, fields = _paths_base(operation)
    return _strict(f"{_pascal(operation.name)}Request", (params_model(operation), base), fields)


def _strict(name: str, bases: tuple[type, ...], fields: dict[str, Any]) -> Any:
    """A strict model class ``name`` deriving from ``bases`` with more ``fields`` (name: (annotation, info))."""

    def body(namespace: dict[str, Any]) -> None:
        namespace.update({"model_config": _STRICT, "__module__": __name__,
                          "__annotations__": {key: annotation for key, (annotation, _) in fields.items()},
                          **{key: info for key, (_, info) in fields.items()}})

    return types.new_class(name, bases, exec_body=body)


@functools.cache
def job_model(operation: Operation) -> type[OpParams]:
    """One member of the body of ``POST /v1/jobs``: a path request tagged with its operation."""
    tag = (Literal[operation.name], Field(description="The operation to run."))
    return _strict(f"{_pascal(operation.name)}Job", (request_model(operation),), {"operation": tag})


def job_request(operations: list[Operation]) -> Any:
    """The body of ``POST /v1/jobs``: any operation's job, told apart by ``operation``."""
    members = tuple(job_model(op) for op in operations)
    return Annotated[Union[members], Field(discriminator="operation")]  # noqa: UP007 (types listed at run time)


# -- responses -------------------------------------------------------------------------------------


class WriteResult(BaseModel):
    output: str = Field(description="The output path relative to the data root.")
    notices: list[str]


class WriteSeveralResult(BaseModel):
    outputs: list[str] = Field(description="The output paths relative to the data root, in order.")
    notices: list[str]


def result_model(operation: Operation) -> Any:
    """What a path route or job of ``operation`` answers with: its output, its outputs, or its result."""
    if operation.writes is not None:
        return {"file": WriteResult, "folder": WriteSeveralResult}[operation.writes]
    assert isinstance(operation, (Reports, Edits))
    return operation.result


class Progress(BaseModel):
    done: int
    total: int


@functools.cache
def job_status_model(operations: tuple[Operation, ...]) -> type[BaseModel]:
    """``GET /v1/jobs/{id}``: a job's state, its result typed as any operation's result."""
    results = tuple(dict.fromkeys(result_model(op) for op in operations))
    return create_model(
        "JobStatus",
        id=(str, ...),
        operation=(str, ...),
        status=(Literal["queued", "running", "succeeded", "failed", "cancelled"], ...),
        cancel_requested=(bool, ...),
        progress=(Progress, ...),
        created=(str, ...),
        started=(str | None, ...),
        finished=(str | None, ...),
        request=(dict[str, Any], ...),
        error=(dict[str, Any] | None, Field(description="The problem (RFC 9457) when the job failed.")),
        result=(Union[results + (type(None),)], Field(  # noqa: UP007 (types listed at run time)
            description="The result once the job succeeded.")),
    )



@functools.cache
def job_list_model(operations: tuple[Operation, ...]) -> type[BaseModel]:
    """``GET /v1/jobs``: a page of jobs and the cursor of the next."""
    return create_model(
        "JobList",
        jobs=(list[job_status_model(operations)], Field(  # type: ignore[misc]
            description="Newest first (by creation time, then id).")),
        next=(str | None, Field(description="The `cursor` of the next page; null on the last.")),
    )

class Health(BaseModel):
    status: str
    checks: dict[str, str] = {}
