"""Tool-call format and parser: good, malformed and adversarial actions."""

import json
import time

import pytest

from jaxrl_agent.agent.tool_calls import (
    MAX_ACTION_CHARS, ParsedAction, ToolCall, ToolSpec, format_answer, format_tool_call, parse_action,
    render_tools_prompt, validate_arguments,
)

CALC = ToolSpec("calculator", "arithmetic", {
    "type": "object", "properties": {"expression": {"type": "string", "maxLength": 20}}, "required": ["expression"]})
TOPK = ToolSpec("lookup", "lookup", {
    "type": "object",
    "properties": {"k": {"type": "integer"}, "w": {"type": "number"}, "mode": {"type": "string", "enum": ["a", "b"]},
                   "flag": {"type": "boolean"}},
    "required": ["k"]})
TOOLS = [CALC, TOPK]


def test_roundtrip_single_and_multiple_calls():
    text = "Let me compute. " + format_tool_call("calculator", {"expression": "3*4"}) + "\n" + \
        format_tool_call("lookup", {"k": 2, "w": 0.5, "mode": "a", "flag": True})
    parsed = parse_action(text, TOOLS)
    assert parsed.errors == []
    assert parsed.tool_calls == [ToolCall("calculator", {"expression": "3*4"}),
                                 ToolCall("lookup", {"k": 2, "w": 0.5, "mode": "a", "flag": True})]
    assert parsed.answer is None and not parsed.is_empty


def test_qwen_style_whitespace_and_string_arguments():
    text = '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}\n</tool_call>'
    assert parse_action(text, TOOLS).tool_calls == [ToolCall("calculator", {"expression": "1+1"})]


def test_answer_parsing():
    assert parse_action("so <answer> 42 </answer>", TOOLS).answer == "42"
    assert parse_action(format_answer("x"), TOOLS) == ParsedAction(answer="x")
    two = parse_action("<answer>1</answer><answer>2</answer>", TOOLS)
    assert two.answer == "1" and len(two.errors) == 1
    assert parse_action("<answer>1", TOOLS).answer is None
    assert "unterminated" in parse_action("<answer>1", TOOLS).errors[0]
    assert parse_action("plain text", TOOLS).is_empty


@pytest.mark.parametrize("body, fragment", [
    ('{"name": "calculator", "arguments": {"expression": "1+1"}', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"arguments": {}}', 'no "name"'),
    ('{"name": "rm_rf", "arguments": {}}', "unknown tool"),
    ('{"name": "calculator", "arguments": {}}', "missing required argument 'expression'"),
    ('{"name": "calculator", "arguments": {"expression": 5}}', "expected string, got int"),
    ('{"name": "calculator", "arguments": {"expression": "1", "x": 1}}', "unknown argument"),
    ('{"name": "calculator", "arguments": {"expression": "1111111111111111111111"}}', "maxLength"),
    ('{"name": "lookup", "arguments": {"k": true}}', "expected integer, got bool"),
    ('{"name": "lookup", "arguments": {"k": 1.5}}', "expected integer, got float"),
    ('{"name": "lookup", "arguments": {"k": 1, "mode": "c"}}', "expected one of"),
    ('{"name": "calculator", "arguments": [1]}', '"arguments" must be a JSON object'),
    ('{"name": "calculator", "arguments": {"expression": "1"}, "extra": 1}', "unexpected keys"),
])
def test_malformed_calls_become_errors(body, fragment):
    parsed = parse_action(f"<tool_call>{body}</tool_call>", TOOLS)
    assert parsed.tool_calls == []
    assert len(parsed.errors) == 1 and fragment in parsed.errors[0], parsed.errors


def test_valid_and_invalid_calls_are_separated():
    text = format_tool_call("calculator", {"expression": "2"}) + "<tool_call>{bad}</tool_call>"
    parsed = parse_action(text, TOOLS)
    assert len(parsed.tool_calls) == 1 and len(parsed.errors) == 1


@pytest.mark.parametrize("text, fragment", [
    ('<tool_call>{"name": "calculator"', "unterminated"),
    ('<tool_call><tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>', "nested"),
    ('{"name": "calculator"}</tool_call>', "without a matching"),
    ("</answer>", "without a matching"),
])
def test_tag_structure_errors(text, fragment):
    parsed = parse_action(text, TOOLS)
    assert parsed.tool_calls == [] and any(fragment in e for e in parsed.errors), parsed.errors


def test_adversarial_inputs_are_fast_and_never_raise():
    call = format_tool_call("calculator", {"expression": "1"})
    cases = [
        "<tool_call>" * 200_000,  # many unterminated openers
        "<tool_call>" + "[" * 100_000 + "</tool_call>",  # deep JSON nesting
        "x" * 5_000_000,  # huge string
        call * 1000,  # too many calls
        '<tool_call>{"name": "calculator", "arguments": {"expression": "\\ud800"}}</tool_call>',  # lone surrogate
        "<tool_call>{\"name\": \"カルク\", \"arguments\": {}}</tool_call> 🙂 <answer>答え</answer>",
        "\x00\x01<answer>\x00</answer>",
        "<answer><answer>1</answer></answer>",
    ]
    for text in cases:
        start = time.perf_counter()
        parsed = parse_action(text, TOOLS)
        assert time.perf_counter() - start < 2.0
        assert isinstance(parsed, ParsedAction)
    assert any("too long" in e for e in parse_action("x" * (MAX_ACTION_CHARS + 1)).errors)
    many = parse_action(call * 1000, TOOLS)
    assert len(many.tool_calls) == 8 and any("too many" in e for e in many.errors)
    assert parse_action(cases[5], TOOLS).answer == "答え"
    assert parse_action(None, TOOLS).errors == ["action must be a string, got NoneType"]


def test_without_tools_only_the_format_is_checked():
    parsed = parse_action('<tool_call>{"name": "anything", "arguments": {"z": 1}}</tool_call>')
    assert parsed.tool_calls == [ToolCall("anything", {"z": 1})] and parsed.errors == []


def test_validate_arguments_and_prompt_rendering():
    assert validate_arguments({"k": 3, "w": 2}, TOPK.parameters) == []
    assert validate_arguments({}, TOPK.parameters) == ["missing required argument 'k'"]
    prompt = render_tools_prompt(TOOLS)
    block = prompt.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line)["function"]["name"] for line in block] == ["calculator", "lookup"]
    assert "<tool_call>" in prompt
