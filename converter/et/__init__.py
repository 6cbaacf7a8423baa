"""The Chakra ``.et`` format, owned in one place: every job that reads or writes ``.et`` files imports it.

* ``wire``: protobuf wire primitives (varints, keys, ``AttributeProto`` values);
* ``encode``: a ``Node`` encoded in spliceable pieces, and the ``GlobalMetadata`` record;
* ``decode``: reading records back, streaming (``read_et`` keeps a compact columnar trace).
"""
