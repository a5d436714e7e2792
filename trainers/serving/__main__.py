"""``python -m trainers.serving`` is ``python -m trainers.policy_server``."""

from .cli import main

main()
