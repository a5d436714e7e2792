"""Reading a YAML config file: one mapping of key: value, or a ``ConfigError`` that names the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError

__all__ = ["read_yaml_mapping"]


def read_yaml_mapping(path: str | Path, *, label: str) -> dict[str, Any]:
    """The mapping in the YAML file at ``path`` (an empty file: ``{}``); ``label`` names it in the errors
    (``--config x.yaml``, ``train_config x.yaml``)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"Cannot read {label}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label} must be a YAML mapping of field: value.")
    return data
