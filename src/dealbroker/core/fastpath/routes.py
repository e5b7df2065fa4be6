"""Routes solved directly (``DirectRoute``), and routers' routes added to the application
itself, not included as routers (``include``).

FastAPI's ``include_router`` keeps each router as a lazily resolved branch: every request walks
each branch in turn, and each of a branch's routes is matched with per-route bookkeeping in the
scope. The application's routers are plain: no prefix, tags or dependencies are added at
inclusion (their own are already part of each route, which ``APIRouter`` builds with them), so
their routes can be the application's own, in the same order, and each request is matched as
a bare FastAPI app matches its routes.

With ``DEALBROKER_FAST_PATHS=false`` (``app.state.fast_paths``) routers are included as FastAPI
includes them and every ``DirectRoute`` hands its requests to FastAPI's own handler.
"""

import contextlib
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.params import Form as FormField
from fastapi.routing import APIRoute
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute


def enabled(app: Starlette) -> bool:
    """Whether ``app`` takes its fast paths (``DEALBROKER_FAST_PATHS``; on unless set off)."""
    return bool(getattr(app.state, "fast_paths", True))


def include(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes to ``app``, as ``app.include_router(router)`` would route them
    (and does, with the fast paths off)."""
    if not enabled(app):
        app.include_router(router)
        return
    for route in router.routes:
        _check(route)
    app.router.routes.extend(router.routes)


def _check(route: BaseRoute) -> None:
    # A nested router, or a route that leaves its dependencies' overrides to an inclusion,
    # would route differently once flattened.
    if not isinstance(route, APIRoute):
        raise TypeError(f"{route!r}: only a router's own API routes can be flattened")


# --- routes whose endpoint is called directly -------------------------------------------------


class DirectRoute(APIRoute):
    """A route whose request is solved here, in a few steps fixed once, not by FastAPI's
    generic request handler, which on every request parses the query string and the cookies
    whether a route reads them or not, builds a response for the dependencies to set headers
    on, walks each dependency's cache key, enters two exit stacks and a cancel scope, and
    inspects each parameter's annotation anew (what that costs: ``bench/README.md``).

    What it solves: path, query and header parameters, the request, a JSON body (the
    endpoint's), dependencies that are ``async def`` functions (or objects whose ``__call__``
    is one), and ``async def`` generators of ``scope="function"`` (the request's session:
    entered in order, and left, in reverse, when the endpoint has returned or raised, before
    the response is sent, as FastAPI leaves them). FastAPI leaves such a generator shielded
    from cancellation; here it is not, nothing in the application cancelling a request (a
    server stopping does, and a transaction cut short is the database's to roll back).

    The path parameters are validated by their own fields, as FastAPI validates them, the
    query and header parameters by FastAPI's own ``request_params_to_args``, the body, read
    and decoded as FastAPI reads it (``Request.json``) when it is declared
    ``application/json``, by FastAPI's own ``request_body_to_args``; every one before any
    dependency runs. A request that does not validate (or whose body is declared otherwise,
    is empty or is not JSON) is handed, untouched, to FastAPI's handler, which answers it as it
    always has (its dependencies first, so a request with no token is still a 401, not a
    400). FastAPI's handler also takes every request while the fast paths are off
    (``DEALBROKER_FAST_PATHS=false``) or dependency overrides are set (tests), and every
    request of a route this cannot solve: cookies, a form, a nested or a repeated dependency,
    one that is a plain function (FastAPI runs those in a thread), a plain generator or one of
    the request's scope, FastAPI's special parameters (response, background tasks, security
    scopes), or an endpoint not declared to return a ``Response`` (FastAPI serialises the
    others).

    It reads FastAPI's ``Dependant`` and calls its ``request_params_to_args`` and
    ``request_body_to_args``, none of them documented: FastAPI is pinned, and
    ``tests/core/fastpath/test_routes.py`` sends the same requests, valid and not, to both handlers
    and holds their answers equal byte for byte."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        steps = _steps(self.dependant)
        if steps is None:
            return handler
        overrides = self.dependency_overrides_provider
        *dependencies, endpoint = steps
        body_fields = self.dependant.body_params
        embed_body_fields = self._embed_body_fields
        scoped = any(step.generator for step in dependencies)

        async def direct(request: Request) -> Response:
            if (overrides is not None and overrides.dependency_overrides) or not enabled(
                request.app
            ):
                return await handler(request)
            solved = []
            for step in steps:
                values: dict[str, Any] = {}
                for name, key, field in step.path:
                    # A path parameter is always there (the route matched): validated by its
                    # field as FastAPI validates it, without FastAPI's per-request look at
                    # whether its annotation is a sequence.
                    value, errors = field.validate(
                        request.path_params[key], values, loc=("path", key)
                    )
                    if errors:
                        return await handler(request)
                    values[name] = value
                for kind, fields in step.params:
                    if kind == "path":
                        received: Any = request.path_params
                    elif kind == "query":
                        received = request.query_params
                    else:
                        received = request.headers
                    found, errors = request_params_to_args(fields, received)
                    if errors:
                        return await handler(request)
                    values.update(found)
                if step.request_name is not None:
                    values[step.request_name] = request
                solved.append(values)
            arguments = solved[-1]
            if body_fields:
                body = await _json_body(request)
                if body is _UNREAD:
                    return await handler(request)
                found, errors = await request_body_to_args(body_fields, body, embed_body_fields)
                if errors:
                    return await handler(request)
                arguments.update(found)
            if not scoped:
                for step, values in zip(dependencies, solved, strict=False):
                    value = await step.call(**values)
                    if step.name:
                        arguments[step.name] = value
                return await endpoint.call(**arguments)  # type: ignore[no-any-return]
            async with contextlib.AsyncExitStack() as stack:
                for step, values in zip(dependencies, solved, strict=False):
                    if step.generator:
                        value = await stack.enter_async_context(step.call(**values))
                    else:
                        value = await step.call(**values)
                    if step.name:
                        arguments[step.name] = value
                return await endpoint.call(**arguments)  # type: ignore[no-any-return]

        return direct


_UNREAD = object()


async def _json_body(request: Request) -> Any:
    """The request's body as FastAPI's handler reads a JSON body (``Request.json``), or
    ``_UNREAD`` if that handler is to read it: a body not declared ``application/json`` (it
    decides what to do with the others), an empty one, one that is not JSON, or one under
    FastAPI's own size limit (not used here: ``core.body_limit`` caps bodies). A body that
    cannot be read is refused as that handler refuses it."""
    if request.headers.get("content-type") != "application/json":
        return _UNREAD
    if MAX_BODY_SIZE_SCOPE_KEY in request.scope:
        return _UNREAD
    try:
        raw = await request.body()
    except HTTPException:
        raise  # the body is over the cap (``core.body_limit``)
    except Exception as exc:  # the client went away
        raise HTTPException(400, "There was an error parsing the body") from exc
    if not raw:
        return _UNREAD
    try:
        return await request.json()
    except ValueError:  # not JSON, or not UTF-8
        return _UNREAD


@dataclass(frozen=True)
class _Step:
    """A dependency, or the endpoint itself (last): what to call (for a generator, its context
    manager's maker), the name its value takes in the endpoint's arguments (none for a
    dependency of the route's own, run for its effect), and what it is called with."""

    call: Callable[..., Any]
    name: str | None
    request_name: str | None
    path: tuple[tuple[str, str, Any], ...]  # path parameters: name, key in the path, field
    params: tuple[tuple[str, list[Any]], ...]  # ("path" | "query" | "header", its fields)
    generator: bool = False


def _steps(dependant: Dependant) -> list[_Step] | None:
    """The steps of solving ``dependant``'s request, or None if ``DirectRoute`` cannot."""
    call = dependant.call
    if call is None or not _returns_response(call):
        return None
    steps: list[_Step] = []
    for sub in dependant.dependencies:
        if sub.dependencies or sub.body_params:
            return None
        step = _step(sub, sub.name)
        if step is None or any(s.call is step.call for s in steps):
            return None
        steps.append(step)
    endpoint = _step(dependant, "")
    if endpoint is None or any(isinstance(f.field_info, FormField) for f in dependant.body_params):
        return None  # a form: FastAPI reads it whatever its declared type
    return [*steps, endpoint]


def _step(dependant: Dependant, name: str | None) -> _Step | None:
    call = dependant.call
    if (
        call is None
        or dependant.cookie_params
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
        or dependant.own_oauth_scopes
        or dependant.parent_oauth_scopes
    ):
        return None
    generator = inspect.isasyncgenfunction(call)
    if generator:
        if dependant.scope != "function":
            return None  # left after the response is sent: FastAPI's exit stacks
        call = contextlib.asynccontextmanager(call)
    elif not _is_async(call):
        return None
    # A path parameter known by its alias alone (``Path(alias=...)`` makes it the validation
    # alias too) is read directly; any other (a validation alias of its own, a choice of
    # aliases) through FastAPI's function, as the query and the header parameters are.
    plain: list[Any] = []
    others: list[Any] = []
    for field in dependant.path_params:
        alias = field.field_info.validation_alias
        (plain if alias is None or alias == field.alias else others).append(field)
    path = tuple((f.name, f.alias, f) for f in plain)
    params = tuple(
        (kind, fields)
        for kind, fields in (
            ("path", others),
            ("query", dependant.query_params),
            ("header", dependant.header_params),
        )
        if fields
    )
    return _Step(call, name, dependant.request_param_name, path, params, generator)


def _is_async(call: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one (``Requires``)."""
    if inspect.isroutine(call):
        return inspect.iscoroutinefunction(call)
    return inspect.iscoroutinefunction(type(call).__call__)


def _returns_response(call: Callable[..., Any]) -> bool:
    returns = inspect.signature(call, eval_str=True).return_annotation
    return isinstance(returns, type) and issubclass(returns, Response)
