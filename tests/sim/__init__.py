"""The simulation test: features and faults mixed (issue #24); see test_simulation.py."""
