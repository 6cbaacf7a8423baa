"""Compact ``.et`` files for ASTRA-sim: fewer nodes, the same simulated time (see ``plan.py``)."""
