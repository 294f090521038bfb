"""Queries: what an operation answers from one parameter alone, with no file (``GET /v1/query/symmetrize?list=C4``,
the matrices of a point group). One route per operation declaring a :class:`noa_core.operations.spec.Query`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query as QueryField
from fastapi.responses import JSONResponse

from noa_core.errors import ParameterError
from noa_core.operations import Operation, Writes
from noa_server.problems import documented
from noa_server.routes import Routes


def _endpoint(operation: Writes) -> Callable[..., Any]:
    """``GET /v1/query/NAME?PARAM=VALUE``: the query's answer as JSON; a value it refuses is a 400 problem
    naming the parameter."""
    query = operation.query
    assert query is not None
    name = query.param.name

    async def answer(**given: Any) -> JSONResponse:
        try:
            return JSONResponse(query.answer(query.param.check(given[name])))
        except ParameterError as exc:  # named as the request names it
            raise ParameterError(exc.problem, name) from None

    answer.__signature__ = inspect.Signature([inspect.Parameter(  # type: ignore[attr-defined]
        name, inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[str, QueryField(description=query.param.help, min_length=1, max_length=200,
                                             pattern=getattr(query.param.type, "pattern", None))])])
    answer.__name__ = operation.name
    return answer


def router(operations: list[Operation]) -> Routes:
    """``GET /query/NAME`` for each of ``operations`` that declares a query."""
    routes = Routes(prefix="/query", tags=["query"])
    for operation in operations:
        if isinstance(operation, Writes) and operation.query is not None:
            routes.add_api_route(f"/{operation.name}", _endpoint(operation), methods=["GET"],
                                 response_model=operation.query.result, responses=documented(400, 500),
                                 summary=f"{operation.query.param.help} (no file)")
    return routes
