"""Tool-call format of open chat models (Hermes / Qwen) and a parser that never raises.

An action is free text in which the policy may place

    <tool_call>{"name": "calculator", "arguments": {"expression": "3*4"}}</tool_call>

one or several times, and/or a final answer `<answer>...</answer>`. This is the
format Qwen2.5/Qwen3 and Hermes-style chat templates train their models to
emit; the tool descriptions go into the system prompt as a `<tools>` block
(`render_tools_prompt`).

`parse_action` turns any string (malformed JSON, unknown tools, wrong-typed
arguments, unterminated or nested tags, megabyte-long inputs, arbitrary
unicode) into a `ParsedAction`; every problem becomes an entry in
`ParsedAction.errors` that the environment turns into an error observation
and counts as an invalid tool call. It runs in time linear in the input
(plain `str.find` scanning, no backtracking regular expressions).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

MAX_ACTION_CHARS = 65_536  # longer actions are cut here before parsing (an error is recorded)
MAX_TOOL_CALLS = 8  # tool calls beyond this many in one action are dropped (one error)
MAX_CALL_CHARS = 16_384  # the JSON body of one tool call

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool (OpenAI/Qwen function-calling schema).

    Attributes:
        name: the tool name the model must use in `"name"`.
        description: one or two sentences shown in the system prompt.
        parameters: a JSON-schema-like object spec: `{"type": "object",
            "properties": {arg: {"type": ..., "description": ...}}, "required":
            [...]}`. Supported per-property keys: type (string, integer, number,
            boolean, array, object), enum, maxLength (strings). Properties not
            listed are rejected.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The `{"type": "function", "function": {...}}` object of the `<tools>` block."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One well-formed, validated tool call."""

    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass
class ParsedAction:
    """The result of `parse_action`.

    Attributes:
        tool_calls: the valid tool calls, in order of appearance.
        answer: text inside the first `<answer>...</answer>` (stripped), or None.
        errors: one human-readable message per invalid tool call or format
            problem (each counts as one invalid tool call).
    """

    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)
    answer: str | None = None
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """True when the action holds neither a tool call (valid or not) nor an answer."""
        return not self.tool_calls and self.answer is None and not self.errors


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """Renders one call as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

    Raises:
        TypeError: when `arguments` is not JSON serialisable.
    """
    body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"


def format_answer(answer: str) -> str:
    """Renders a final answer as `<answer>...</answer>`."""
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def render_tools_prompt(specs: Sequence[ToolSpec]) -> str:
    """The Hermes/Qwen2.5 tool block placed at the end of the system prompt."""
    lines = "\n".join(json.dumps(s.to_json(), ensure_ascii=False) for s in specs)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _short(text: str, limit: int = 80) -> str:
    text = text if len(text) <= limit else text[:limit] + "..."
    return json.dumps(text, ensure_ascii=True)


def validate_arguments(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> list[str]:
    """Checks tool arguments against a `ToolSpec.parameters` spec.

    Returns:
        A list of error messages naming the argument and what was expected
        (empty when the arguments are valid). Never raises.
    """
    props = parameters.get("properties", {}) or {}
    errors = []
    for req in parameters.get("required", []) or []:
        if req not in arguments:
            errors.append(f"missing required argument {req!r}")
    for key, value in arguments.items():
        if key not in props:
            errors.append(f"unknown argument {_short(str(key), 40)}; expected one of {sorted(props)}")
            continue
        spec = props[key]
        want = spec.get("type")
        types = _JSON_TYPES.get(want) if want else None
        if types is not None:
            # bool is an int subclass in Python but not a JSON number.
            bad_bool = isinstance(value, bool) and want != "boolean"
            if bad_bool or not isinstance(value, types):
                errors.append(f"argument {key!r}: expected {want}, got {type(value).__name__}")
                continue
        if "enum" in spec and value not in spec["enum"]:
            errors.append(f"argument {key!r}: expected one of {spec['enum']}, got {_short(str(value))}")
        if isinstance(value, str) and "maxLength" in spec and len(value) > spec["maxLength"]:
            errors.append(f"argument {key!r}: longer than maxLength={spec['maxLength']} ({len(value)} chars)")
    return errors


def _parse_call(body: str, tools: Mapping[str, ToolSpec] | None) -> ToolCall | str:
    """One tool-call body -> ToolCall, or an error message."""
    if len(body) > MAX_CALL_CHARS:
        return f"tool call body too long ({len(body)} chars > {MAX_CALL_CHARS})"
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:
        return f"tool call is not valid JSON ({type(e).__name__}: {_short(str(e))})"
    if not isinstance(obj, dict):
        return f'tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got {type(obj).__name__}'
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return 'tool call has no "name" string'
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments object as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return f'tool {_short(name, 40)}: "arguments" is a string that is not a JSON object'
    if not isinstance(args, dict):
        return f'tool {_short(name, 40)}: "arguments" must be a JSON object, got {type(args).__name__}'
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        return f'tool call has unexpected keys {extra}; expected only "name" and "arguments"'
    if tools is not None:
        if name not in tools:
            return f"unknown tool {_short(name, 40)}; available tools: {sorted(tools)}"
        arg_errors = validate_arguments(args, tools[name].parameters)
        if arg_errors:
            return f"tool {name!r}: " + "; ".join(arg_errors)
    return ToolCall(name=name, arguments=args)


def parse_action(
    text: Any,
    tools: Mapping[str, ToolSpec] | Sequence[ToolSpec] | None = None,
    *,
    max_tool_calls: int = MAX_TOOL_CALLS,
) -> ParsedAction:
    """Parses a policy action into tool calls, an answer and errors; never raises.

    Args:
        text: the action text (anything else is reported as an error).
        tools: the available tools (name -> spec, or a list of specs); when
            given, unknown names and invalid arguments are errors. None skips
            validation (format only).
        max_tool_calls: calls beyond this many are dropped with one error.

    Returns:
        ParsedAction(tool_calls, answer, errors).
    """
    out = ParsedAction()
    if not isinstance(text, str):
        out.errors.append(f"action must be a string, got {type(text).__name__}")
        return out
    if isinstance(tools, Sequence):
        tools = {t.name: t for t in tools}
    if len(text) > MAX_ACTION_CHARS:
        out.errors.append(f"action too long ({len(text)} chars); only the first {MAX_ACTION_CHARS} were parsed")
        text = text[:MAX_ACTION_CHARS]
    _scan_tool_calls(text, tools, max_tool_calls, out)
    _scan_answer(text, out)
    return out


def _scan_tool_calls(text: str, tools, max_tool_calls: int, out: ParsedAction) -> None:
    pos, n_calls, stopped = 0, 0, False
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start < 0:
            break
        body_start = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body_start)
        if end < 0:
            out.errors.append("unterminated <tool_call> (no closing </tool_call>)")
            stopped = True
            break
        pos = end + len(TOOL_CALL_CLOSE)
        body = text[body_start:end]
        n_calls += 1
        if n_calls > max_tool_calls:
            out.errors.append(f"too many tool calls in one action; at most {max_tool_calls} are run")
            stopped = True
            break
        if TOOL_CALL_OPEN in body:
            out.errors.append("nested <tool_call> inside a <tool_call>")
            continue
        call = _parse_call(body.strip(), tools)
        if isinstance(call, str):
            out.errors.append(call)
        else:
            out.tool_calls.append(call)
    if not stopped and text.find(TOOL_CALL_CLOSE, pos) >= 0:
        out.errors.append("</tool_call> without a matching <tool_call>")


def _scan_answer(text: str, out: ParsedAction) -> None:
    start = text.find(ANSWER_OPEN)
    if start < 0:
        if ANSWER_CLOSE in text:
            out.errors.append("</answer> without a matching <answer>")
        return
    body_start = start + len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, body_start)
    if end < 0:
        out.errors.append("unterminated <answer> (no closing </answer>)")
        return
    body = text[body_start:end]
    if ANSWER_OPEN in body:
        out.errors.append("nested <answer> inside an <answer>")
        return
    out.answer = body.strip()
    if text.find(ANSWER_OPEN, end) >= 0:
        out.errors.append("several <answer> blocks; only the first is used")
