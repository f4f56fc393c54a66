"""Verification scripts run under the engine's Python in a subprocess (they import transformers)."""
