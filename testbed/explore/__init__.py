"""``testbed explore``: seeded fault swarms on the simulator, shrinking, replay (issue 17)."""
