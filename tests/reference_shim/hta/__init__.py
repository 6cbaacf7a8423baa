"""Minimal stand-in for HolisticTraceAnalysis (see ../README.md)."""
