"""OpenAI's error object, {"error": {"message", "type", "param", "code"}}, for every failure the
server answers, including FastAPI's own (validation, unknown route, wrong method)."""
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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
