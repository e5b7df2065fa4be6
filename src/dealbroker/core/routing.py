"""Routers' routes added to the application itself, not included as routers.

FastAPI's ``include_router`` keeps each router as a lazily resolved branch: every request walks
each branch in turn, and each of a branch's routes is matched with per-route bookkeeping in the
scope (measured: about 45 µs of CPU per request with the app's dozen routers, a fifth of what
``/healthz`` cost). The application's routers are plain: no prefix, tags or dependencies are
added at inclusion (their own are already part of each route, which ``APIRouter`` builds with
them), so their routes can be the application's own, in the same order, and each request is
matched as a bare FastAPI app matches its routes.
"""

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_params_to_args
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute


def include(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes to ``app``, as ``app.include_router(router)`` would route them."""
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
    """A route whose endpoint, and each of its dependencies, takes nothing but path, query and
    header parameters and the request (as the deal reads and the health checks do): its
    request is solved here, in a few steps fixed once, not by FastAPI's generic request
    handler, which on every request parses the query string and the cookies whether a route
    reads them or not, builds a response for the dependencies to set headers on, walks each
    dependency's cache key and exit stacks, and inspects each parameter's annotation anew
    (measured in process, ``bench/bench_inprocess.py``: ``/healthz`` a third less CPU, near the
    bare FastAPI route's own; a deal get a quarter less, a page of deals a sixth).

    The path parameters are validated by their own fields, as FastAPI validates them, the
    query and header parameters by FastAPI's own ``request_params_to_args``, every one before
    any dependency runs; one that does not validate hands the request, untouched, to
    FastAPI's handler, which answers it as it always has (its dependencies first, so a request
    with no token is still a 401, not a 400). FastAPI's handler also takes every request while
    dependency overrides are set (tests), and every request of a route this cannot solve: a
    body, cookies, a nested or a repeated dependency, one that is a plain function (FastAPI
    runs those in a thread) or a generator, FastAPI's special parameters (response,
    background tasks, security scopes), or an endpoint not declared to return a ``Response``
    (FastAPI serialises the others).

    It reads FastAPI's ``Dependant`` and calls its ``request_params_to_args``, neither of them
    documented: FastAPI is pinned, and ``tests/core/test_routing.py`` sends the same requests,
    valid and not, to both handlers and holds their answers equal byte for byte."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        steps = _steps(self.dependant)
        if steps is None:
            return handler
        overrides = self.dependency_overrides_provider
        *dependencies, endpoint = steps

        async def direct(request: Request) -> Response:
            if overrides is not None and overrides.dependency_overrides:
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
            for step, values in zip(dependencies, solved, strict=False):
                arguments[step.name] = await step.call(**values)
            return await endpoint.call(**arguments)  # type: ignore[no-any-return]

        return direct


@dataclass(frozen=True)
class _Step:
    """A dependency, or the endpoint itself (last): what to call, the name its value takes in
    the endpoint's arguments, and what it is called with."""

    call: Callable[..., Awaitable[Any]]
    name: str
    request_name: str | None
    path: tuple[tuple[str, str, Any], ...]  # path parameters: name, key in the path, field
    params: tuple[tuple[str, list[Any]], ...]  # ("path" | "query" | "header", its fields)


def _steps(dependant: Dependant) -> list[_Step] | None:
    """The steps of solving ``dependant``'s request, or None if ``DirectRoute`` cannot."""
    call = dependant.call
    if call is None or not _returns_response(call):
        return None
    steps: list[_Step] = []
    for sub in dependant.dependencies:
        if sub.dependencies or sub.name is None:
            return None
        step = _step(sub, sub.name)
        if step is None or any(s.call is step.call for s in steps):
            return None
        steps.append(step)
    endpoint = _step(dependant, "")
    if endpoint is None:
        return None
    return [*steps, endpoint]


def _step(dependant: Dependant, name: str) -> _Step | None:
    call = dependant.call
    if (
        call is None
        or not _is_async(call)
        or dependant.cookie_params
        or dependant.body_params
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
        or dependant.own_oauth_scopes
        or dependant.parent_oauth_scopes
    ):
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
    return _Step(call, name, dependant.request_param_name, path, params)


def _is_async(call: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one (``Requires``)."""
    if inspect.isroutine(call):
        return inspect.iscoroutinefunction(call)
    return inspect.iscoroutinefunction(type(call).__call__)  # type: ignore[operator]


def _returns_response(call: Callable[..., Any]) -> bool:
    returns = inspect.signature(call, eval_str=True).return_annotation
    return isinstance(returns, type) and issubclass(returns, Response)
