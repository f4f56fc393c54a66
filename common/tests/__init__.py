"""The unit tests of the runtime package: `pytest common/` after `make venv` alone (docs/testing.md)."""
