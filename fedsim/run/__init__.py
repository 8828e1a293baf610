"""The runner: reads the Scenario, builds everything once, owns the round loop and the run folder."""
