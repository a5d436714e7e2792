"""The evolve loop: production traces in, a better policy out, promoted only when it wins.

Each cycle (``loop.EvolveLoop``):

(a) **collect** (``collect``): production traces that started since the last cycle (a ``JsonlTracer`` file or
    directory, or a LangSmith project) become tasks through ``langgraph_evolver.ingest``; self-questioning
    adds synthesized ones; both go into the loop's task store;
(b) **train** (``train``): ``steps_per_cycle`` GRPO steps from the production adapter, as a ``trainers.grpo``
    child with the training config's mechanisms (attribution, navigation) and the task store mixed in;
(c) **evaluate** (``evaluation``): the candidate and the incumbent on the same fixed held-out tasks, the same
    sampling seeds, k samples each;
(d) **gate** (``gate``): promoted only if the bootstrap lower bound (over tasks) of the paired gain is above
    ``min_gain``; otherwise the incumbent stays and the record says why.

Promotion re-points a stable model name on the production endpoint (``endpoint``); ``rollback`` returns to
the adapter served before; ``status`` prints the lineage. The state is one atomically written file and the
output directory is locked (``state``), so a killed loop resumes where it stopped and never promotes twice.

    python -m trainers.evolve --config examples/evolve.yaml --cycles 2 --output_dir runs/evolve
    python -m trainers.evolve status --output_dir runs/evolve
    python -m trainers.evolve rollback --output_dir runs/evolve

docs/evolve.md has the settings, the figures of a multi-cycle run and the promotion order on vLLM.
"""

from .config import EvolveConfig, load_config
from .gate import GateDecision, decide

__all__ = ["EvolveConfig", "EvolveLoop", "GateDecision", "decide", "load_config"]


def __getattr__(name: str):  # the loop pulls in the trainer's imports: only when asked for
    if name == "EvolveLoop":
        from .loop import EvolveLoop

        return EvolveLoop
    raise AttributeError(name)
