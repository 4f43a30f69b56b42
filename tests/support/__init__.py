"""Helpers shared by tests: real services started and stopped by the test run itself."""
