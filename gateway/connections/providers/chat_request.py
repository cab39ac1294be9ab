"""Reading an OpenAI-format chat request: the checks and pieces every adapter translates into
its provider's format. A request the provider's format cannot say is refused with
:func:`invalid_request` before any call is made."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from ragmux.core.errors import InvalidInput

SYSTEM_ROLES = ("system", "developer")
# Every role OpenAI's chat format defines ("function" is its deprecated form of "tool").
MESSAGE_ROLES = (*SYSTEM_ROLES, "user", "assistant", "tool", "function")
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)(?P<params>(;[^,;]*)*),(?P<data>.*)$", re.DOTALL)


def invalid_request(message: str) -> InvalidInput:
    """The client's request cannot be said in the provider's format: the client must change it."""
    return InvalidInput(message, code="invalid_request")


class ProviderCannot(InvalidInput):
    """A well-formed request asking for what this provider has no way to do (a JSON mode): the
    client's 400 when the provider is all there is, but inside a route the next target may."""

    code = "invalid_request"


def content_parts(content: Any, where: str) -> list[dict]:
    """A message's content as a list of parts; a plain string is one text part."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise invalid_request(f"{where}.content must be a string or a list of parts")
    parts = []
    for number, part in enumerate(content):
        if not isinstance(part, dict):
            raise invalid_request(f"{where}.content[{number}] must be an object")
        kind = part.get("type", "text")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid_request(f"{where}.content[{number}].text must be a string")
            if part["text"]:
                parts.append({**part, "type": "text"})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise invalid_request(f"{where}.content[{number}].image_url.url must be a string")
            parts.append({**part, "type": "image_url", "url": url})
        else:
            raise invalid_request(f"{where}.content[{number}]: parts of type {kind!r} are not supported")
    return parts


def text_of(content: Any, where: str) -> str:
    """The text of a message whose provider takes text only (system text, tool results)."""
    parts = content_parts(content, where)
    if any(part["type"] != "text" for part in parts):
        raise invalid_request(f"{where} may only hold text")
    return "\n".join(part["text"] for part in parts)


def inline_image(url: str, where: str, label: str) -> tuple[str, str]:
    """The media type and base64 data of a ``data:`` URL image."""
    match = _DATA_URL.match(url)
    if match is None:
        raise invalid_request(f"{where}: {label} takes images inline only; send the image as a data: URL (base64)")
    if ";base64" not in match["params"]:
        raise invalid_request(f"{where}: a data: URL image must be base64-encoded")
    try:
        decoded = base64.b64decode(match["data"], validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise invalid_request(f"{where}: the data: URL holds no valid base64 image")
    if not match["mime"].startswith("image/"):
        raise invalid_request(f"{where}: a data: URL image must have an image/* media type")
    return match["mime"], match["data"]


def arguments_object(arguments: Any) -> dict:
    """A tool call's arguments as the object Anthropic, Gemini and Ollama take."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def assistant_calls(message: dict, where: str) -> list[dict]:
    """The function calls of an assistant message, each as {id, name, arguments}."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise invalid_request(f"{where}.tool_calls must be a list")
    found = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_request(f"{where}.tool_calls[{number}] must name a function")
        found.append(
            {"id": str(call.get("id") or ""), "name": function["name"], "arguments": function.get("arguments")}
        )
    return found


def tool_names(messages: list[dict]) -> dict[str, str]:
    """The function name of every tool call in the history, by call id."""
    names = {}
    for number, message in enumerate(messages):
        if message.get("role") == "assistant":
            for call in assistant_calls(message, f"messages[{number}]"):
                names[call["id"]] = call["name"]
    return names


def functions(body: dict) -> list[dict]:
    """The request's function tools, each as {name, description, parameters}."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise invalid_request("tools must be a list")
    found = []
    for number, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_request(f"tools[{number}] must be a function with a name")
        parameters = function.get("parameters")
        found.append(
            {
                "name": function["name"],
                "description": function.get("description") if isinstance(function.get("description"), str) else "",
                "parameters": parameters if isinstance(parameters, dict) else None,
            }
        )
    return found


def forced_function(tool_choice: Any) -> str | None:
    """The function a ``tool_choice`` object names, if it names one."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    return None


def stop_sequences(body: dict) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid_request("stop must be a string or a list of strings")
    return stops or None


def max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise invalid_request(f"{name} must be a positive integer")
            return value
    return None


def number(body: dict, name: str) -> float | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise invalid_request(f"{name} must be a number")
    return value


def wants_json(body: dict) -> dict | None:
    """The ``response_format`` when it asks for JSON (``json_object`` or ``json_schema``)."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and str(response_format.get("type", "")).startswith("json"):
        return response_format
    return None


def json_schema_of(response_format: dict) -> dict | None:
    """The schema a ``json_schema`` response format gives; None for ``json_object``."""
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None
