"""Self-questioning: explore an environment, synthesize tasks, filter them, store them."""
