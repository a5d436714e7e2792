"""Reading a tool's result (``read_result``, ``render_result``): moved to ``langgraph_evolver.tool_results``.

Re-exported here, its old path, for code that imports it from questioning.
"""

from langgraph_evolver.tool_results import leaves, read_result, render_result, text_records

__all__ = ["leaves", "read_result", "render_result", "text_records"]
