"""The built-in sandbox: oracle, partial credit, determinism, bad actions, registry, profile."""

from __future__ import annotations

import pytest

from env_tools.sandbox import APPS, TEMPLATES, TOOLS, SandboxEnvironment, environment_profile, seed_tasks
from langgraph_evolver.environment import list_environments, load_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, ToolCall


def replay(env, task, calls, answer):
    env.reset(task)
    for call in calls:
        env.step(Action(tool_calls=(call,)))
    env.step(Action(content=answer))
    return env.evaluate()


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_reference_solution_scores_one_and_every_call_matters(split):
    env = SandboxEnvironment()
    for task in seed_tasks(split):
        answer = task.metadata["answer"] or "Done."
        assert replay(env, task, task.reference_solution, answer) == 1.0, task.id
        for k in range(len(task.reference_solution)):
            dropped = task.reference_solution[:k] + task.reference_solution[k + 1 :]
            assert replay(env, task, dropped, answer) < 1.0, (task.id, k)


def test_size_and_levels():
    train, test = seed_tasks("train"), seed_tasks("test")
    assert len(train) >= 60 and len(test) >= 60
    assert len(TOOLS) >= 20 and len(APPS) >= 4
    for tasks in (train, test):
        assert {t.metadata["level"] for t in tasks} == {1, 2, 3}
        assert {t.metadata["template"] for t in tasks} == set(TEMPLATES)
    assert len({t.id for t in train + test}) == len(train) + len(test)
    lengths = {t.metadata["level"]: set() for t in train}
    for t in train:
        lengths[t.metadata["level"]].add(len(t.reference_solution))
    assert max(lengths[1]) == 1 and max(lengths[3]) >= 4


def test_held_out_tasks_are_new_worlds_over_known_names():
    train, test = seed_tasks("train"), seed_tasks("test")
    assert not {t.env_params["seed"] for t in train} & {t.env_params["seed"] for t in test}
    assert not {(t.query, t.env_params["seed"]) for t in train} & {(t.query, t.env_params["seed"]) for t in test}


def test_deterministic_and_independent_instances():
    task = seed_tasks("train")[5]
    a, b = SandboxEnvironment(), SandboxEnvironment()
    assert a.reset(task) == b.reset(task)
    call = task.reference_solution[0]
    assert a.step(Action(tool_calls=(call,))) == b.step(Action(tool_calls=(call,)))
    a.step(Action(tool_calls=(ToolCall(name="add_contact", arguments={"name": "Zed", "phone": "1"}),)))
    assert a.world.contact_by_name("Zed") is not None
    assert b.world.contact_by_name("Zed") is None


def test_wrong_answer_and_collateral_damage_lower_the_score():
    env = SandboxEnvironment()
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_phone")
    assert replay(env, task, task.reference_solution, "555-000") == 0.5  # looked up, wrong answer
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "pay_contact")
    cid = task.reference_solution[1].arguments["contact_id"]
    extra = ToolCall(name="pay", arguments={"contact_id": cid, "amount": 5})
    # the payment and the lookup check out, the balance does not; the extra payment halves the rest
    assert replay(env, task, (*task.reference_solution, extra), "Done.") == pytest.approx(2 / 3 * 0.5)
    assert replay(env, task, (), "Done.") == 0.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall(name="nope", arguments={}), "unknown tool 'nope'"),
        (ToolCall(name="get_contact", arguments="{broken"), "not a JSON object"),
        (ToolCall(name="get_contact", arguments={}), "missing required argument(s) ['contact_id']"),
        (ToolCall(name="get_contact", arguments={"contact_id": 3}), "must be a string"),
        (ToolCall(name="pay", arguments={"contact_id": "c1", "amount": True}), "must be a integer"),
        (ToolCall(name="get_balance", arguments={"x": 1}), "unknown argument(s) ['x']"),
        (ToolCall(name="get_contact", arguments={"contact_id": "c0"}), "no contact with id 'c0'"),
        (ToolCall(name="pay", arguments={"contact_id": "c1", "amount": -5}), "no contact"),
    ],
)
def test_bad_actions_become_error_observations(call, message):
    env = SandboxEnvironment()
    env.reset(seed_tasks("train")[0])
    result = env.step(Action(tool_calls=(call,)))
    (obs,) = result.observations
    assert obs.is_error and message in obs.content
    assert not result.done


def test_insufficient_funds_is_an_error_observation():
    env = SandboxEnvironment()
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "pay_or_defer" and "pay you later" in str(
        t.reference_solution))  # fmt: skip
    env.reset(task)
    cid = task.reference_solution[2].arguments["contact_id"]
    amount = int(task.query.split(" dollars")[0].split()[-1])
    (obs,) = env.step(
        Action(tool_calls=(ToolCall(name="pay", arguments={"contact_id": cid, "amount": amount}),))
    ).observations
    assert obs.is_error and "insufficient funds" in obs.content


def test_use_before_reset_and_bad_params_fail_clearly():
    env = SandboxEnvironment()
    with pytest.raises(EnvironmentFailure, match="reset"):
        env.step(Action(content="hi"))
    task = seed_tasks("train")[0]
    bad = type(task).from_dict({**task.to_dict(), "env_params": {"seed": 1, "colour": "red"}})
    with pytest.raises(EnvironmentFailure, match="colour"):
        env.reset(bad)


def test_registry_names_and_errors():
    assert "sandbox" in list_environments()
    assert isinstance(load_environment("sandbox"), SandboxEnvironment)
    assert isinstance(load_environment("env_tools.sandbox:SandboxEnvironment"), SandboxEnvironment)
    with pytest.raises(ConfigError, match="Registered: .*sandbox"):
        load_environment("sandbx")
    with pytest.raises(ConfigError, match="Could not import"):
        load_environment("no_such_module:Env")


def test_profile_matches_tools():
    profile = environment_profile()
    ops = {op for entity in profile["entities"].values() for op in entity["operations"]}
    assert ops == set(TOOLS)
    assert set(profile["operations"]) == set(TOOLS)
    assert SandboxEnvironment().profile() == profile


def test_tool_schemas_are_valid_openai_functions():
    env = SandboxEnvironment()
    obs = env.reset(seed_tasks("train")[10])
    for tool in obs.tools:
        fn = tool["function"]
        assert tool["type"] == "function" and fn["description"]
        assert fn["parameters"]["type"] == "object"
        assert set(fn["parameters"]["required"]) == set(fn["parameters"]["properties"])


def test_world_records_hold_only_scalars_so_clone_is_a_deep_copy():
    from env_tools.sandbox.world import COLLECTIONS, World

    for seed in range(50):
        world = World.generate(seed)
        twin = world.clone()
        assert twin == world
        for name in COLLECTIONS:
            for rid, record in getattr(world, name).items():
                assert all(isinstance(v, str | int | float | bool | None) for v in record.values()), (name, record)
                assert getattr(twin, name)[rid] is not record
        twin.contacts[next(iter(twin.contacts))]["name"] = "changed"
        twin.viewed.add("x")
        assert twin != world


def test_the_validation_split_is_carved_from_the_training_stream_far_from_the_seed_tasks():
    from env_tools.sandbox import SandboxEnvironment
    from env_tools.sandbox.tasks import VALIDATION_START

    env = SandboxEnvironment()
    validation, train, test = (env.list_tasks(s) for s in ("validation", "train", "test"))
    assert len(validation) == 75 and validation[0].id == f"sandbox-train-{VALIDATION_START:05d}"
    assert not {t.id for t in validation} & {t.id for t in train} and all(
        t.metadata["split"] == "train" for t in validation
    )
    assert {t.metadata["level"] for t in validation} == {1, 2, 3}
    assert {t.id for t in validation}.isdisjoint({t.id for t in test})
