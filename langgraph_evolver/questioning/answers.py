"""The answer check of synthesized read tasks: moved to ``langgraph_evolver.reference_scoring``.

Re-exported here, its old path, for code that imports it from questioning.
"""

from langgraph_evolver.reference_scoring import (
    EXPECTED_KEY,
    calls_match_share,
    expected_answer,
    expected_values,
    normalized_arguments,
)

__all__ = ["EXPECTED_KEY", "calls_match_share", "expected_answer", "expected_values", "normalized_arguments"]
