"""Strict tool calls for the CPU policy server: inside a ``<tool_call>`` block the model can only
name a tool of the request, use that tool's argument names, and close the arguments once the
required ones are there.

A call to a tool the server does not have, or with an argument it does not take, can never
succeed; a small model makes many (session 58: 47% of the calls of a 135M adapter on a
spreadsheet server it had not seen). OpenAI serves ``"strict": true`` function definitions
with constrained decoding, vLLM does it with structured outputs, llama.cpp with a grammar
triggered by the tool-call tag. This server has no grammar engine, so it keeps a small scanner
per row over the completion's text (``CallScanner``): outside a ``<tool_call>`` block nothing is
constrained (the model may answer in text); inside, the scanner follows the JSON of the call
(one object, or SmolLM2's list of them) and knows when the text is a tool's name, a key of the
call object or a key of its arguments. A string value is held only where the schema lists its
values (``enum``) and, with ``ToolGrammar.context`` (``--strict-tools --grounded-ids``), where the
argument names a record by its id (``id``, ``book_id``, ``bookId``): there the value must be copied
from the conversation (the request or a tool's result), as an id nobody showed the model cannot be
a record's (``grounded_id``). Other values are free.

Which tokens are allowed is decided on the most likely ``CANDIDATES`` ids of each step (their
text fed to a copy of the scanner). Where the text must be a name, a key, a listed value or an
id, everything else is masked; elsewhere only the candidates that would break the call are, so the distribution is
untouched where no rule applies. When no candidate fits where one must, the whole vocabulary is
searched by first character. The logprob a row reports is the one of the masked distribution it
was drawn from (``sampling``'s "processed" logprobs).

On by request (a function definition with ``"strict": true``, as OpenAI's API) or for every
request with tools (``--strict-tools``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ..chat_format import CALL_CLOSE, CALL_OPEN
from .token_texts import TokenTexts

__all__ = [
    "CANDIDATES",
    "TRIGGER",
    "CallScanner",
    "TokenTexts",
    "ToolGrammar",
    "advance",
    "constrain_logits",
    "start_scanner",
]

TRIGGER, END_TAG = CALL_OPEN, CALL_CLOSE
"""The tags the server's tool-call parser reads (``trainers.chat_format``): the scanner starts after the first."""

CANDIDATES = 64
"""Most likely ids checked against the scanner at each step of a constrained row."""

_CALL_KEYS = ("name", "arguments")
"""The keys of a call object that ``trainers.chat_format.parse_tool_calls`` reads."""


def grounded_id(key: str) -> bool:
    """Whether an argument names a record by its id (``id``, ``member_id``, ``memberId``): a value the
    conversation must have shown (the request quotes it or a tool returned it). Narrower than the synthesizer's
    ``wording.id_argument`` (which also reads ``*_code``, ``*_number``, ``*_key``): a phone number or a sort key
    may be new text, a ``*_id`` names a record."""
    return key == "id" or (key.endswith("_id") and len(key) > 3) or re.fullmatch(r"[a-z][a-zA-Z]*Id", key) is not None


def _string_typed(schema: Any) -> bool:
    """Whether a property's schema takes a string (no type, ``"string"``, or a union with it)."""
    if not isinstance(schema, Mapping):
        return True
    kind = schema.get("type")
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf")
        return not options or any(_string_typed(o) for o in options)
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


@dataclass(frozen=True, slots=True)
class ToolSchema:
    properties: tuple[str, ...] | None
    """Argument names the tool takes; None when its schema leaves them open (no constraint)."""
    required: tuple[str, ...] = ()
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The string values an argument may take where its schema lists them (``enum``)."""
    ids: frozenset[str] = frozenset()
    """String arguments that name a record by its id (``grounded_id``)."""


@dataclass(frozen=True, slots=True)
class ToolGrammar:
    """The request's tools as the scanner checks them, and the text already forced before the completion."""

    tools: Mapping[str, ToolSchema]
    prefix: str = ""
    """Text the completion continues (``tool_choice``'s forced start of a call)."""
    context: str | None = None
    """The conversation's text (its user and tool messages) that id arguments are copied from; None: ids free."""

    @classmethod
    def from_tools(
        cls, tools: Sequence[Mapping[str, Any]], prefix: str = "", context: str | None = None
    ) -> ToolGrammar:
        """From OpenAI ``tools`` (``{"type": "function", "function": {...}}`` or the function alone)."""
        out: dict[str, ToolSchema] = {}
        for tool in tools:
            fn = tool.get("function", tool)
            params = fn.get("parameters") or {}
            listed = params.get("properties")
            props = listed if isinstance(listed, Mapping) else {}
            open_ = not isinstance(listed, Mapping) or params.get("additionalProperties") not in (None, False)
            required = tuple(str(r) for r in params.get("required") or () if isinstance(r, str))
            keys = None if open_ else tuple(str(k) for k in props)
            enums = {str(k): tuple(v["enum"]) for k, v in props.items()
                     if isinstance(v, Mapping) and isinstance(v.get("enum"), list) and v["enum"]
                     and all(isinstance(e, str) for e in v["enum"])}  # fmt: skip
            ids = frozenset(str(k) for k, v in props.items() if grounded_id(str(k)) and _string_typed(v))
            out[str(fn["name"])] = ToolSchema(keys, required, enums, ids - set(enums))
        return cls(tools=out, prefix=prefix, context=context or None)


class _Frame(NamedTuple):
    """One open JSON container of a call."""

    kind: str
    """"obj" or "arr"."""
    role: str
    """"block" (the list of calls), "call", "args" or "other"."""
    tool: str | None
    used: frozenset[str]
    """The keys written so far."""
    expect: str
    """"key", "colon", "value", "comma" or "scalar"."""
    key: str | None
    """The last key written."""


class Invalid(Exception):
    """The text breaks the call: a name, a key or a missing required argument."""


class CallScanner:
    """Where a completion's text stands with respect to the tool-call rules (immutable: ``fed`` returns a new one)."""

    __slots__ = ("active", "buf", "closing", "esc", "grammar", "stack", "string", "tail")

    def __init__(self, grammar: ToolGrammar) -> None:
        self.grammar = grammar
        self.active = False
        self.closing = False
        """The call's JSON is done: only its end tag (or the end of the reply) may follow."""
        self.tail = ""
        self.stack: tuple[_Frame, ...] = ()
        self.string: str | None = None
        """The role of the string being written: "key", "name", "enum", "id", "value" (None: not in a string)."""
        self.buf = ""
        self.esc = False

    def _copy(self) -> CallScanner:
        new = CallScanner.__new__(CallScanner)
        new.grammar, new.active, new.tail, new.stack = self.grammar, self.active, self.tail, self.stack
        new.string, new.buf, new.esc, new.closing = self.string, self.buf, self.esc, self.closing
        return new

    @classmethod
    def start(cls, grammar: ToolGrammar) -> CallScanner:
        """The scanner after ``grammar.prefix`` (raises ``Invalid`` if the prefix breaks a rule)."""
        return cls(grammar).fed(grammar.prefix)

    def fed(self, text: str) -> CallScanner:
        """The scanner after ``text``; raises ``Invalid`` when a rule is broken."""
        new = self._copy()
        for c in text:
            new._feed(c)
        return new

    # -- what may come next -----------------------------------------------------------------
    @property
    def sensitive(self) -> bool:
        """True where only a name, a key or the JSON around them may come (everything unchecked is masked)."""
        if not self.active:
            return False
        if self.closing:
            return True
        if self.string == "id":
            return True
        if self.string is not None:
            return self.string in ("key", "name", "enum") and self._targets() is not None
        if not self.stack:  # right after the tag: JSON or not, the parser will tell
            return False
        kind, role, _, _, expect, key = self.stack[-1]
        if kind == "obj" and self._constrained(self.stack[-1]):
            return expect in ("key", "colon") or (role == "call" and expect == "value" and key == "name")
        return False

    def continuations(self) -> tuple[str, ...]:
        """What the text in a name or key string may still become, each with its closing quote (or the rest of
        the end tag after a call)."""
        if self.closing:
            return (END_TAG[len(self.tail) :],)
        if self.string == "id":
            return self._id_continuations()
        targets = self._targets()
        if self.string is None or targets is None:
            return ()
        return tuple(t[len(self.buf) :] + '"' for t in targets if t.startswith(self.buf))

    def _id_continuations(self) -> tuple[str, ...]:
        """The next characters an id may take: those after each place the conversation shows it so far."""
        text, buf = self.grammar.context or "", self.buf
        out, at = {'"'} if buf and not buf[-1].isspace() else set(), text.find(buf)
        while at >= 0 and at + len(buf) < len(text):
            out.add(text[at + len(buf)])
            at = text.find(buf, at + 1)
        return tuple(sorted(c for c in out if buf or not c.isspace()))

    # -- the rules ------------------------------------------------------------------------
    def _constrained(self, frame: _Frame) -> bool:
        _, role, tool, _, _, _ = frame
        if role == "call":
            return True
        if role == "args" and tool is not None:
            schema = self.grammar.tools.get(tool)
            return schema is not None and schema.properties is not None
        return False

    def _allowed_keys(self, frame: _Frame) -> tuple[str, ...] | None:
        _, role, tool, used, _, _ = frame
        if role == "call":
            return tuple(k for k in _CALL_KEYS if k not in used)
        if role == "args" and tool is not None and (schema := self.grammar.tools.get(tool)) is not None:
            if schema.properties is not None:
                return tuple(k for k in schema.properties if k not in used)
        return None

    def _targets(self) -> tuple[str, ...] | None:
        """The strings the current name or key string must be one of (None: free)."""
        if self.string == "name":
            return tuple(self.grammar.tools)
        if self.string == "key" and self.stack:
            return self._allowed_keys(self.stack[-1])
        if self.string == "enum" and self.stack:
            return self._schema_of(self.stack[-1]).enums.get(self.stack[-1].key or "")
        return None

    def _schema_of(self, frame: _Frame) -> ToolSchema:
        return self.grammar.tools.get(frame.tool or "") or ToolSchema(None)

    def _value_role(self) -> str:
        """What the string value opening in the top frame is: "enum" or "id" where a rule holds it, else "value"."""
        frame = self.stack[-1]
        if frame.kind != "obj" or frame.role != "args" or frame.key is None:
            return "value"
        schema = self._schema_of(frame)
        if frame.key in schema.enums:
            return "enum"
        return "id" if self.grammar.context is not None and frame.key in schema.ids else "value"

    def _set_top(self, **changes: Any) -> None:
        self.stack = (*self.stack[:-1], self.stack[-1]._replace(**changes))

    def _push(self, kind: str, role: str, tool: str | None = None) -> None:
        self.stack = (*self.stack, _Frame(kind, role, tool, frozenset(), "key" if kind == "obj" else "value", None))

    def _close(self) -> None:
        frame = self.stack[-1]
        _, role, tool, used, _, _ = frame
        if role == "call" and "name" not in used:
            raise Invalid("a tool call closed without its name")
        if role == "call" and "arguments" not in used and tool is not None:
            schema = self.grammar.tools.get(tool)
            if schema is not None and schema.required:
                raise Invalid(f"{tool} closed without the arguments it requires")
        if role == "args" and tool is not None and (schema := self.grammar.tools.get(tool)) is not None:
            missing = [k for k in schema.required if k not in used]
            if missing:
                raise Invalid(f"{tool} closed without its required {missing}")
        self.stack = self.stack[:-1]
        if self.stack:
            self._set_top(expect="comma")
        else:  # the block's value is done: its end tag, then free text until the next tag
            self.closing, self.tail = True, ""

    def _open_value(self, c: str) -> None:
        """``c`` starts a value where the top frame expects one."""
        kind, role, tool, _, _, key = self.stack[-1]
        if kind == "obj" and role == "call" and key == "arguments" and c != "{":
            raise Invalid("a tool's arguments must be an object")
        if kind == "obj" and role == "call" and key == "name":
            if c != '"':
                raise Invalid("a tool's name must be a string")
            self._set_top(expect="comma")
            self.string, self.buf = "name", ""
            return
        if c == '"':
            self.string, self.buf = self._value_role(), ""
            self._set_top(expect="comma")
        elif c in "{[":
            self._set_top(expect="comma")
            if c == "[":
                self._push("arr", "other")
            elif kind == "arr" and role == "block":
                self._push("obj", "call")
            elif kind == "obj" and role == "call" and key == "arguments":
                self._push("obj", "args", tool)
            else:
                self._push("obj", "other")
        elif kind == "arr" and c == "]":
            self._close()
        else:
            self._set_top(expect="scalar")

    def _feed(self, c: str) -> None:
        if not self.active:
            self.tail = (self.tail + c)[-len(TRIGGER) :]
            if self.tail == TRIGGER:
                self.active, self.tail, self.stack, self.string = True, "", (), None
            return
        if self.string is not None:
            self._feed_string(c)
            return
        if self.closing:
            if c.isspace() and not self.tail:
                return
            if not END_TAG.startswith(self.tail + c):
                raise Invalid(f"a call ends with {END_TAG}")
            self.tail += c
            if self.tail == END_TAG:
                self.active, self.closing, self.tail = False, False, ""
            return
        if c.isspace():
            return
        if not self.stack:  # the block's value: one call or a list of them
            if c == "{":
                self._push("obj", "call")
            elif c == "[":
                self._push("arr", "block")
            else:  # not JSON: the parser will say so; nothing here to constrain
                self.active = False
            return
        kind, role, tool, used, expect, key = frame = self.stack[-1]
        strict = kind == "obj" and self._constrained(frame)
        if expect == "scalar":
            if c == ",":
                if strict and not self._allowed_keys(frame):
                    raise Invalid("no key is left to write")
                self._set_top(expect="key" if kind == "obj" else "value")
            elif c in "}]":
                self._close()
            return
        if kind == "obj":
            if expect == "key":
                if c == '"':
                    if strict and not self._allowed_keys(frame):
                        raise Invalid("no key is left to write")
                    self.string, self.buf = "key", ""
                elif c == "}":
                    self._close()
                elif strict:
                    raise Invalid(f"expected a key, got {c!r}")
            elif expect == "colon":
                if c == ":":
                    self._set_top(expect="value")
                elif strict:
                    raise Invalid(f"expected ':', got {c!r}")
            elif expect == "value":
                self._open_value(c)
            elif expect == "comma":
                if c == ",":
                    if strict and not self._allowed_keys(frame):
                        raise Invalid("no key is left to write")
                    self._set_top(expect="key")
                elif c == "}":
                    self._close()
                elif strict:
                    raise Invalid(f"expected ',' or '}}', got {c!r}")
        else:
            if expect == "value":
                self._open_value(c)
            elif c == ",":
                self._set_top(expect="value")
            elif c == "]":
                self._close()

    def _feed_string(self, c: str) -> None:
        role = self.string
        if role == "id":
            self._feed_id(c)
            return
        if self.esc:
            self.esc = False
            self.buf += c
        elif c == "\\":
            self.esc = True
            self.buf += c
        elif c == '"':
            if role == "enum" and self.buf not in (self._targets() or ()):
                raise Invalid(f"{self.buf!r} is not one of the argument's values")
            self.string = None
            if role == "name":
                if self.buf not in self.grammar.tools:
                    raise Invalid(f"no tool {self.buf!r}")
                self._set_top(tool=self.buf)
            elif role == "key":
                allowed = self._allowed_keys(self.stack[-1])
                if allowed is not None and self.buf not in allowed:
                    raise Invalid(f"no argument {self.buf!r}")
                _, _, _, used, _, _ = self.stack[-1]
                self._set_top(used=used | {self.buf}, key=self.buf, expect="colon")
            self.buf = ""
            return
        else:
            self.buf += c
        if role in ("name", "key", "enum"):
            targets = self._targets()
            if targets is not None and not any(t.startswith(self.buf) for t in targets):
                raise Invalid(f"{self.buf!r} starts no allowed {role}")

    def _feed_id(self, c: str) -> None:
        """An id's characters: the value stays a piece of the conversation's text, not empty, no space around it."""
        if c == '"' and not self.esc:
            if not self.buf:
                raise Invalid("an id is empty")
            if self.buf[-1].isspace():
                raise Invalid("an id ends with a space")
            self.string, self.buf = None, ""
            return
        if c.isspace() and not self.buf:
            raise Invalid("an id starts with a space")
        self.esc = c == "\\" and not self.esc
        self.buf += c
        if self.buf not in (self.grammar.context or ""):
            raise Invalid(f"the conversation shows no id {self.buf!r}")


def _fits(scanner: CallScanner, texts: TokenTexts, token_id: int) -> bool:
    if token_id in texts.eos:  # the reply may end outside a call or after one, not inside
        return not scanner.active or scanner.closing
    try:
        scanner.fed(texts(token_id))
    except Invalid:
        return False
    return True


def constrain_logits(logits: torch.Tensor, scanner: CallScanner, texts: TokenTexts) -> None:
    """Mask (in place, -inf) the ids of one row's ``logits`` that would break a rule after ``scanner``'s text."""
    if not scanner.active:
        return  # free text; a tag and what follows it in one token is checked once fed (``advance``)
    n = min(CANDIDATES, logits.shape[-1])
    candidates = logits.topk(n).indices.tolist()
    fits = [i for i in candidates if _fits(scanner, texts, i)]
    if scanner.sensitive:
        if not fits:
            starts = {s[0] for s in scanner.continuations() if s}
            if not starts and scanner.string is None:
                starts = {'"', "}", ",", ":", " ", "\n", "<"}
            fits = [i for i in texts.starting_with(starts) if _fits(scanner, texts, i)]
        if fits:
            keep = logits[fits].clone()
            logits.fill_(float("-inf"))
            logits[fits] = keep
        return
    fitting = set(fits)
    bad = [i for i in candidates if i not in fitting]
    if bad and len(bad) < logits.shape[-1]:
        logits[bad] = float("-inf")


def start_scanner(grammar: ToolGrammar) -> CallScanner | None:
    """A row's scanner after the forced text (None, unconstrained, if that text already broke a rule)."""
    try:
        return CallScanner.start(grammar)
    except Invalid:
        return None


def advance(scanner: CallScanner, text: str) -> CallScanner:
    """The scanner after a sampled token's ``text``; a token that broke a rule anyway (outside the checked
    candidates) ends the constraint of this block rather than the generation."""
    try:
        return scanner.fed(text)
    except Invalid:
        return CallScanner(scanner.grammar)  # outside any call, as at the start
