"""temper's auto-tuner: tasks, schedule spaces, cost model, search and measurement."""
