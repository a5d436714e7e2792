"""The one loader of user code: ``"pkg.module:attr"``, ``pkg.module.attr`` or ``"./path/file.py:attr"``.

Every place that takes code by name goes through ``load_object``: ``--agent`` / ``--reward`` /
``--agent_input`` (``as_agent``), environments by dotted path (``load_environment``), the
questioning CLI's ``--setup`` and the ingest CLI's ``--redact``. A file path is loaded the way
``langgraph dev`` loads the files ``langgraph.json`` names (its directory goes on ``sys.path``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["import_modules", "load_module_file", "load_object"]


def _is_file_path(location: str) -> bool:
    return location.endswith(".py") or "/" in location or "\\" in location


def load_module_file(location: str, *, what: str = "object") -> Any:
    """The module in the Python file ``location`` (``./pkg/agent.py``), loaded once per resolved path.

    Its directory goes on ``sys.path`` first, as ``langgraph dev`` does for the files ``langgraph.json``
    names, so the file can import its neighbours.
    """
    file = Path(location).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"{what}: no file {location!r} (resolved to {file}); give a path to a .py file, or a "
                          "module path such as 'my_pkg.agent:graph'.")  # fmt: skip
    name = f"_evolver_file_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{what}: cannot load {file} as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def load_object(path: str, *, what: str = "object") -> Any:
    """``"package.module:attribute"``, ``package.module.attribute`` or ``"./path/file.py:attribute"`` (the form
    ``langgraph.json`` uses) → the object."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
        if module_name and _is_file_path(path) and path.endswith(".py"):  # "./agent.py" with no attribute
            module_name, attr = "", ""
    if not module_name or not attr:
        raise ConfigError(f"{what} {path!r} must look like 'my_pkg.module:name' or './path/file.py:name'.")
    try:
        module = load_module_file(module_name, what=what) if _is_file_path(module_name) else (
            importlib.import_module(module_name))  # fmt: skip
    except ImportError as e:
        raise ConfigError(f"Cannot import {module_name!r} for {what} {path!r}: {e}. Is it on PYTHONPATH "
                          "(run from the directory that holds it, or pip install -e it)?") from e  # fmt: skip
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise ConfigError(f"{module_name!r} has no {attr!r} for {what}; it defines: {', '.join(public)}") from None
    return obj


def import_modules(names: str | Iterable[str]) -> None:
    """Import each module of ``names`` (a comma-separated string or an iterable) for its side effects.

    How a served graph picks up a user's environments: ``EVOLVER_ENV_MODULES="my_pkg.envs"`` names
    modules that call ``register_environment`` when imported.
    """
    if isinstance(names, str):
        names = names.split(",")
    for name in filter(None, (n.strip() for n in names)):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"Cannot import module {name!r} (EVOLVER_ENV_MODULES): {e}.") from e
