"""One ``LLMSettings`` shapes every LLM role; the old single keywords still work and override it."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from langgraph_evolver._llm import LLMSettings
from langgraph_evolver.attribution import LLMJudge, make_judge
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience import LLMExtractor
from langgraph_evolver.questioning import LLMSynthesizer, ReferenceAwareJudge
from langgraph_evolver.testing import ScriptedChatModel
from langgraph_evolver.types import Action, Step, Task, Trajectory

ROLES = [LLMJudge, LLMExtractor, LLMSynthesizer, ReferenceAwareJudge]


def _model() -> ScriptedChatModel:
    return ScriptedChatModel([AIMessage("x")])


@pytest.mark.parametrize(
    ("role", "defaults"),
    [
        (LLMJudge, (8, 3, 1.0, 30.0, 60.0)),
        (LLMExtractor, (8, 2, 1.0, 30.0, 120.0)),
        (LLMSynthesizer, (4, 2, 1.0, 30.0, 120.0)),
        (ReferenceAwareJudge, (8, 3, 1.0, 30.0, 60.0)),
    ],
)
def test_each_role_keeps_its_defaults(role, defaults):
    built = role(_model())
    got = (built.max_concurrency, built.max_retries, built.backoff_s, built.max_backoff_s, built.timeout_s)
    assert got == defaults
    assert built.settings == role.DEFAULT_SETTINGS


@pytest.mark.parametrize("role", ROLES)
def test_settings_object_and_old_keywords(role):
    settings = LLMSettings(max_concurrency=2, max_retries=0, backoff_s=0.0, timeout_s=None)
    built = role(_model(), settings=settings)
    assert built.settings is settings and built.max_retries == 0 and built.timeout_s is None
    overridden = role(_model(), settings=settings, max_retries=5, backoff_s=0.25)
    assert (overridden.max_retries, overridden.backoff_s, overridden.max_concurrency) == (5, 0.25, 2)


def test_extractor_concurrency_keyword_is_max_concurrency():
    extractor = LLMExtractor(_model(), concurrency=3)
    assert extractor.concurrency == extractor.settings.max_concurrency == 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"backoff_s": -1.0}, "backoff_s and max_backoff_s must be >= 0"),
        ({"timeout_s": 0.0}, "timeout_s must be > 0 or None"),
        ({"price_per_1k_output": -0.1}, "Token prices must be >= 0"),
    ],
)
def test_bad_settings_are_config_errors(fields, message):
    with pytest.raises(ConfigError, match=message):
        LLMSettings(**fields)
    with pytest.raises(ConfigError, match=message):
        ReferenceAwareJudge(_model(), **fields) if "price_per_1k_output" not in fields else LLMJudge(_model(), **fields)


def test_settings_must_be_llm_settings():
    with pytest.raises(ConfigError, match="settings must be an LLMSettings"):
        LLMJudge(_model(), settings={"max_retries": 1})  # type: ignore[arg-type]


def test_make_judge_passes_settings_and_prices_reach_the_cost():
    usage = {"input_tokens": 120, "output_tokens": 10, "total_tokens": 130}
    model = ScriptedChatModel([AIMessage("Step 1: GOOD - answered", usage_metadata=usage)])
    judge = make_judge(model, settings=LLMSettings(price_per_1k_input=1000.0, backoff_s=0.0))
    traj = Trajectory(id="t", task=Task(id="a", query="Say hi"), steps=(Step(index=0, action=Action(content="hi")),),
                      reward=1.0)  # fmt: skip
    verdict = judge.judge(traj)
    assert verdict.labels is not None
    assert verdict.input_tokens == 120 and verdict.cost_usd == pytest.approx(120.0)


@pytest.mark.parametrize("role", ROLES)
def test_the_settings_keywords_are_one_list_next_to_llm_settings(role):
    """No role repeats the keywords in its signature: they come from ``LLMKeywords`` (one list, ``_llm.py``)."""
    import dataclasses
    import inspect

    from langgraph_evolver._llm import SETTINGS_KEYWORDS

    assert set(SETTINGS_KEYWORDS) == {f.name for f in dataclasses.fields(LLMSettings)}
    params = inspect.signature(role.__init__).parameters
    assert not set(SETTINGS_KEYWORDS) & set(params), f"{role.__name__} repeats settings keywords"
    assert params["llm"].kind is inspect.Parameter.VAR_KEYWORD
    built = role(_model(), price_per_1k_input=2.0, timeout_s=None)  # every field, on every role
    assert built.settings.price_per_1k_input == 2.0 and built.timeout_s is None


@pytest.mark.parametrize("role", ROLES)
def test_a_mistyped_keyword_names_the_settings_keywords(role):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'max_retry'.*max_retries"):
        role(_model(), max_retry=2)


def test_extractor_refuses_concurrency_and_max_concurrency_together():
    with pytest.raises(TypeError, match="both concurrency and max_concurrency"):
        LLMExtractor(_model(), concurrency=2, max_concurrency=3)
