"""Chakra traces: the .et protobuf stream and its chakra_jsonizer JSON form, read by one rulebook.

rules        node types, attribute names, the comm type and peer of a node, the node -> row rule
framing      varint-framed records of an .et stream, one by one or in blocks
columns      Node and AttributeProto records decoded column-wise from their wire bytes
collectives  the collective rows of a block of nodes, built column-wise by the rules' tables
rows         NodeRows: decoded nodes (upb messages or columns) to ops and collectives batches
et           the .et reader (`parse`, and `parse_records`, the record-by-record reference)
many         many small .et files read together (`parse_many`)
jsonizer     the chakra_jsonizer reader

The registry entries are tracekit.parsers.formats.chakra_et and .chakra_json.
"""
