"""Benchmarks of chakra-convert-fast against mlc-chakra's reference converter (``pytest bench/``)."""
