"""OpenAI's error object, {"error": {"message", "type", "param", "code"}}, for every failure the
server answers, including FastAPI's own (validation, unknown route, wrong method) and a body
over the size limit (BodyLimit, before the body is read)."""
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..llm.model import ContextFull

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
               404: "invalid_request_error", 405: "invalid_request_error",
               413: "invalid_request_error", 422: "invalid_request_error",
               503: "server_error", 500: "server_error"}


class APIError(Exception):
    def __init__(self, status, message, code=None, param=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers


def error_body(status, message, code=None, param=None):
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(status, message, code=None, param=None, headers=None):
    return JSONResponse(error_body(status, message, code, param), status_code=status, headers=headers)


def check_model(name, known):
    if name is not None and name not in known:
        raise APIError(404, f"the model '{name}' does not exist here; GET /v1/models lists "
                            f"this server's: {', '.join(known)}", "model_not_found", "model")


def api_error(e):
    if isinstance(e, APIError):
        return e
    if isinstance(e, (ContextFull, ValueError)):
        return APIError(400, str(e), "invalid_value")
    return APIError(500, f"the engine failed: {type(e).__name__}: {e}", "internal_error")


async def on_api_error(request: Request, e: APIError):
    return error_response(e.status, e.message, e.code, e.param, e.headers)


async def on_validation_error(request: Request, e: RequestValidationError):
    errors = e.errors()
    first = errors[0] if errors else {}
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return error_response(400, f"the request body is not valid JSON ({first.get('msg')})",
                              "invalid_json")
    message = first.get("msg", "invalid request")
    param = ".".join(where) or None
    return error_response(400, f"{param}: {message}" if param else message, "invalid_value", param)


async def on_http_error(request: Request, e: StarletteHTTPException):
    message = {404: f"no such endpoint: {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
    return error_response(e.status_code, message, None, None, getattr(e, "headers", None))


async def on_crash(request: Request, e: Exception):
    return error_response(500, f"internal error: {type(e).__name__}: {e}", "internal_error")


def install(app):
    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_crash)


class BodyLimit:
    """A 413 OpenAI error for a body over `limit` bytes, by its Content-Length or, for a
    chunked body, once that many bytes have come."""

    def __init__(self, app, limit):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._reject(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise APIError(413, self._message(), "request_too_large")
            return message
        await self.app(scope, limited, send)

    def _message(self):
        return f"the request body is larger than this server's limit of {self.limit} bytes"

    async def _reject(self, scope, receive, send):
        await error_response(413, self._message(), "request_too_large")(scope, receive, send)
