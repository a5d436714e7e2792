"""A to-do list app as a LangChain-tools environment, driven by scripted solutions.

Four ``@tool`` functions (``add_todo``, ``list_todos``, ``complete_todo``, ``delete_todo``) close
over a ``TodoList`` that ``todo_tools(task)`` builds fresh for every episode from
``task.env_params["items"]``, so instances never share state. ``check_todos`` scores the final
list against ``task.metadata["expected"]`` (each expected item present, nothing else left over)
and, for tasks that ask a question, the final answer against ``task.metadata["answer"]``.

The script registers the app as ``"todo"``, loads a fresh instance per task through the
registry, replays each task's reference solution followed by its scripted reply, and prints the
transcript and score (1.00 each); then one wrong solution, which scores less.

Run:

    python examples/langchain_tools_env.py
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool, ToolException, tool

from env_tools.langchain_tools import register_tools_environment
from langgraph_evolver.environment import Environment, load_environment
from langgraph_evolver.types import Action, Task, ToolCall

PRIORITIES = {1: "high", 2: "normal", 3: "low"}


@dataclass
class TodoItem:
    id: int
    title: str
    priority: int = 2
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "priority": self.priority, "done": self.done}


@dataclass
class TodoList:
    """The per-episode state: items by id, ids assigned in order from 1."""

    items: dict[int, TodoItem] = field(default_factory=dict)
    next_id: int = 1

    @classmethod
    def from_specs(cls, specs: Sequence[dict[str, Any]]) -> TodoList:
        todos = cls()
        for spec in specs:
            todos.add(spec["title"], spec.get("priority", 2), done=spec.get("done", False))
        return todos

    def add(self, title: str, priority: int, *, done: bool = False) -> TodoItem:
        item = TodoItem(id=self.next_id, title=title, priority=priority, done=done)
        self.items[item.id] = item
        self.next_id += 1
        return item

    def get(self, todo_id: int) -> TodoItem:
        if todo_id not in self.items:
            raise ToolException(f"no to-do with id {todo_id}; call list_todos to see the ids")
        return self.items[todo_id]

    def snapshot(self) -> list[tuple[str, int, bool]]:
        """The list's content without ids (ids depend on the order things were done in)."""
        return sorted((i.title, i.priority, i.done) for i in self.items.values())


def todo_tools(task: Task) -> tuple[TodoList, list[BaseTool]]:
    """The ``tools_factory``: a fresh to-do list for ``task`` and the tools acting on it."""
    todos = TodoList.from_specs(task.env_params.get("items", []))

    @tool(parse_docstring=True)
    def add_todo(title: str, priority: int = 2) -> dict:
        """Add a to-do and return it.

        Args:
            title: what to do.
            priority: 1 (high), 2 (normal) or 3 (low).
        """
        if not title.strip():
            raise ToolException("title must not be empty")
        if priority not in PRIORITIES:
            raise ToolException(f"priority must be 1 (high), 2 (normal) or 3 (low), got {priority}")
        return todos.add(title.strip(), priority).to_dict()

    @tool(parse_docstring=True)
    def list_todos(include_done: bool = False) -> list[dict]:
        """List the to-dos, open ones only unless include_done is true.

        Args:
            include_done: also list the to-dos already done.
        """
        return [i.to_dict() for i in todos.items.values() if include_done or not i.done]

    @tool(parse_docstring=True)
    def complete_todo(todo_id: int) -> dict:
        """Mark a to-do as done and return it.

        Args:
            todo_id: the id shown by list_todos.
        """
        item = todos.get(todo_id)
        item.done = True
        return item.to_dict()

    @tool(parse_docstring=True)
    def delete_todo(todo_id: int) -> str:
        """Delete a to-do.

        Args:
            todo_id: the id shown by list_todos.
        """
        item = todos.get(todo_id)
        del todos.items[todo_id]
        return f"Deleted to-do {todo_id} ({item.title!r})."

    return todos, [add_todo, list_todos, complete_todo, delete_todo]


def check_todos(task: Task, state: TodoList, final_answer: str | None, calls: list[ToolCall]) -> float:
    """Share of checks passed: each expected item is there, no other item is, the answer is right."""
    expected = [(s["title"], s.get("priority", 2), s.get("done", False)) for s in task.metadata["expected"]]
    actual = state.snapshot()
    checks = [item in actual for item in expected]
    checks.append(sorted(expected) == actual)
    if "answer" in task.metadata:
        answer = re.escape(str(task.metadata["answer"]))
        checks.append(final_answer is not None and re.search(rf"(?<!\w){answer}(?!\w)", final_answer) is not None)
    return sum(checks) / len(checks)


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


TASKS = [
    Task(
        id="todo-add-milk",
        env="todo",
        query="Add 'Buy milk' to my to-do list as a high-priority item.",
        env_params={"items": [{"title": "Pay rent", "priority": 1}, {"title": "Call mom"}]},
        reference_solution=(_call("add_todo", title="Buy milk", priority=1),),
        metadata={
            "expected": [
                {"title": "Pay rent", "priority": 1},
                {"title": "Call mom"},
                {"title": "Buy milk", "priority": 1},
            ],
            "reply": "Added 'Buy milk' as a high-priority to-do.",
        },
    ),
    Task(
        id="todo-complete-rent",
        env="todo",
        query="I paid the rent. Mark it as done on my to-do list.",
        env_params={"items": [{"title": "Call mom"}, {"title": "Pay rent", "priority": 1}, {"title": "Book dentist"}]},
        reference_solution=(_call("list_todos"), _call("complete_todo", todo_id=2)),
        metadata={
            "expected": [
                {"title": "Call mom"},
                {"title": "Pay rent", "priority": 1, "done": True},
                {"title": "Book dentist"},
            ],
            "reply": "'Pay rent' is marked as done.",
        },
    ),
    Task(
        id="todo-clean-up",
        env="todo",
        query="Delete every to-do that is already done, then tell me how many open to-dos are left.",
        env_params={
            "items": [
                {"title": "Water plants", "done": True},
                {"title": "Call mom"},
                {"title": "File taxes", "priority": 1, "done": True},
                {"title": "Buy milk", "priority": 3},
                {"title": "Renew passport", "priority": 1},
            ]
        },
        reference_solution=(
            _call("list_todos", include_done=True),
            _call("delete_todo", todo_id=1),
            _call("delete_todo", todo_id=3),
        ),
        metadata={
            "expected": [
                {"title": "Call mom"},
                {"title": "Buy milk", "priority": 3},
                {"title": "Renew passport", "priority": 1},
            ],
            "answer": "3",
            "reply": "Deleted the 2 done to-dos; 3 open to-dos are left.",
        },
    ),
]


def register_todo_environment(name: str = "todo") -> None:
    """Register the app so ``load_environment(name)`` creates fresh instances."""
    register_tools_environment(name, todo_tools, tasks={"train": TASKS}, checker=check_todos)


def run_script(env: Environment, task: Task, calls: Sequence[ToolCall], reply: str, *, verbose: bool = False) -> float:
    """Reset ``env`` on ``task``, make ``calls`` one per turn, reply, and return the score."""
    env.reset(task)
    for call in calls:
        result = env.step(Action(tool_calls=(call,)))
        if verbose:
            for obs in result.observations:
                print(f"  {call.name}({call.arguments}) -> {obs.content}")
    env.step(Action(content=reply))
    if verbose:
        print(f"  final answer: {reply}")
    return env.evaluate()


def main() -> None:
    register_todo_environment()
    for task in TASKS:
        print(f"{task.id}: {task.query}")
        with load_environment("todo") as env:
            score = run_script(env, task, task.reference_solution or (), task.metadata["reply"], verbose=True)
        print(f"  score {score:.2f}\n")
    task = TASKS[1]
    print(f"{task.id}, wrong solution (completes the wrong to-do):")
    with load_environment("todo") as env:
        score = run_script(env, task, [_call("complete_todo", todo_id=1)], task.metadata["reply"], verbose=True)
    print(f"  score {score:.2f}")


if __name__ == "__main__":
    main()
