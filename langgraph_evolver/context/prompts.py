"""The context-management prompts and the fixed texts the templates put into a prompt.

``DEFAULT_MANAGE_PROMPT`` asks the manager for one JSON action (``SelfManagingTemplate(prompt=...)``
overrides it; fields ``{tokens}``, ``{listing}``); ``DEFAULT_THINK_HINT`` is the ``reasoning``
template's hint (``hint=``); ``PLACEHOLDER`` stands for the turns the ``sliding`` template leaves out;
``REMOVED_STUB`` replaces a tool result removed on its own.
"""

__all__ = ["DEFAULT_MANAGE_PROMPT", "DEFAULT_THINK_HINT", "MANAGE_PROMPT_FIELDS", "PLACEHOLDER", "REMOVED_STUB"]

DEFAULT_THINK_HINT = "Before each action, think briefly inside <think>...</think>, then act."
PLACEHOLDER = "[{n} earlier turn{s} left out of this prompt]"
REMOVED_STUB = "(removed by context management)"
DEFAULT_MANAGE_PROMPT = """The conversation has grown to about {tokens} tokens. For each earlier message below, choose \
whether to keep it, remove it, or compress it into a short note. Keep what the rest of the task still needs (ids, \
numbers, names); drop what no longer matters.

{listing}

Answer with one JSON object mapping message ids to "keep", "remove" or {{"compress": "<short text>"}}, for example \
{{"m1": "keep", "m2": "remove", "m3": {{"compress": "c42 is Pia"}}}}. Ids you leave out are kept."""
MANAGE_PROMPT_FIELDS = ("tokens", "listing")
