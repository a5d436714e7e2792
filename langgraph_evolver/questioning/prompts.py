"""The self-questioning prompts: the LLM explorer's, the synthesizer's, the reference-aware judge's
and the profile refiner's. Each is a ``DEFAULT_*`` constant; the roles take their own as keywords
(``LLMSynthesizer(prompt=...)``, ``ReferenceAwareJudge(prompt=...)``, ``create_explorer_graph(goal=...)``).
``*_FIELDS`` name the fields a replacement template may use.
"""

__all__ = [
    "DEFAULT_BREADTH_PROMPT",
    "DEFAULT_DEPTH_PROMPT",
    "DEFAULT_EXPLORER_SYSTEM_PROMPT",
    "DEFAULT_EXPLORE_GOAL",
    "DEFAULT_NUDGE_PROMPT",
    "DEFAULT_REFERENCE_PROMPT",
    "DEFAULT_REFERENCE_RETRY_PROMPT",
    "DEFAULT_REFINE_PROMPT",
    "DEFAULT_SYNTHESIS_PROMPT",
    "DEFAULT_SYNTHESIS_RETRY_PROMPT",
    "REFERENCE_PROMPT_FIELDS",
    "SYNTHESIS_PROMPT_FIELDS",
]

# -- exploration (explore.py, explore_llm.py) --------------------------------------------------
DEFAULT_EXPLORE_GOAL = "Explore the tools: find out what data there is and what can be done with it."
"""The exploration goal: the exploration task's query and the LLM explorer's first message."""

DEFAULT_EXPLORER_SYSTEM_PROMPT = (
    "You are exploring a set of tools to learn what data exists and what can be done with it. "
    "Make exactly one tool call per reply, with valid arguments. Prefer calls that reveal or change something new."
)
DEFAULT_BREADTH_PROMPT = "Breadth phase: try a tool you have not used yet. Not tried yet: {unused}."
DEFAULT_DEPTH_PROMPT = (
    "Depth phase: build on what you just saw. Use ids, names or values from these recent results to call a tool "
    "that reads or changes that object.\nRecent results:\n{recent}"
)
DEFAULT_NUDGE_PROMPT = "Reply with one tool call (no text answer): keep exploring."

# -- synthesis (synthesize_llm.py) ------------------------------------------------------------
DEFAULT_SYNTHESIS_PROMPT = """You write practice tasks for an AI agent that uses tools. Below is what an \
exploration of the tools did and saw. Write {n_tasks} new, realistic user requests that these tools can
fulfil in this world.

Exploration (calls that worked, with their results):
{calls}

Preferences:
- each task needs {min_ops} to {max_ops} tool calls and involves at most {max_entities} distinct objects;
- difficulty 1 (one direct call) to 3 (several dependent calls); spread them over the range;
- phrase each request as a user would, naming the concrete values it needs; never mention tool names;
- each reference is the exact sequence of tool calls that fulfils the request, with real ids and values
  from the results above.

Answer with only a JSON list, one object per task:
[{{"query": "...", "reference": [{{"name": "<tool>", "arguments": {{...}}}}], "confidence": 0.0-1.0, \
"difficulty": 1-3}}]"""
SYNTHESIS_PROMPT_FIELDS = ("calls", "n_tasks", "min_ops", "max_ops", "max_entities")
DEFAULT_SYNTHESIS_RETRY_PROMPT = (
    "That could not be read as tasks. Answer with only a JSON list of objects with keys 'query' (string), "
    "'reference' (a list of {{\"name\", \"arguments\"}} calls), 'confidence' (0-1) and 'difficulty' (1-3). "
    "Problem: {problem}"
)

# -- the reference-aware judge (judge.py) -----------------------------------------------------
DEFAULT_REFERENCE_PROMPT = """You grade whether an AI agent completed a task with tools. You know one correct solution.

Task: {task}

Reference solution (one correct sequence of tool calls; other routes to the same effect are fine):
{reference}

What the agent did ({num_steps} step(s)):
{steps}

The agent's final answer: {answer}

Score 0-100:
- Goal achieved (same effect as the reference, possibly another way): 60-100. 100 for a clean
  solution; lower for unneeded or repeated actions.
- Goal not achieved: 0-40. Real partial progress scores higher; irrelevant actions, or the same
  action repeated over and over, score near 0.

Answer in exactly this form:
ACHIEVED: yes or no
SCORE: <integer 0-100>
REASON: <one sentence>"""
REFERENCE_PROMPT_FIELDS = ("task", "reference", "steps", "num_steps", "answer")
DEFAULT_REFERENCE_RETRY_PROMPT = (
    "Your answer could not be read. Reply with exactly three lines: 'ACHIEVED: yes' or 'ACHIEVED: no', "
    "'SCORE: <integer 0-100>', 'REASON: <one sentence>'."
)

# -- profile refinement (profile.py) --------------------------------------------------------
DEFAULT_REFINE_PROMPT = """These are the tools of an application, with what simple rules guessed about each
(the entity it acts on, and whether it only reads state or changes it):

{operations}

Correct the guesses that are wrong (names are not always <verb>_<noun>). Answer with only a JSON
object mapping each tool you correct to {{"entity": "<singular noun>", "kind": "read" or "write"}};
answer {{}} when every guess is right."""
