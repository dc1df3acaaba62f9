"""Chat templates: exact strings of prompts and observation suffixes (Qwen, Llama 3)."""

import pytest

from jaxrl_agent.agent.chat import LLAMA3, QWEN, get_chat_template, stop_token_ids
from jaxrl_agent.data.tokenizers import train_debug_tokenizer


def test_qwen_prompt_and_observation():
    assert QWEN.prompt("SYS", "What is 2+2?") == (
        "<|im_start|>system\nSYS<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert QWEN.prompt(None, "hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert QWEN.observation("4", turn_closed=True) == (
        "\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert QWEN.observation("4", turn_closed=False) == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert QWEN.observation("try again", turn_closed=True, role="user") == (
        "\n<|im_start|>user\ntry again<|im_end|>\n<|im_start|>assistant\n"
    )


def test_llama3_prompt_and_observation():
    assert LLAMA3.prompt("SYS", "Q") == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert LLAMA3.observation("4", turn_closed=True) == (
        "<|start_header_id|>ipython<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert LLAMA3.observation("4", turn_closed=False).startswith("<|eot_id|><|start_header_id|>ipython")


@pytest.mark.parametrize("template", [QWEN, LLAMA3])
def test_render_messages_matches_piecewise_rendering(template):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "<tool_call>{}</tool_call>"},
        {"role": "tool", "content": "R"},
        {"role": "assistant", "content": "<answer>A</answer>"},
    ]
    eot = template.end_of_turn
    expected = (template.prompt("S", "U") + "<tool_call>{}</tool_call>" + eot
                + template.observation("R", turn_closed=True) + "<answer>A</answer>" + eot
                + template.turn_separator)
    assert template.render_messages(msgs) == expected
    with pytest.raises(ValueError, match="role"):
        template.render_messages(msgs[:2] + [{"role": "robot", "content": "x"}])
    with pytest.raises(ValueError, match="user"):
        template.render_messages([{"role": "assistant", "content": "x"}])


def test_strip_stop_and_stop_ids():
    assert QWEN.strip_stop("abc<|im_end|>") == ("abc", True)
    assert QWEN.strip_stop("abc") == ("abc", False)
    assert LLAMA3.strip_stop("x<|eom_id|>") == ("x", True)
    tok = train_debug_tokenizer()
    assert stop_token_ids(QWEN, tok) == (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"))
    assert stop_token_ids(LLAMA3, tok) == (tok.token_to_id("<|eot_id|>"), tok.token_to_id("<|eom_id|>"))
    # Every structural piece of the templates is one id in the debug tokenizer.
    assert tok.encode("<|start_header_id|>") == [tok.token_to_id("<|start_header_id|>")]


def test_registry_and_bad_role():
    assert get_chat_template("qwen") is QWEN
    with pytest.raises(ValueError, match="llama3"):
        get_chat_template("mistral")
    with pytest.raises(ValueError, match="role"):
        QWEN.observation("x", turn_closed=True, role="ipython")


def test_prewrapped_tool_output_is_not_wrapped_again():
    obs = "<tool_response>\n3\n</tool_response>\n<tool_response>\nError: bad\n</tool_response>"
    assert QWEN.observation(obs, turn_closed=True) == "\n<|im_start|>user\n" + obs + "<|im_end|>\n<|im_start|>assistant\n"
    assert LLAMA3.observation(obs, turn_closed=True) == (
        "<|start_header_id|>ipython<|end_header_id|>\n\n" + obs + "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
