"""Minimal stand-in for et_replay (see ../README.md)."""
