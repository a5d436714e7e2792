"""Who may call the CPU policy server, and which weights it may load (``trainers.serving.access``).

The committed tiny policy is served in this process with an API key and runtime loading confined
to one directory, and once with the command line's default (runtime loading off); the launcher
(``PolicyServerProcess``) starts it as a child process on 0.0.0.0 with a key.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TINY_POLICY
from tests.test_policy_server import MESSAGES, _make_adapter
from trainers.policy_server import create_app, main, serve_in_background
from trainers.serving import PolicyServerProcess, check_endpoint, runtime_update_flags
from trainers.serving.access import API_KEY_ENV, check_bind

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    return error["message"]


def _load(http: httpx.Client, name: str, path: Path | str) -> httpx.Response:
    return http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}, headers=AUTH)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An allowed directory with a good and a pickled adapter, a directory outside it, and a symlink out."""
    root = tmp_path_factory.mktemp("weights")
    allowed, outside = root / "allowed", root / "outside"
    good = _make_adapter(TINY_POLICY, allowed / "good", seed=1)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    pickled = allowed / "pickled"
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(TINY_POLICY), config).save_pretrained(
        str(pickled), safe_serialization=False
    )
    stranger = _make_adapter(TINY_POLICY, outside / "stranger", seed=2)
    (allowed / "link").symlink_to(stranger, target_is_directory=True)
    return {"allowed": allowed, "good": good, "pickled": pickled, "stranger": stranger, "link": allowed / "link"}


@pytest.fixture(scope="module")
def keyed(dirs: dict[str, Path]) -> Iterator[httpx.Client]:
    """The tiny policy with an API key and runtime loading confined to ``dirs["allowed"]``."""
    app = create_app(TINY_POLICY, served_model_name="tiny-policy", api_key=KEY, allow_runtime_updates=True,
                     allowed_weight_dirs=[dirs["allowed"]])  # fmt: skip
    with serve_in_background(app) as url, httpx.Client(base_url=url, timeout=120) as http:
        yield http


# -- the API key ------------------------------------------------------------------------------------
def test_every_route_but_health_needs_the_key(keyed: httpx.Client) -> None:
    assert keyed.get("/health").status_code == 200
    for method, route in [("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/docs"),
                          ("POST", "/v1/chat/completions"), ("POST", "/v1/load_lora_adapter"),
                          ("POST", "/update_weights_from_disk")]:  # fmt: skip
        missing = keyed.request(method, route, json={"model": "tiny-policy", "messages": MESSAGES})
        assert f"${API_KEY_ENV}" in _error(missing, 401) and "requires an API key" in _error(missing, 401), route
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = keyed.request(method, route, headers={"Authorization": "Bearer s3cret-kez"})
        assert "wrong" in _error(wrong, 401), route
    assert "wrong" in _error(keyed.get("/v1/models", headers={"Authorization": KEY}), 401)  # no "Bearer"
    models = keyed.get("/v1/models", headers=AUTH)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny-policy"


def test_clients_send_the_key_from_the_environment(keyed: httpx.Client, monkeypatch) -> None:
    from langgraph_evolver.chat_model import PolicyChatModel
    from langgraph_evolver.errors import PolicyEndpointError

    url = str(keyed.base_url).rstrip("/") + "/v1"
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(PolicyEndpointError, match=API_KEY_ENV):
        check_endpoint(url)
    import openai

    with pytest.raises(openai.AuthenticationError):
        PolicyChatModel(base_url=url, model="tiny-policy", max_tokens=4, max_retries=0).invoke("hi")
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert check_endpoint(url, "tiny-policy") == ["tiny-policy"]
    reply = PolicyChatModel(base_url=url, model="tiny-policy", max_tokens=4, max_retries=0).invoke("hi")
    assert reply.response_metadata["token_ids"]


def test_openapi_lists_each_routes_errors(keyed: httpx.Client) -> None:
    paths = keyed.get("/openapi.json", headers=AUTH).json()["paths"]

    def codes(path: str, method: str) -> set[str]:
        return set(paths[path][method]["responses"]) - {"200"}

    assert codes("/v1/load_lora_adapter", "post") == {"400", "401", "403", "404", "413"}
    assert codes("/v1/unload_lora_adapter", "post") == {"400", "401", "403", "404", "413"}
    assert codes("/update_weights_from_disk", "post") == {"400", "401", "403", "413"}
    assert codes("/v1/chat/completions", "post") == {"400", "401", "404", "413"}
    assert codes("/v1/models", "get") == {"401"} and "401" not in codes("/health", "get")
    assert "security" not in paths["/health"]["get"] and paths["/v1/models"]["get"]["security"] == [{"bearer": []}]


# -- runtime loading ----------------------------------------------------------------------------------
def test_an_adapter_inside_the_allowed_directory_loads_and_serves(keyed: httpx.Client, dirs) -> None:
    assert _load(keyed, "good", dirs["good"]).status_code == 200
    body = {"model": "good", "messages": MESSAGES, "max_tokens": 2, "temperature": 0}
    served = keyed.post("/v1/chat/completions", json=body, headers=AUTH).json()
    assert served["system_fingerprint"] == "good"
    assert keyed.post("/v1/unload_lora_adapter", json={"lora_name": "good"}, headers=AUTH).status_code == 200


def test_paths_outside_the_allowed_directories_are_refused(keyed: httpx.Client, dirs) -> None:
    for path in [dirs["stranger"], dirs["link"], dirs["allowed"] / ".." / "outside" / "stranger", "/etc",
                 dirs["allowed"].parent / "missing"]:  # fmt: skip
        message = _error(_load(keyed, "x", path), 403)
        assert "outside the directories" in message and "--allowed-weight-dirs" in message, path
    update = {"model_path": str(dirs["stranger"]), "version": "v1"}
    assert "outside" in _error(keyed.post("/update_weights_from_disk", json=update, headers=AUTH), 403)
    names = {m["id"] for m in keyed.get("/v1/models", headers=AUTH).json()["data"]}
    assert names == {"tiny-policy"}, "a refused path loaded something"
    # the model's own directory always counts: putting the base weights back is allowed
    restore = {"model_path": str(TINY_POLICY), "version": "base-again"}
    assert keyed.post("/update_weights_from_disk", json=restore, headers=AUTH).json()["version"] == "base-again"


def test_a_pickled_adapter_is_refused(keyed: httpx.Client, dirs) -> None:
    assert (dirs["pickled"] / "adapter_model.bin").is_file()
    message = _error(_load(keyed, "pickled", dirs["pickled"]), 400)
    assert "adapter_model.safetensors" in message and "adapter_model.bin" in message and "pickle" in message
    assert "pickled" not in {m["id"] for m in keyed.get("/v1/models", headers=AUTH).json()["data"]}


# -- every file a load opens, and what an adapter asks for (issue 38) ----------------------------------------
@pytest.fixture(scope="module")
def traps(dirs: dict[str, Path]) -> dict[str, Path]:
    """Directories inside the allowed one whose files lead outside it, or whose config asks for more than it holds."""
    allowed, outside = dirs["allowed"], dirs["allowed"].parent / "outside"
    good = dirs["good"]
    linked = allowed / "file-link"  # its weights file is a symlink to another adapter's, outside
    linked.mkdir()
    shutil.copy(good / "adapter_config.json", linked)
    (linked / "adapter_model.safetensors").symlink_to(dirs["stranger"] / "adapter_model.safetensors")
    weights = outside / "weights"  # a base model's weights outside, named by a shard index inside
    weights.mkdir()
    shutil.copy(TINY_POLICY / "model.safetensors", weights)
    sharded = allowed / "sharded"
    sharded.mkdir()
    shutil.copy(TINY_POLICY / "config.json", sharded)
    from safetensors import safe_open

    with safe_open(str(TINY_POLICY / "model.safetensors"), "pt") as f:
        weight_map = {key: "../../outside/weights/model.safetensors" for key in f.keys()}  # noqa: SIM118
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    found = {"file-link": linked, "sharded": sharded, "weights": weights}
    for name, change in (("huge-rank", {"r": 65536}), ("wide", {"target_modules": ["q_proj", "v_proj", "k_proj"]})):
        shutil.copytree(good, allowed / name)
        config = json.loads((good / "adapter_config.json").read_text())
        (allowed / name / "adapter_config.json").write_text(json.dumps({**config, **change}))
        found[name] = allowed / name
    return found


def _models(http: httpx.Client) -> set[str]:
    return {m["id"] for m in http.get("/v1/models", headers=AUTH).json()["data"]}


def test_every_file_a_load_opens_must_resolve_inside_the_allowed_directories(keyed: httpx.Client, dirs, traps):
    message = _error(_load(keyed, "linked", traps["file-link"]), 403)
    stranger_weights = (dirs["stranger"] / "adapter_model.safetensors").resolve()
    assert f"resolves to {stranger_weights}" in message and "'adapter_model.safetensors'" in message
    update = {"model_path": str(traps["sharded"]), "version": "outside"}
    message = _error(keyed.post("/update_weights_from_disk", json=update, headers=AUTH), 403)
    assert "../../outside/weights/model.safetensors" in message
    assert f"resolves to {(traps['weights'] / 'model.safetensors').resolve()}" in message
    assert _models(keyed) == {"tiny-policy"}
    body = {"messages": MESSAGES, "max_tokens": 1}
    assert keyed.post("/v1/chat/completions", json=body, headers=AUTH).json()["system_fingerprint"] != "outside"


def test_a_403_says_where_a_symlink_resolves(keyed: httpx.Client, dirs) -> None:
    message = _error(_load(keyed, "x", dirs["link"]), 403)
    assert repr(str(dirs["link"])) in message and f"resolves to {dirs['stranger'].resolve()}" in message


def test_an_adapter_whose_config_asks_for_more_than_its_tensors_is_refused_before_allocating(keyed, traps) -> None:
    import resource

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    message = _error(_load(keyed, "huge", traps["huge-rank"]), 400)
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert "rank 65536" in message and "rank 8" in message and "nothing was loaded" in message
    assert grew_mib < 128, f"the process peak grew {grew_mib:.0f} MiB (r=65,536 allocated 512 MB before)"
    message = _error(_load(keyed, "wide", traps["wide"]), 400)
    assert "targets 12 modules" in message and "k_proj" in message and "Nothing was loaded" in message
    assert _models(keyed) == {"tiny-policy"}


def test_a_nul_byte_in_a_path_is_a_400(keyed: httpx.Client, dirs) -> None:
    bad = f"{dirs['good']}\x00/../../etc"
    assert "NUL byte" in _error(_load(keyed, "nul", bad), 400)
    update = {"model_path": bad, "version": "v"}
    assert "NUL byte" in _error(keyed.post("/update_weights_from_disk", json=update, headers=AUTH), 400)
    assert keyed.get("/health").status_code == 200


def test_a_key_with_whitespace_around_it_is_refused_at_start(monkeypatch) -> None:
    with pytest.raises(ValueError, match="spaces or a newline around it"):
        create_app(TINY_POLICY, api_key=KEY + "\n")
    monkeypatch.setenv(API_KEY_ENV, f" {KEY}")
    with pytest.raises(SystemExit, match="spaces or a newline around it"):
        main(["--model", str(TINY_POLICY)])


# -- the command line and the launcher -----------------------------------------------------------------
def _served_by_the_command_line(argv: list[str], monkeypatch) -> tuple[Any, dict[str, Any]]:
    """The app ``python -m trainers.policy_server ARGV`` would serve, and uvicorn's arguments (not run)."""
    import uvicorn

    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append((app, kwargs)))
    main(["--model", str(TINY_POLICY), "--served-model-name", "tiny-policy", *argv])
    assert len(calls) == 1
    return calls[0]


def test_the_command_line_defaults_to_no_runtime_loading_and_the_key_from_the_environment(dirs, monkeypatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    app, _ = _served_by_the_command_line([], monkeypatch)
    with serve_in_background(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        _error(http.get("/v1/models"), 401)
        assert http.get("/v1/models", headers=AUTH).status_code == 200
        requests: list[tuple[str, dict[str, Any]]] = [
            ("/v1/load_lora_adapter", {"lora_name": "good", "lora_path": str(dirs["good"])}),
            ("/v1/unload_lora_adapter", {"lora_name": "good"}),
            ("/update_weights_from_disk", {"model_path": str(TINY_POLICY)}),
        ]
        for route, body in requests:
            assert "--allow-runtime-updates" in _error(http.post(route, json=body, headers=AUTH), 403), route


def test_the_command_line_confines_runtime_loading_to_the_directories_given(dirs, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    other = tmp_path / "other"
    other.mkdir()
    flags = ["--allow-runtime-updates", "--allowed-weight-dirs", f"{other},{dirs['allowed']}"]
    app, _ = _served_by_the_command_line(flags, monkeypatch)
    with serve_in_background(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/v1/models").status_code == 200  # no key set: open on loopback
        ok = http.post("/v1/load_lora_adapter", json={"lora_name": "good", "lora_path": str(dirs["good"])})
        assert ok.status_code == 200
        out = http.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(dirs["link"])})
        assert "outside" in _error(out, 403)


def test_the_command_line_serves_with_the_limits(monkeypatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    flags = ["--max-request-bytes", "1000", "--max-header-bytes", "2048", "--header-timeout", "4"]
    app, uvicorn_args = _served_by_the_command_line(flags, monkeypatch)
    assert uvicorn_args["h11_max_incomplete_event_size"] == 2048 and uvicorn_args["http"].__name__ == "GuardedHTTP"
    with serve_in_background(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        big = {"messages": [{"role": "user", "content": "x" * 2000}]}
        assert "1000 bytes" in _error(http.post("/v1/chat/completions", json=big), 413)
    with pytest.raises(SystemExit, match="max_header_bytes"):
        main(["--model", str(TINY_POLICY), "--max-header-bytes", "0"])


def test_a_public_address_needs_a_key_or_insecure(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(SystemExit, match="refusing to serve on 0.0.0.0 without an API key.*--insecure"):
        main(["--model", str(TINY_POLICY), "--host", "0.0.0.0"])
    with pytest.raises(SystemExit, match="no such directory"):
        main(["--model", str(TINY_POLICY), "--allowed-weight-dirs", str(tmp_path / "missing")])
    _, uvicorn_args = _served_by_the_command_line(["--host", "0.0.0.0", "--insecure"], monkeypatch)
    assert uvicorn_args["host"] == "0.0.0.0"
    _, uvicorn_args = _served_by_the_command_line(["--host", "0.0.0.0", "--api-key", KEY], monkeypatch)
    assert uvicorn_args["host"] == "0.0.0.0"
    check_bind("::1", api_key=None, insecure=False)
    with pytest.raises(SystemExit):
        check_bind("my-host.example", api_key=None, insecure=False)


@pytest.mark.slow
def test_the_launcher_passes_the_key_and_the_run_directory(tmp_path, monkeypatch) -> None:
    """What the trainer does: start the server as a child process, then load what it saved in its output directory."""
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    run = tmp_path / "run"
    run.mkdir()
    adapter = _make_adapter(TINY_POLICY, run / "served_adapters" / "step1", seed=3)
    outside = _make_adapter(TINY_POLICY, tmp_path / "elsewhere", seed=4)
    with PolicyServerProcess(TINY_POLICY, host="0.0.0.0", threads=1, log_path=run / "policy_server.log",
                             api_key=KEY) as server:  # fmt: skip
        root = server.base_url.removesuffix("/v1")
        with httpx.Client(base_url=root, timeout=60) as http:
            assert http.get("/health").status_code == 200
            _error(http.get("/v1/models"), 401)
            assert _load(http, "step1", adapter).status_code == 200
            assert "outside" in _error(_load(http, "x", outside), 403)


def test_runtime_update_flags() -> None:
    assert runtime_update_flags([]) == ["--allow-runtime-updates"]
    assert runtime_update_flags([Path("a"), "b"]) == ["--allow-runtime-updates", "--allowed-weight-dirs", "a,b"]
    from langgraph_evolver.errors import ConfigError

    with pytest.raises(ConfigError, match="comma"):
        runtime_update_flags(["a,b"])
