"""Chat templates for multi-turn tool use, rendered piecewise for token-in/token-out.

The actor never re-tokenizes the history. It tokenizes the prompt once
(`prompt`), then after each action appends the exact ids the engine returned
and the ids of `observation(...)`: the text that closes the assistant turn (when
the engine stopped without emitting the end-of-turn token), the tool-response
turn, and the next assistant header.

Formats (as the models' own chat templates render them):

- Qwen (ChatML, Qwen2.5/Qwen3): `<|im_start|>role\\n...<|im_end|>\\n`; tool
  output is a user turn wrapping `<tool_response>\\n...\\n</tool_response>`.
- Llama 3 (3.1+): `<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`;
  tool output is the `ipython` role.

`render_messages` renders a whole conversation with the same pieces, so the
decoded tokens of an actor episode equal the rendered messages of that episode.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from jaxrl_agent.checks import check_choice

OBSERVATION_ROLES = ("tool", "user")


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A chat format, as the strings that surround each turn.

    Attributes:
        name: registry name ("qwen", "llama3").
        bos: text placed once at the very start of a conversation.
        header: format string of a turn header, with `{role}`.
        end_of_turn: the token that ends every turn (the model's stop token).
        turn_separator: text after `end_of_turn` before the next header.
        tool_role: role used for tool output.
        tool_open / tool_close: text around one tool output inside its turn.
        extra_stop_tokens: further tokens that end an assistant turn.
    """

    name: str
    bos: str
    header: str
    end_of_turn: str
    turn_separator: str
    tool_role: str
    tool_open: str
    tool_close: str
    extra_stop_tokens: tuple[str, ...] = ()

    @property
    def stop_tokens(self) -> tuple[str, ...]:
        """Tokens that end an assistant turn (pass their ids as stop_token_ids)."""
        return (self.end_of_turn,) + self.extra_stop_tokens

    def _turn(self, role: str, content: str) -> str:
        return self.header.format(role=role) + content + self.end_of_turn + self.turn_separator

    def assistant_header(self) -> str:
        return self.header.format(role="assistant")

    def prompt(self, system: str | None, user: str) -> str:
        """bos + system turn (omitted when empty) + user turn + assistant header."""
        sys_turn = self._turn("system", system) if system else ""
        return self.bos + sys_turn + self._turn("user", user) + self.assistant_header()

    def observation(self, observation: str, *, turn_closed: bool, role: str = "tool") -> str:
        """Text appended after an action: close the turn, observation turn, assistant header.

        Args:
            observation: the environment's observation text.
            turn_closed: the action already ends with a stop token (the engine
                stopped on it); otherwise the end-of-turn token is written here.
            role: "tool" (tool output, the usual case) or "user" (plain feedback).
                Tool output that already starts with the template's tool tag
                (e.g. an env that wraps `<tool_response>...</tool_response>`
                itself, possibly several) is not wrapped again.

        Raises:
            ValueError: unknown role.
        """
        check_choice("role", role, OBSERVATION_ROLES)
        close = self.turn_separator if turn_closed else self.end_of_turn + self.turn_separator
        if role == "tool":
            wrapped = self.tool_open and observation.startswith(self.tool_open.strip())
            content = observation if wrapped else self.tool_open + observation + self.tool_close
            body = self._turn(self.tool_role, content)
        else:
            body = self._turn("user", observation)
        return close + body + self.assistant_header()

    def strip_stop(self, action: str) -> tuple[str, bool]:
        """Removes a trailing stop token from decoded action text; returns (text, had_stop)."""
        for stop in self.stop_tokens:
            if action.endswith(stop):
                return action[: -len(stop)], True
        return action, False

    def render_messages(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Renders a conversation (system?, user, then assistant/tool turns).

        Each assistant message is closed with `end_of_turn`; a conversation that
        ends with a tool or user message ends with the next assistant header
        (as the actor's history does). Used for gold demonstrations and tests.

        Raises:
            ValueError: the conversation does not start with [system,] user, or a
                role is unknown.
        """
        msgs = list(messages)
        system = None
        if msgs and msgs[0]["role"] == "system":
            system = msgs.pop(0)["content"]
        if not msgs or msgs[0]["role"] != "user":
            raise ValueError("messages: expected [system,] user, then assistant/tool turns")
        text = self.prompt(system, msgs[0]["content"])
        closed = True
        for i, msg in enumerate(msgs[1:], start=1):
            role, content = msg["role"], msg["content"]
            if role == "assistant":
                text += content + self.end_of_turn
                closed = True
            elif role in OBSERVATION_ROLES:
                text += self.observation(content, turn_closed=closed, role=role)
            else:
                raise ValueError(f"messages[{i}].role: expected assistant, tool or user, got {role!r}")
        if msgs[-1]["role"] == "assistant":
            text += self.turn_separator
        return text


QWEN = ChatTemplate(
    name="qwen",
    bos="",
    header="<|im_start|>{role}\n",
    end_of_turn="<|im_end|>",
    turn_separator="\n",
    tool_role="user",
    tool_open="<tool_response>\n",
    tool_close="\n</tool_response>",
    extra_stop_tokens=("<|endoftext|>",),
)

LLAMA3 = ChatTemplate(
    name="llama3",
    bos="<|begin_of_text|>",
    header="<|start_header_id|>{role}<|end_header_id|>\n\n",
    end_of_turn="<|eot_id|>",
    turn_separator="",
    tool_role="ipython",
    tool_open="",
    tool_close="",
    extra_stop_tokens=("<|eom_id|>",),
)

CHAT_TEMPLATES: dict[str, ChatTemplate] = {t.name: t for t in (QWEN, LLAMA3)}


def get_chat_template(name: str) -> ChatTemplate:
    """Looks up a template by name ("qwen", "llama3"); ValueError lists the valid names."""
    check_choice("chat_template", name, tuple(CHAT_TEMPLATES))
    return CHAT_TEMPLATES[name]


def stop_token_ids(template: ChatTemplate, tokenizer) -> tuple[int, ...]:
    """Ids of the template's stop tokens present in `tokenizer` (end_of_turn must be).

    Raises:
        ValueError: the end-of-turn token is not a single id of the tokenizer.
    """
    ids = []
    for tok in template.stop_tokens:
        tid = tokenizer.token_to_id(tok)
        if tid is None and tok == template.end_of_turn:
            raise ValueError(f"tokenizer: end-of-turn token {tok!r} of template {template.name!r} is not one id")
        if tid is not None:
            ids.append(tid)
    return tuple(ids)
