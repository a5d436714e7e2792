"""The data of ``trainers.evolve adapt``: disjoint splits of the synthesized tasks, and supervised chats.

``split_tasks`` cuts the synthesized tasks into sft / rl / validation parts that share no task id, no
(query, reference calls) signature and no ``family`` (the same calls asked by id or by the records' names):
two tasks worded alike with the same calls would let the gate score a task the model was supervised on.
``supervised_examples`` turns the sft part into token ids with labels on the assistant turns only: the
model's own successful rollout of a task where it has one (its recorded prompt and completion ids, what it
really said), the explorer's reference solution replayed in the environment otherwise (rendered with the
model's chat template, as ``trainers.warm_start`` does), ending with the answer the task is checked by
(``final_answer``). A task that names records ("lend 'Beloved' to 'Ada
Novak'") is taught twice: as its reference, and as the recovery from the call a model makes without looking
the records up (``recovery_chat``: the names where the ids go and the server's real error, out of the loss,
then the lookups and the calls). With ``repeats`` every task taught by its reference is also taught as the
answer after a repeated call (``repeat_chat``), its result shown as the agent's ``repeat_guard`` shows it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver.questioning.facts import FACT_KEY
from langgraph_evolver.questioning.phrasings import phrased, wordings
from langgraph_evolver.reference_scoring import expected_answer, folded
from langgraph_evolver.types import Action, Task, ToolCall, ToolObservation, Trajectory

__all__ = ["PARTS", "confirmation", "family", "final_answer", "first_call_chat", "mistake_chat", "mistakes",
           "played_before", "recovery_chat", "reference_chat", "repeat_chat", "replayed", "signature", "split_tasks",
           "supervised_examples", "swap_values", "swapped_tasks", "train_lora", "train_lora_apart"]  # fmt: skip

PARTS = ("sft", "rl", "validation")

Example = tuple[list[int], list[int]]
"""Token ids and their labels (-100 where no loss)."""


def signature(task: Task) -> str:
    """What makes two synthesized tasks the same task: the query (case and spacing folded) and the calls."""
    calls = [(c.name, c.arguments) for c in task.reference_solution or ()]
    text = json.dumps([folded(task.query), calls], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def family(task: Task) -> str:
    """What a task does however it is asked: its reference calls without the lookups that a request naming
    records adds (``metadata["resolves"]``), so "lend book B103 to member M1" and "lend 'Song of Solomon' to
    'Ada Novak'" (``find_member``, ``search_books``, then the same ``borrow``) are one family. A task that is
    only lookups (a fact question answered by the search itself) is its own calls."""
    lookups = {index for index, _ in task.metadata.get("resolves") or ()}
    every = [(c.name, c.arguments) for c in task.reference_solution or ()]
    calls = [call for i, call in enumerate(every) if i not in lookups] or every
    return hashlib.sha256(json.dumps(calls, sort_keys=True, default=str).encode()).hexdigest()[:16]


def split_tasks(tasks: Sequence[Task], shares: tuple[float, float, float], *, seed: int = 0) -> dict[str, list[Task]]:
    """``tasks`` cut into ``PARTS`` by ``shares``, one family (so one signature, and one id) in one part only.

    Tasks are grouped by ``family`` (tasks of one signature have the same calls), the groups shuffled with
    ``seed`` and dealt out whole; every part gets at least one group when there are enough (validation first:
    a gate with no task decides nothing). A validation task is asked in one of its wordings (its request or one
    of ``phrasings.PHRASINGS_KEY``, drawn with ``seed`` and its id): the gate then scores how the adapter takes
    requests as they come, not the one shape of the synthesizer's first wording.
    """
    groups: dict[str, list[Task]] = {}
    seen_ids: set[str] = set()
    for task in tasks:
        if task.id in seen_ids:
            continue
        seen_ids.add(task.id)
        groups.setdefault(family(task), []).append(task)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    total = sum(shares)
    want = [round(len(keys) * s / total) for s in shares]
    for i in (2, 1, 0):  # at least one group per part where there are groups to give
        if want[i] == 0 and len(keys) > sum(want):
            want[i] = 1
    while sum(want) > len(keys):
        want[want.index(max(want))] -= 1
    want[0] += len(keys) - sum(want)
    parts: dict[str, list[Task]] = {}
    start = 0
    for name, count in zip(PARTS, want, strict=True):
        parts[name] = [t for k in keys[start : start + count] for t in groups[k]]
        start += count
    parts["validation"] = [phrased(t, random.Random(f"{seed}-{t.id}").randrange(len(wordings(t))))
                           for t in parts["validation"]]  # fmt: skip
    return parts


def _assistant_call(call_id: str, call: ToolCall) -> dict[str, Any]:
    fn = {"name": call.name, "arguments": call.arguments}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}


_QUOTED = 8
"""The most of a read task's expected values a supervised final answer quotes."""


def final_answer(task: Task, last: str | None = None) -> str:
    """The reply that ends a supervised chat of ``task``: its ``answer``; for a read task checked by the values
    its reads returned (``expected_values``: an answer must quote one), those values, the first ``_QUOTED``;
    for a task checked by its end state, "Done." and what its last result (``last``) says (``confirmation``).
    (Ending a read task with "Done." would teach the model to drop what it read: replay scoring gives such an
    answer nothing.) A fact question's answer names the field it
    reports, as the result did (``"available": 1`` -> ``available: 1``): a bare value left the small model
    nothing to tell the field asked for from the record's id beside it, and adapted models answered ``B105``
    where the question asked how many copies were available.

    Example:
        >>> final_answer(Task(id="t", query="When was Dune published?", metadata={"expected_values": ["1965"]}))
        'Here is what I found: 1965.'
        >>> final_answer(Task(id="t", query="Cancel B1.")), final_answer(Task(id="t", query="Cancel B1."), "B1 off")
        ('Done.', 'Done: B1 off.')
        >>> final_answer(Task(id="t", query="How many?", metadata={"answer": "3"}))
        '3'
        >>> final_answer(Task(id="t", query="How many are free?", metadata={"answer": "3", "fact": "available"}))
        'available: 3'
    """
    answer = task.metadata.get("answer")
    if isinstance(answer, list | tuple) and answer:
        return ", ".join(str(a) for a in answer)
    if answer not in (None, "", []):
        field = task.metadata.get(FACT_KEY)
        return f"{str(field).replace('_', ' ')}: {answer}" if field else str(answer)
    values = expected_answer(task)
    return f"Here is what I found: {', '.join(values[:_QUOTED])}." if values else confirmation(last)


_VALUE_CHARS = 60
"""The longest text value a confirmation quotes."""


def confirmation(result: str | None) -> str:
    """The word "Done." and the top-level values of a write's result: its one text, or its fields as ``key: value``
    (the first ``_QUOTED`` of them; lists, objects and long texts left out). A bare "Done." after every write
    taught adapted models to end questions with it too: 8 of 72 question episodes of library run 12's
    validation ended "Done." after a read that showed the answer ("How much does Ben Osei owe in fines?" after
    ``get_member``); an answer that says what the last result said keeps its values.

    Example:
        >>> confirmation('{"loan_id": "L5", "due": "2026-03-23", "renewed": false, "book": {"id": "B1"}}')
        'Done: loan id: L5, due: 2026-03-23, renewed: False.'
        >>> confirmation(None), confirmation('[{"a": 1}, {"a": 2}]')
        ('Done.', 'Done.')
    """
    from langgraph_evolver.tool_results import read_result

    data = read_result(result or "")
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    items = data.items() if isinstance(data, dict) else [(None, data)]
    pairs = [str(v) if k is None else f"{str(k).replace('_', ' ')}: {v}" for k, v in items
             if isinstance(v, str | int | float) and len(str(v)) <= _VALUE_CHARS]  # fmt: skip
    return f"Done: {', '.join(pairs[:_QUOTED])}." if pairs else "Done."


def _answer(task: Task, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant turn that ends a chat of ``task`` whose last message is its last call's result."""
    last = messages[-1]["content"] if messages and messages[-1].get("role") == "tool" else None
    return {"role": "assistant", "content": final_answer(task, last)}


def _step(env: Any, messages: list[dict[str, Any]], call_id: str, call: ToolCall) -> ToolObservation:
    result = env.step(Action(tool_calls=(ToolCall(name=call.name, arguments=call.arguments, id=call_id),)))
    messages.append(_assistant_call(call_id, call))
    messages.append({"role": "tool", "tool_call_id": call_id, "content": result.observations[0].content})
    return result.observations[0]


def reference_chat(env: Any, task: Task) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chat of ``task`` solved by its reference calls, replayed in ``env`` (real results), and its tools."""
    obs = env.reset(task)
    messages, tools = list(obs.messages), list(obs.tools)
    for i, call in enumerate(task.reference_solution or ()):
        _step(env, messages, f"call_{i}", call)
    messages.append(_answer(task, messages))
    return messages, tools


def repeat_chat(env: Any, task: Task) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The chat of ``task`` solved by its reference, its last call then made again (that turn weighted 0, out of
    the loss) and its result shown as the agent's ``repeat_guard`` shows a repeated result (the result again
    and ``graphs.agent.repeat_note`` when it is the same), then the answer: adapted models repeated a read until
    the turn limit (15 of 40 fact-question episodes of library run 11). ``None`` for a task without calls."""
    from graphs.agent import with_repeat_note

    reference = list(task.reference_solution or ())
    if not reference:
        return None
    messages, tools = reference_chat(env, task)
    messages.pop()  # its answer comes after the repeat
    earlier = messages[-1]["content"]
    _step(env, messages, "call_again", reference[-1])
    messages[-2]["weight"] = 0
    if messages[-1]["content"] == earlier:
        messages[-1]["content"] = with_repeat_note(earlier, reference[-1].name)
    messages.append({"role": "assistant", "content": final_answer(task, earlier)})  # the result, not the note
    return messages, tools


def recovery_chat(env: Any, task: Task) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The chat of a task that names records, begun with the call a model makes when it does not look them up:
    the first call after the lookups with each record's name (or its owner's) where its id goes, and the
    server's real error (that turn weighted 0, out of the loss), then the reference: the lookups and the calls.
    ``None`` for a task that names no record, or when that wrong call does not fail (no mistake to recover from)."""
    from langgraph_evolver.questioning.wording import record_names, record_owners

    reference = list(task.reference_solution or ())
    lookups = {int(i) for i, _ in task.metadata.get("resolves") or () if 0 <= int(i) < len(reference)}
    if not lookups:
        return None
    env.reset(task)
    names: dict[str, str] = {}
    for i in sorted(lookups):
        shown = [_step(env, [], f"lookup_{i}", reference[i])]
        found = {**{k: owner for k, (_, owner) in record_owners(shown).items()}, **record_names(shown)}
        names.update({str(v): found[str(v)] for j, v in task.metadata["resolves"] if j == i and str(v) in found})
    first = _first_taking(reference, lookups, names)
    if first is None:
        return None
    wrong = ToolCall(name=first.name, arguments={k: names.get(str(v), v) for k, v in first.arguments.items()})
    return _after_mistake(env, task, wrong)


def _first_taking(reference: Sequence[ToolCall], lookups: set[int], ids: Collection[str]) -> ToolCall | None:
    """The first reference call after the lookups (not one of ``lookups``) whose arguments hold one of ``ids``."""
    return next((c for i, c in enumerate(reference) if i not in lookups and isinstance(c.arguments, dict)
                 and any(str(v) in ids for v in c.arguments.values())), None)  # fmt: skip


def invented_id(value: Any, rng: random.Random) -> Any:
    """An id of ``value``'s shape that no one gave: a small number for a number (adapted models opened "What breed
    is Rocky?" with ``getAnimal(animalId=13)``), the digits of a text id redrawn (``wo_3fa2`` -> ``wo_7fa5``), a
    digit added to a text id with none; never ``value`` itself.

    Example:
        >>> rng = random.Random(0)
        >>> invented_id(1032, rng) != 1032, isinstance(invented_id(1032, rng), int), invented_id("M-0042", rng)[:2]
        (True, True, 'M-')
        >>> invented_id("abc", rng)[:3], invented_id("7", rng) != "7"
        ('abc', True)
    """
    for _ in range(20):
        if isinstance(value, int) and not isinstance(value, bool):
            made: Any = rng.randint(1, 99)
        elif re.search(r"\d", str(value)):
            made = re.sub(r"\d", lambda _: str(rng.randint(0, 9)), str(value))
        else:
            made = f"{value}{rng.randint(1, 9)}"
        if str(made) != str(value):
            return made
    return f"{value}0"


def invented_chat(env: Any, task: Task, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """A task that names records begun with its first call after the lookups made with ids no one gave
    (``invented_id``) and the server's real error (out of the loss), then its reference: shelter run 2's adapter
    opened held-out requests so and repeated the call after the error (session 73). ``recovery_chat`` teaches
    the names where the ids go. ``None`` for a task that names no record or when that call does not fail."""
    reference = list(task.reference_solution or ())
    resolves = [(int(i), str(v)) for i, v in task.metadata.get("resolves") or () if 0 <= int(i) < len(reference)]
    lookups, ids = {i for i, _ in resolves}, {v for _, v in resolves}
    first = _first_taking(reference, lookups, ids)
    if first is None:
        return None
    wrong = ToolCall(name=first.name, arguments={k: invented_id(v, rng) if str(v) in ids else v
                                                 for k, v in first.arguments.items()})  # fmt: skip
    return _after_mistake(env, task, wrong)


def _after_mistake(env: Any, task: Task, wrong: ToolCall) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The chat of ``task`` begun with ``wrong`` and the server's real error (that turn weighted 0, out of the
    loss), then its reference and answer; ``None`` when ``wrong`` does not fail."""
    obs = env.reset(task)
    messages, tools = list(obs.messages), list(obs.tools)
    if not _step(env, messages, "call_wrong", wrong).is_error:
        return None
    messages[-2]["weight"] = 0
    for i, call in enumerate(task.reference_solution or ()):
        _step(env, messages, f"call_{i}", call)
    messages.append(_answer(task, messages))
    return messages, tools


_FILLER = frozenset("the a an and or of to in on at for with by from is are be it its this that my me our we you "
                    "your i can could please would will what which who how many much tell find show give get do "
                    "new all any there then now".split())  # fmt: skip


def mistakes(task: Task, tools: Sequence[dict[str, Any]], rng: random.Random) -> list[ToolCall]:
    """The first reference call as a small model gets it wrong, whatever the server: a required argument left
    out, and a tool the server lacks, named from the call's first word and a word of the request ("set_budget"
    for ``set_cell`` on "... the budget": the adapted models made such names up, then answered after the
    error). Each is taught once, before the reference (``mistake_chat``)."""
    reference = task.reference_solution or ()
    args = reference[0].arguments if reference else None
    if not isinstance(args, dict):
        return []
    from langgraph_evolver.questioning.profile import derive_profile

    first, out = reference[0], []
    operations = derive_profile(tools)["operations"]
    required = [k for k in operations.get(first.name, {}).get("required", ()) if k in args]
    if required:
        drop = rng.choice(required)
        out.append(ToolCall(name=first.name, arguments={k: v for k, v in args.items() if k != drop}))
    parts = [w for w in re.split(r"[_\-]|(?<=[a-z])(?=[A-Z])", first.name) if w]
    words = [w for w in re.findall(r"[a-z]+", task.query.lower())
             if len(w) > 2 and w not in _FILLER and w not in {p.lower() for p in parts}]  # fmt: skip
    if parts and words:
        sep = "_" if "_" in first.name or len(parts) == 1 else ""
        made = f"{parts[0]}{sep}{rng.choice(words) if sep else rng.choice(words).capitalize()}"
        if made not in operations:
            out.append(ToolCall(name=made, arguments=dict(args)))
    return out


def mistake_chat(env: Any, task: Task, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """``task`` begun with one of its ``mistakes`` (drawn with ``rng``) and the server's error, then solved:
    a model taught only clean references stops at its first error (38 of 88 held-out sheets episodes ended
    with an answer right after one)."""
    tools = list(env.reset(task).tools)
    options = mistakes(task, tools, rng)
    return _after_mistake(env, task, rng.choice(options)) if options else None


def swap_values(tasks: Sequence[Task]) -> dict[tuple[str, str], list[str]]:
    """The text values each (tool, argument) took in ``tasks``' reference calls, first seen first."""
    values: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        for call in task.reference_solution or ():
            for key, value in (call.arguments if isinstance(call.arguments, dict) else {}).items():
                if isinstance(value, str) and len(value.strip()) > 1 and value not in values.get((call.name, key), []):
                    values.setdefault((call.name, key), []).append(value)
    return values


def _whole(value: str) -> re.Pattern[str]:
    """``value`` as a whole word: not inside a longer word or id ("M1" is not in "M12")."""
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)")


def _quoted_once(value: str, query: str) -> bool:
    """``value`` stands in ``query`` once, as a whole word, and not as an id the explorer labelled ("B102 (Beloved)":
    swapping the id alone would leave the label naming another record)."""
    if len(value.strip()) < 2:
        return False
    found = list(_whole(value).finditer(query))
    return len(found) == 1 and not query[found[0].end() :].startswith(" (")


def swapped_tasks(task: Task, values: dict[tuple[str, str], list[str]], rng: random.Random, n: int,
                  avoid: set[str] | frozenset[str] = frozenset()) -> list[Task]:  # fmt: skip
    """Up to ``n`` copies of ``task`` cut to its first call, each text argument of that call the request quotes
    swapped (in the request and in the call) for another value the same argument of the same tool took in
    ``values``: "What is the fine of Ada Novak?" -> find_member("Ada Novak") also as "... of Ben Osei?" ->
    find_member("Ben Osei"). The first call is where a small model goes wrong (an adapted library model opened 69
    of 88 held-out episodes with ``search_books``, member names included); the rest of a swapped task's calls
    depend on results nobody replayed, so only the first is taught. A request already in ``avoid`` (folded
    requests of the synthesized tasks) is not made again."""
    reference = task.reference_solution or ()
    args = reference[0].arguments if reference else None
    if not isinstance(args, dict) or n <= 0:
        return []
    swappable = {k: [o for o in values.get((reference[0].name, k), []) if o != v]
                 for k, v in args.items() if isinstance(v, str) and _quoted_once(v, task.query)}  # fmt: skip
    swappable = {k: others for k, others in swappable.items() if others}
    out: list[Task] = []
    seen = set(avoid) | {folded(task.query)}
    for i in range(n * 3):  # a few draws more than wanted: some repeat
        if len(out) == n or not swappable:
            break
        chosen = {k: rng.choice(others) for k, others in swappable.items()}
        query = task.query
        for k, new in chosen.items():
            found = _whole(args[k]).search(query)
            query = query[: found.start()] + new + query[found.end() :] if found else query
        if folded(query) in seen:
            continue
        seen.add(folded(query))
        call = ToolCall(name=reference[0].name, arguments={**args, **chosen})
        out.append(Task(id=f"{task.id}-swap{i}", query=query, env=task.env, env_params=task.env_params,
                        reference_solution=(call,)))  # fmt: skip
    return out


def first_call_chat(env: Any, task: Task) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request of ``task`` and its first reference call, the assistant's turn: the chat ends there."""
    obs = env.reset(task)
    call = (task.reference_solution or ())[0]
    return [*obs.messages, _assistant_call("call_0", call)], list(obs.tools)


def _own_examples(trajectory: Trajectory) -> list[tuple[list[int], list[int]]]:
    """One example per policy turn of a successful rollout: its prompt ids unlabeled, its completion labeled."""
    out = []
    for step in trajectory.steps:
        tr = step.transition
        if tr is None or not step.policy or not tr.completion_ids:
            continue
        out.append((list(tr.prompt_ids) + list(tr.completion_ids),
                    [-100] * len(tr.prompt_ids) + list(tr.completion_ids)))  # fmt: skip
    return out


def supervised_examples(tasks: Sequence[Task], rollouts: Sequence[Trajectory], tokenizer: Any,
                        env_factory: Callable[[Task], Any], *, max_length: int = 2048, seed: int = 0,
                        with_mistakes: bool = False, swaps: int = 0, others: Sequence[Task] = (),
                        repeats: bool = False, invented: bool = False,
                        ) -> tuple[list[Example], dict[str, int]]:  # fmt: skip
    """Token ids and labels for every sft task, and how many came from where (``own``, ``reference``,
    ``recovery``, ``mistake``, ``swap``, ``repeat``, ``skipped``).

    A task the model solved (reward 1.0 in ``rollouts``) is supervised on its own best rollout; any other on its
    reference, and a task that names records also on its ``recovery_chat`` (counted in ``recovery``). With
    ``with_mistakes`` every task taught by its reference is also taught once as the way back from a mistake
    (``mistake_chat``, drawn with ``seed``; counted in ``mistake``). With ``swaps`` it is also taught up to that
    many times as its first call with the request's values swapped (``swapped_tasks`` over the values the sft
    references took, never making a request of ``tasks`` or ``others``, the other parts; counted in ``swap``). A
    reference that no longer replays (the tool raised) is skipped, not taught; so is a swap chat whose request does
    not render, alone (each counted in ``skipped``). With ``repeats`` it is also taught as the answer after a repeat
    of its last call (``repeat_chat``; counted in ``repeat``). With ``invented`` a task that names records is also
    taught as the way back from an id made up (``invented_chat``; counted in ``invented``). Each chat made of a task
    asks in the task's next wording (``phrasings.phrased``: its request, then its ``PHRASINGS_KEY`` in turn), the
    swaps in the one after (in its request when that one quotes no value once): the same calls under the shapes
    people ask in, at no more examples.
    """
    from trainers.tiny import encode_example

    rng = random.Random(seed)
    solved: dict[str, Trajectory] = {}
    for t in rollouts:
        if (t.reward or 0.0) >= 1.0 and t.task.id not in solved:
            solved[t.task.id] = t
    examples: list[tuple[list[int], list[int]]] = []
    counts = {"own": 0, "reference": 0, "recovery": 0, "invented": 0, "mistake": 0, "swap": 0, "repeat": 0,
              "skipped": 0}  # fmt: skip
    values = swap_values(tasks) if swaps else {}
    avoid = {folded(t.query) for t in [*tasks, *others]}
    for task in tasks:
        own = _own_examples(solved[task.id]) if task.id in solved else []
        if own:  # what the model really said; no environment needed
            examples += own
            counts["own"] += 1
            continue
        try:
            env = env_factory(task)
            try:
                makers = [("reference", reference_chat), ("recovery", recovery_chat),
                          ("invented", (lambda e, t: invented_chat(e, t, rng)) if invented else None),
                          ("mistake", (lambda e, t: mistake_chat(e, t, rng)) if with_mistakes else None),
                          ("repeat", repeat_chat if repeats else None)]  # fmt: skip
                chats, worded = [], 0  # each chat made asks in the task's next wording (``phrased``)
                for kind, make in makers:
                    chat = make(env, phrased(task, worded)) if make is not None else None
                    chats.append((kind, chat))
                    worded += chat is not None
                made = swapped_tasks(phrased(task, worded), values, rng, swaps, avoid) or swapped_tasks(
                    task, values, rng, swaps, avoid
                )  # a wording may quote no value once
                avoid |= {folded(t.query) for t in made}
                for swapped in made:  # one that fails to render costs itself only, not the task's reference
                    try:
                        chats.append(("swap", first_call_chat(env, swapped)))
                    except Exception:  # noqa: BLE001 - counted
                        counts["skipped"] += 1
            finally:
                getattr(env, "close", lambda: None)()
        except Exception:  # noqa: BLE001 - a reference that fails to replay teaches nothing; counted
            counts["skipped"] += 1
            continue
        for kind, chat in chats:
            if chat is not None:
                examples.append(encode_example(tokenizer, *chat))
                counts[kind] += 1
    return [e for e in examples if len(e[0]) <= max_length], counts


def train_lora(model_path: Path, examples: list[tuple[list[int], list[int]]], out: Path, *, seconds: float,
               lora: dict[str, Any], lr: float = 1e-3, batch_size: int = 4, max_steps: int | None = None,
               progress: bool = True, dtype: str = "auto") -> dict[str, Any]:  # fmt: skip
    """A LoRA adapter of ``lora``'s shape trained on ``examples`` for ``seconds`` (or ``max_steps``), saved to ``out``.

    The loop is ``trainers.warm_start``'s (AdamW, clipped gradients, loss on labeled tokens only) without its
    sandbox validation: the gate on the synthesized validation part judges the result. ``dtype`` is GRPO's
    ``train_dtype`` (``auto``: bf16 autocast forwards on a CPU with bf16 instructions, the weights and the
    optimizer in fp32; 1.7-1.9x fp32 a step on this project's 2 cores, ``benchmarks/train_step_precision.py``).
    A batch's shared opening (the system turn with the tools, the same in every chat) runs once, not once a row
    (``trainers.shared_prefix``: the same loss and gradients).
    """
    import time

    import torch
    from peft import LoraConfig, get_peft_model
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.tiny import padded_batches, supervised_step
    from trainers.train_precision import resolve_train_dtype

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    base = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    config = LoraConfig(r=lora["lora_r"], lora_alpha=lora["lora_alpha"], lora_dropout=0.0,
                        target_modules=lora["lora_target_modules"], task_type="CAUSAL_LM")  # fmt: skip
    model = get_peft_model(base, config)
    compute = resolve_train_dtype(dtype, num_parameters=sum(p.numel() for p in base.parameters()))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batches = padded_batches(examples, batch_size, pad, random.Random(0))  # every example once a pass
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    started, step, losses = time.perf_counter(), 0, []
    bar = tqdm(total=max_steps, desc="adapt: supervise", unit="step", disable=not progress, mininterval=2)
    model.train()
    while time.perf_counter() - started < seconds and (max_steps is None or step < max_steps):
        loss = supervised_step(model, opt, params, next(batches), compute, share_prefix=True)
        step += 1
        losses.append(loss)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
    bar.close()
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(out)
    recent = losses[-10:]
    return {"steps": step, "loss": round(sum(recent) / len(recent), 4) if recent else None,
            "seconds": round(time.perf_counter() - started, 1),
            "dtype": str(compute).removeprefix("torch.")}  # fmt: skip


def replayed(d: Path, tasks: Sequence[Task], k: int, name: str,
             play: Callable[[], list[Trajectory]]) -> tuple[list[Trajectory], float]:  # fmt: skip
    """``name``'s k rollouts of each of ``tasks`` and its seconds an episode: read back from ``d/<name>.jsonl`` when
    a killed phase wrote them in full and their seconds (``d/episode_s.json``), else played (``play``), written
    and timed. The validate phase's: budget run 1 (session 69) was killed between its two models."""
    import time

    from langgraph_evolver.types import write_jsonl

    timings = d / "episode_s.json"
    seconds = json.loads(timings.read_text()) if timings.is_file() else {}
    ran = played_before(d, tasks, k, name=name) if name in seconds else None
    if ran is not None:
        return ran[name], seconds[name]
    started = time.perf_counter()
    played = play()
    write_jsonl(d / f"{name}.jsonl", played)
    took = round((time.perf_counter() - started) / max(len(played), 1), 2)
    with _TIMINGS_LOCK:  # two models played side by side (adapt.Run.side_by_side) write the one file
        seconds = json.loads(timings.read_text()) if timings.is_file() else {}
        timings.write_text(json.dumps({**seconds, name: took}))
    return played, took


_TIMINGS_LOCK = threading.Lock()


def train_lora_apart(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train_lora`` in a child process (spawned, killed with its parent): the training's memory goes back to the
    system when it ends. In one process, budget run 1 (session 69) held 16 GB after its supervise phase (the
    model, the optimizer, the allocator's peak of a batch's logits) and the OOM killer took it in the validate
    phase; the rollouts that follow need about 0.5 GB."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from langgraph_evolver.errors import EvolverError
    from trainers.evolve.train import _die_with_parent

    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_die_with_parent) as pool:
            return pool.submit(train_lora, *args, **kwargs).result()
    except BrokenProcessPool as e:
        raise EvolverError("the supervise phase's training process died before it saved the adapter (killed, or out "
                           "of memory: see `dmesg`); run the same command again to redo the phase") from e  # fmt: skip


def played_before(d: Path, tasks: Sequence[Task], k: int, name: str = "before") -> dict[str, list[Trajectory]] | None:
    """The starting model's rollouts that a killed phase wrote in full to ``d/before.jsonl`` (k of each of
    ``tasks``), to be read back (``adapt._evaluate``'s ``ran``) instead of played again: the same tasks and seeds
    give the same rollouts. None when there are none, or not all of them (a file cut short, other tasks).
    ``name``: another model's file (``supervised``: the validate phase's rollouts of the supervised adapter)."""
    from langgraph_evolver.types import read_jsonl

    path = d / f"{name}.jsonl"
    try:
        rows = list(read_jsonl(path, Trajectory)) if path.is_file() else []
    except (ValueError, TypeError, KeyError):  # a line cut short by the kill
        return None
    counts = Counter(row.task.id for row in rows)
    return {name: rows} if rows and counts == {t.id: k for t in tasks} else None
