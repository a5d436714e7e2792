"""``EvolveConfig``: what one evolve loop reads from its YAML file (every key also a ``--flag``)."""

from __future__ import annotations

import argparse
import difflib
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError

__all__ = ["EvolveConfig", "add_config_flags", "load_config"]


@dataclass(kw_only=True)
class EvolveConfig:
    """Settings of ``python -m trainers.evolve`` (examples/evolve.yaml shows each in use)."""

    output_dir: str = field(default="runs/evolve", metadata={"help": "where the loop keeps its state, adapters and "
                            "records (one loop per directory: a second one refuses)"})  # fmt: skip
    cycles: int = field(default=2, metadata={"help": "run until this many cycles are complete in output_dir (a "
                        "resumed loop runs the rest); 0: keep cycling until stopped"})  # fmt: skip
    interval_s: float = field(default=0.0, metadata={"help": "seconds to wait between two cycles (with cycles: 0, "
                              "the time production traces get to accumulate)"})  # fmt: skip
    # -- training: a trainers.grpo config, and what each cycle changes in it --
    train_config: str = field(default="examples/quickstart.yaml", metadata={"help": "the trainers.grpo YAML "
                              "config each cycle trains with (model, environment, mechanisms, optimizer)"})  # fmt: skip
    train: dict[str, Any] = field(default_factory=dict, metadata={"help": "trainers.grpo keys overriding "
                                  "train_config in every cycle (JSON on the command line)"})  # fmt: skip
    steps_per_cycle: int = field(default=4, metadata={"help": "GRPO optimizer steps per cycle (max_steps)"})
    init_adapter: str | None = field(default=None, metadata={"help": "the adapter production serves when the loop "
                                     "starts (a PEFT LoRA directory); default: a zero adapter (the base model's "
                                     "answers exactly) with train_config's LoRA shape"})  # fmt: skip
    # -- (a) tasks of each cycle --
    traces_jsonl: str | None = field(default=None, metadata={"help": "production traces: a JsonlTracer file or a "
                                     "directory of them; each cycle ingests the traces that started since the "
                                     "last one"})  # fmt: skip
    traces_project: str | None = field(default=None, metadata={"help": "production traces: a LangSmith project "
                                       "(LANGSMITH_API_KEY / LANGSMITH_ENDPOINT)"})  # fmt: skip
    traces_env: str | None = field(default=None, metadata={"help": "the environment ingested tasks run in "
                                   "(default: train_config's env_id)"})  # fmt: skip
    questioning_n: int = field(default=0, metadata={"help": "self-questioning tasks to synthesize per cycle (0: "
                               "none)"})  # fmt: skip
    synthetic_ratio: float = field(default=0.5, metadata={"help": "share of training tasks drawn from the task "
                                   "store (ingested + synthesized) once it holds any"})  # fmt: skip
    # -- (b) the production endpoint --
    policy_base_url: str | None = field(default=None, metadata={"help": "the production endpoint (…/v1: vLLM "
                                        "with --enable-lora and runtime LoRA updating, or trainers.policy_server "
                                        "--allow-runtime-updates); default: the loop starts the CPU policy server "
                                        "on train_config's model and keeps it up while it runs"})  # fmt: skip
    served_name: str = field(default="agent", metadata={"help": "the stable model name production requests use; "
                             "promotion points it at the new adapter"})  # fmt: skip
    # -- (c) the held-out evaluation --
    heldout_split: str = field(default="validation", metadata={"help": "the split of the fixed held-out tasks the "
                               "gate decides on (not test: a promoted cycle's gain there is biased upward, so the "
                               "test figure is measured apart, see test_split)"})  # fmt: skip
    heldout_limit: int | None = field(default=40, metadata={"help": "its first N tasks (null: all)"})
    heldout_k: int = field(default=4, metadata={"help": "samples per held-out task, for each policy"})
    heldout_seed: int = field(default=1234, metadata={"help": "sampling seed of the held-out evaluations (the "
                              "same for candidate and incumbent: the comparison is paired)"})  # fmt: skip
    test_split: str | None = field(default="test", metadata={"help": "the split production's test figure is "
                                   "measured on, apart from the gate (each production version once, heldout_k "
                                   "samples, test_seed); null: no test figure"})  # fmt: skip
    test_limit: int | None = field(default=40, metadata={"help": "its first N tasks (null: all)"})
    test_seed: int | None = field(default=None, metadata={"help": "sampling seed of the test evaluations, its own "
                                  "(default: heldout_seed + 1)"})  # fmt: skip
    # -- (d) the gate --
    confidence: float = field(default=0.9, metadata={"help": "one-sided level of the bootstrap lower bound"})
    min_gain: float = field(default=0.0, metadata={"help": "promote only when the lower bound of the paired gain "
                            "is above this"})  # fmt: skip
    bootstrap_resamples: int = field(default=2000, metadata={"help": "bootstrap resamples over tasks"})
    min_tasks: int | None = field(default=None, metadata={"help": "held-out tasks the gate needs paired to decide "
                                  "(a sample the candidate alone failed outside the policy counts as its worst "
                                  "reward; one failed on the incumbent's side is dropped); null: every held-out "
                                  "task"})  # fmt: skip
    max_failed_share: float = field(default=0.2, metadata={"help": "an evaluation with more rollouts failing "
                                    "outside the policy (endpoint or environment errors) fails the cycle: never "
                                    "promoted"})  # fmt: skip
    keep_candidates: int = field(default=2, metadata={"help": "adapters of this many latest rejected candidates "
                                 "are kept; older ones, and every cycle's checkpoints, are pruned (promoted "
                                 "adapters are always kept)"})  # fmt: skip

    def __post_init__(self) -> None:
        if self.cycles < 0:
            raise ConfigError(f"cycles must be >= 0 (0: until stopped), got {self.cycles}.")
        if self.steps_per_cycle < 1:
            raise ConfigError(f"steps_per_cycle must be >= 1, got {self.steps_per_cycle}.")
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(f"confidence must be in [0.5, 1) (0.9: a 90% one-sided bound), got {self.confidence}.")
        if self.heldout_k < 1:
            raise ConfigError(f"heldout_k must be >= 1, got {self.heldout_k}.")
        if not 0.0 <= self.synthetic_ratio <= 1.0:
            raise ConfigError(f"synthetic_ratio must be in [0, 1], got {self.synthetic_ratio}.")
        if self.traces_jsonl and self.traces_project:
            raise ConfigError("Set one of traces_jsonl (local files) and traces_project (LangSmith), not both.")
        if self.min_tasks is not None and self.min_tasks < 1:
            raise ConfigError(f"min_tasks must be >= 1 (null: every held-out task), got {self.min_tasks}.")
        if self.test_seed is None:
            self.test_seed = self.heldout_seed + 1
        if self.test_split is not None and self.test_seed == self.heldout_seed:
            raise ConfigError(f"test_seed must differ from heldout_seed ({self.heldout_seed}): the test figure is "
                              "measured on seeds of its own.")  # fmt: skip
        if self.test_split is not None and self.test_split == self.heldout_split:
            warnings.warn(f"heldout_split {self.heldout_split!r} is also test_split: the gate chooses candidates on "
                          "it, so a promoted cycle's gain there is biased upward and the test figure is no longer "
                          "apart from the choice. Gate on a validation split (heldout_split: validation).",
                          UserWarning, stacklevel=2)  # fmt: skip
        if not self.served_name or "/" in self.served_name:
            raise ConfigError(f"served_name must be a plain model name like 'agent', got {self.served_name!r}.")
        if not isinstance(self.train, dict):
            raise ConfigError("train must be a mapping of trainers.grpo keys, e.g. {learning_rate: 5.0e-4}.")
        self.keep_candidates = max(0, self.keep_candidates)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_value(kind: Any, text: str) -> Any:
    import json

    if kind is dict or "dict" in str(kind):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ConfigError(f"expected a JSON object, got {text!r}")
        return value
    if text.lower() in ("null", "none"):
        return None
    if "bool" in str(kind):
        return text.lower() in ("1", "true", "yes")
    if "int" in str(kind) and "float" not in str(kind):
        return int(text)
    if "float" in str(kind):
        return float(text)
    return text


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--<field>`` for every ``EvolveConfig`` field (default: None = the YAML's value, else the field's)."""
    for f in fields(EvolveConfig):
        parser.add_argument(f"--{f.name}", default=None, metavar=f.name.upper(),
                            type=lambda text, kind=f.type: _parse_value(kind, text),
                            help=f.metadata.get("help", ""))  # fmt: skip


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> EvolveConfig:
    """The config of the YAML file at ``path`` (optional) with ``overrides`` (non-None values) applied.

    An unknown key is a ``ConfigError`` naming the nearest valid one.
    """
    from trainers.config_files import read_yaml_mapping

    data = read_yaml_mapping(path, label=f"the evolve config {path}") if path else {}
    names = [f.name for f in fields(EvolveConfig)]
    for key in data:
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {near[0]!r}?" if near else f" Valid keys: {', '.join(names)}."
            raise ConfigError(f"Unknown key {key!r} in {path}.{hint}")
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    missing = [f.name for f in fields(EvolveConfig) if f.default is MISSING and f.default_factory is MISSING
               and f.name not in data]  # fmt: skip
    if missing:
        raise ConfigError(f"The evolve config needs {', '.join(missing)}.")
    return EvolveConfig(**data)
