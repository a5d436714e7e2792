"""``python -m trainers.evolve``: run the evolve loop, show its lineage, roll back, or gate an adapter.

    python -m trainers.evolve --config examples/evolve.yaml --cycles 2 --output_dir runs/evolve
    python -m trainers.evolve status --output_dir runs/evolve           # lineage: each cycle, promoted or not
    python -m trainers.evolve rollback --output_dir runs/evolve         # back to the adapter served before
    python -m trainers.evolve consider --config examples/evolve.yaml --candidate DIR  # an adapter trained elsewhere
    python -m trainers.evolve adapt --env "mcp:python server.py" --minutes 60 --output_dir runs/adapt  # a new env

Every config key is also a flag (``--heldout_k 2``, ``--min_gain 0.02``); flags win over the YAML file.
Exit codes: 0 when the cycles ran (whether or not they promoted), 1 when a cycle failed, 2 on a config error
or a locked output directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import EvolverError

from .config import add_config_flags, load_config

COMMANDS = ("run", "status", "rollback", "consider", "adapt")


def make_parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m trainers.evolve{'' if command == 'run' else ' ' + command}",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", help="the evolve YAML config (examples/evolve.yaml)")
    if command == "consider":
        p.add_argument("--candidate", required=True, help="a LoRA adapter directory to gate against production")
    if command == "status":
        p.add_argument("--json", action="store_true", help="one JSON line per cycle instead of the table")
    add_config_flags(p)
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    skip = {"config", "candidate", "json"}
    return {k: v for k, v in vars(args).items() if k not in skip and v is not None}


def _status(args: argparse.Namespace) -> int:
    from .records import cycle_line, lineage_text
    from .state import State

    cfg = load_config(args.config, _overrides(args))
    state = State(cfg.output_dir)
    if not state.path.exists():
        raise EvolverError(f"No evolve loop in {cfg.output_dir} (no state.json): start one with "
                           "`python -m trainers.evolve --config examples/evolve.yaml`.")  # fmt: skip
    if args.json:
        for record in state.cycles:
            print(json.dumps(cycle_line(record, state.production)))
    else:
        print(lineage_text(state))
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from .endpoint import ProductionEndpoint
    from .state import State, loop_lock

    cfg = load_config(args.config, _overrides(args))
    with loop_lock(cfg.output_dir):
        state = State(cfg.output_dir)
        if not state.data["history"]:
            raise EvolverError(f"Nothing to roll back to in {cfg.output_dir}: production serves "
                               f"{(state.production or {}).get('version', 'nothing')}, and no adapter served before "
                               "it.")  # fmt: skip
        target = state.data["history"][-1]
        base_url = cfg.policy_base_url or state.data.get("policy_base_url")
        served = False
        if base_url:  # re-point the stable name first: the state says what is served only once it is
            cfg.policy_base_url = base_url
            endpoint = ProductionEndpoint(cfg, Path(state.data.get("base_model") or "."), state.dir)
            endpoint.name = state.data.get("served_name") or cfg.served_name
            endpoint.start()
            endpoint.serve(state.adapter_path(target))
            served = True
        state.data["history"].pop()
        state.set_production(target, action="rollback", push=False)
        state.save()
    where = (f"{base_url} now serves it as {state.data.get('served_name')!r}" if served else
             "the loop serves it when it starts again (its endpoint was the local server it started)")  # fmt: skip
    print(f"rolled back to {target['version']} ({target['adapter']}): {where}", file=sys.stderr)
    print(json.dumps({"production": target["version"], "served": served}))
    return 0


def _run(args: argparse.Namespace, command: str) -> int:
    from .loop import EvolveLoop
    from .state import loop_lock

    cfg = load_config(args.config, _overrides(args))
    with loop_lock(cfg.output_dir):
        loop = EvolveLoop(cfg)
        try:
            loop.start()
            lines = [loop.consider(Path(args.candidate))] if command == "consider" else loop.run()
        finally:
            loop.stop()
    failed = [line for line in lines if line.get("error")]
    if failed:
        print(f"error: cycle {failed[-1]['cycle']} failed: {failed[-1]['error']}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "run"
    if command == "adapt":  # its own flags (docs/your-domain.md)
        from .adapt import main as adapt_main

        return adapt_main(argv)
    args = make_parser(command).parse_args(argv)
    try:
        if command == "status":
            return _status(args)
        if command == "rollback":
            return _rollback(args)
        return _run(args, command)
    except EvolverError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
