"""Overlap between task sets: the start-up check of the warm start and of ``trainers.grpo``, and a command.

Two tasks overlap when they share an id or a signature (the same query and the same reference calls:
``env_tools.sandbox.pools.signature``). The warm start records what it supervised
(``supervised_tasks.json`` beside the adapter: ids and signature hashes) so that a GRPO run started from
that adapter can refuse tasks the adapter has already seen solved.

    python -m trainers.pools overlap sandbox:sft:3000 sandbox:test:75   # or tasks JSONL files
    python -m trainers.pools recipe --old                                # the issue-42 figures of a recipe
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from env_tools.mcp_tasks import load_task_file
from env_tools.sandbox.pools import reference_calls, signature, split_tasks
from env_tools.sandbox.tasks import generate_tasks
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task

__all__ = ["SUPERVISED_FILE", "check_disjoint", "load_spec", "overlap", "read_supervised", "recipe_overlap",
           "record_supervised"]  # fmt: skip

SUPERVISED_FILE = "supervised_tasks.json"


def sig_hash(task: Task) -> str:
    return hashlib.sha1(signature(task).encode()).hexdigest()[:16]


def load_spec(spec: str) -> list[Task]:
    """``sandbox:NAME[:N]`` (a pool or the legacy ``train`` split), or a tasks JSONL file (``Task`` rows or the
    MCP tasks format)."""
    if spec.startswith("sandbox:"):
        try:
            return split_tasks(spec.removeprefix("sandbox:"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"{spec!r} is neither sandbox:NAME[:N] (e.g. sandbox:rl:600) nor a tasks JSONL file")
    try:
        return load_task_file(path)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path} is not a tasks file ({type(e).__name__}: {e})") from None


def calls_hash(task: Task) -> str | None:
    """The reference calls alone (None without any): the same work asked in other words shares it."""
    calls = reference_calls(task)
    return hashlib.sha1(json.dumps(calls, sort_keys=True).encode()).hexdigest()[:16] if calls else None


def _keys(tasks: list[Task]) -> tuple[dict[str, Task], dict[str, Task]]:
    ids, sigs = {}, {}
    for t in tasks:
        ids.setdefault(t.id, t)
        sigs.setdefault(sig_hash(t), t)
    return ids, sigs


def overlap(a: list[Task], b: list[Task]) -> dict[str, Any]:
    """How many tasks of ``a`` share an id / a signature / either with some task of ``b``, and the first of them;
    ``by_calls``: how many share their reference calls alone (the same work in other words; not an overlap
    ``check_disjoint`` refuses: two requests of one small world often need the same reads)."""
    ids, sigs = _keys(b)
    calls = {h for t in b if (h := calls_hash(t))}
    by_id = [t for t in a if t.id in ids]
    by_sig = [t for t in a if sig_hash(t) in sigs]
    either = [t for t in a if t.id in ids or sig_hash(t) in sigs]
    first = either[0] if either else None
    return {"a": len(a), "b": len(b), "by_id": len(by_id), "by_signature": len(by_sig), "either": len(either),
            "by_calls": sum(calls_hash(t) in calls for t in a),
            "first": None if first is None else {"task": first.id, "query": first.query,
                                                 "other": (ids.get(first.id) or sigs[sig_hash(first)]).id}}  # fmt: skip


def check_disjoint(pools: dict[str, list[Task]], *, hint: str = "") -> None:
    """A ConfigError naming the first task two of ``pools`` share (by id or by signature); nothing when disjoint."""
    names = list(pools)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            found = overlap(pools[a], pools[b])
            if found["either"]:
                first = found["first"]
                raise ConfigError(f"the {a} tasks and the {b} tasks overlap ({found['by_id']} by id, "
                                  f"{found['by_signature']} by query + reference calls): first {first['task']} "
                                  f"({first['query']!r}) of {a} is {first['other']} of {b}. Train and evaluate on "
                                  f"disjoint pools (sandbox: sft, rl, validation, test).{hint}")  # fmt: skip


def record_supervised(out: str | Path, tasks: list[Task], *, split: str) -> Path:
    """Write what a warm start supervised, for the start-up check of a GRPO run from its adapter."""
    path = Path(out) / SUPERVISED_FILE
    path.write_text(json.dumps({"split": split, "tasks": len(tasks), "ids": [t.id for t in tasks],
                                "signatures": [sig_hash(t) for t in tasks]}) + "\n")  # fmt: skip
    return path


def read_supervised(adapter: str | Path | None) -> dict[str, Any] | None:
    """The warm start's record in ``adapter`` (None when the adapter has none: made before records existed)."""
    if not adapter or not (path := Path(adapter) / SUPERVISED_FILE).is_file():
        return None
    return json.loads(path.read_text())


def supervised_overlap(tasks: list[Task], record: dict[str, Any]) -> list[Task]:
    """The tasks whose id or signature the warm start supervised."""
    ids, sigs = set(record["ids"]), set(record["signatures"])
    return [t for t in tasks if t.id in ids or sig_hash(t) in sigs]


def check_grpo_tasks(train_split: str, train: list[Task], eval_split: str, held_out: list[Task],
                     init_adapter: str | None) -> str | None:  # fmt: skip
    """``trainers.grpo``'s start-up check. Training on a pool (``rl``, ...) must meet neither the held-out tasks
    nor what ``init_adapter``'s warm start supervised: a ConfigError. The legacy ``train`` split overlaps by
    design (old runs): the overlap comes back as a warning to log."""
    strict = train_split.partition(":")[0] != "train"
    try:
        check_disjoint({f"{train_split} (training)": train, f"{eval_split} (held-out)": held_out})
        record = read_supervised(init_adapter)
        if record is not None:
            for name, tasks in ((train_split, train), (eval_split, held_out)):
                if seen := supervised_overlap(tasks, record):
                    raise ConfigError(f"{len(seen)} of the {len(tasks)} {name} tasks were supervised by the warm "
                                      f"start of init_adapter={init_adapter} ({record['split']}): first "
                                      f"{seen[0].id} ({seen[0].query!r}). Warm-start on the sft pool and train "
                                      "GRPO on the rl pool.")  # fmt: skip
    except ConfigError as e:
        if strict:
            raise
        return f"task_split={train_split} is the legacy split, not a disjoint pool: {e}"
    return None


def check_run_tasks(cfg: Any, script_args: Any, model_args: Any, train: list[Task], eval_tasks: list[Task]) -> None:
    """``check_grpo_tasks`` on a ``trainers.grpo`` run's settings: the held-out tasks when it evaluates, the warm
    start's record in ``init_adapter`` or ``model_name_or_path``; a legacy-split overlap is logged."""
    held_out = eval_tasks if script_args.eval_before or script_args.eval_after else []
    warm = cfg.init_adapter or model_args.model_name_or_path
    if warning := check_grpo_tasks(cfg.task_split, train, script_args.eval_split, held_out, warm):
        logging.getLogger("trainers.grpo").warning(warning)


def recipe_overlap(sft: list[Task], rl: list[Task], heldout: list[Task]) -> dict[str, int]:
    """Issue 42's two figures: GRPO tasks the warm start supervised, held-out tasks repeating a supervised chat."""
    record = {"ids": [t.id for t in sft], "signatures": [sig_hash(t) for t in sft]}
    return {"rl_tasks_supervised": len(supervised_overlap(rl, record)),
            "rl_tasks": len(rl), "heldout_repeating_sft": len(supervised_overlap(heldout, record)),
            "heldout_tasks": len(heldout)}  # fmt: skip


def warm_start_chats(tasks: list[Task], l3_fraction: float = 0.5) -> list[Task]:
    """The tasks the warm start supervises out of those it draws (a share of level 3 kept: ``--l3-fraction``)."""
    keep = round(1 / l3_fraction)
    return [t for i, t in enumerate(tasks) if t.metadata["level"] < 3 or (i // 15) % keep == 0]


def _levels(tasks: list[Task], levels: tuple[int, ...] = (2, 3)) -> list[Task]:
    return [t for t in tasks if t.metadata.get("level") in levels]


def old_recipe() -> dict[str, int]:
    """The first recipe: warm start on train 00000-02999, GRPO on train 00000-00179 at levels 2-3, test 40."""
    sft = warm_start_chats(generate_tasks("train", 3000))
    return recipe_overlap(sft, _levels(generate_tasks("train", 180)), generate_tasks("test", 40))


def new_recipe(examples: int = 3000, rl: int = 600, test: int = 75) -> dict[str, int]:
    """The pools' recipe: warm start on ``sft:examples``, GRPO on ``rl:rl`` at levels 2-3, ``test:test``."""
    sft = warm_start_chats(split_tasks(f"sft:{examples}"))
    return recipe_overlap(sft, _levels(split_tasks(f"rl:{rl}")), split_tasks(f"test:{test}"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("overlap", help="the overlap of two task sets, by id and by signature")
    o.add_argument("a", help="sandbox:NAME[:N] (pools sft, rl, validation, test; split train) or a tasks JSONL")
    o.add_argument("b")
    r = sub.add_parser("recipe", help="rl_tasks_supervised and heldout_repeating_sft of a recipe")
    r.add_argument("--old", action="store_true", help="the first recipe (train 0-2999 / 0-179 / test 40)")
    r.add_argument("--examples", type=int, default=3000, help="warm-start chats drawn from sft")
    r.add_argument("--rl", type=int, default=600, help="rl pool tasks (levels 2-3 kept)")
    r.add_argument("--test", type=int, default=75, help="held-out test tasks")
    args = p.parse_args(argv)
    try:
        if args.command == "overlap":
            found = overlap(load_spec(args.a), load_spec(args.b))
            first = found["first"]
            print(f"{args.a} ({found['a']} tasks) vs {args.b} ({found['b']} tasks): {found['by_id']} share an id, "
                  f"{found['by_signature']} share a query + reference calls, {found['by_calls']} the reference calls"
                  + (f"; first {first['task']} = {first['other']}" if first else ""))  # fmt: skip
            print(json.dumps({"a": args.a, "b": args.b, **found}))
        else:
            figures = old_recipe() if args.old else new_recipe(args.examples, args.rl, args.test)
            print(json.dumps({"recipe": "old" if args.old else "pools", **figures}))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
