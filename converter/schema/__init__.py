"""Schemas: host-trace versions and the 1.0.1 mapping (input), Chakra field numbers and enums (output)."""
