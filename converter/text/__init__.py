"""ASTRA-sim 1.0 text workloads -> one Chakra ``.et`` file per NPU (``chakra_converter Text``)."""
