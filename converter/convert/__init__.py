"""Converting one trace: read (stream records, spill tails) -> graph -> cycles -> encode and write."""
