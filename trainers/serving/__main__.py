"""``python -m trainers.serving`` is ``python -m trainers.policy_server``."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: see trainers/policy_server.py

from .cli import main  # noqa: E402

main()
