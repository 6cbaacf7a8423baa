"""The tools that come with mlc-chakra besides the converter, without it: ``jsonize`` (``.et`` to
JSON), ``visualize`` (``.et`` to a graph: DOT, GraphML, or PDF/SVG through graphviz) and
``generate`` (``chakra_generator``'s microbenchmark traces)."""
