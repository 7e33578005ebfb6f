"""tracekit.parsers.chakra.rules: the tables every Chakra reader reads, and the reference row rule."""

from __future__ import annotations

from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import TraceMeta
from tracekit.parsers.chakra import jsonizer, rules
from tracekit.parsers.common.values import Checker


def _node(node_type: int, **attrs: int | str) -> et_def_pb2.Node:
    made = [
        et_def_pb2.AttributeProto(name=k, string_val=v)
        if isinstance(v, str)
        else et_def_pb2.AttributeProto(name=k, int64_val=v)
        for k, v in attrs.items()
    ]
    return et_def_pb2.Node(id=3, name="n", type=node_type, attr=made)  # type: ignore[arg-type]


def _row(node: et_def_pb2.Node) -> dict[str, object] | None:
    row = rules.collective_row(node, node.type, Checker(TraceMeta(format="chakra_et")))
    return None if row is None else {"comm_type": row.comm_type, "peer": row.peer, "in_bytes": row.in_bytes}


def test_a_send_and_a_recv_take_their_comm_type_from_the_node_type_and_their_peer_from_one_attribute() -> None:
    # The comm_type attribute of a send or recv is ignored (the MSCCL converter writes NodeType numbers there).
    send = _node(rules.COMM_SEND_NODE, comm_type=5, comm_dst=2, comm_src=9, comm_size=64)
    recv = _node(rules.COMM_RECV_NODE, comm_type=6, comm_dst=9, comm_src=1, comm_size=64)
    assert _row(send) == {"comm_type": "SEND", "peer": 2, "in_bytes": 64}
    assert _row(recv) == {"comm_type": "RECV", "peer": 1, "in_bytes": 64}
    assert rules.PEER_ATTRS == {rules.COMM_SEND_NODE: rules.COMM_DST, rules.COMM_RECV_NODE: rules.COMM_SRC}


def test_a_collective_needs_a_comm_type_code_and_keeps_an_unknown_one_as_its_integer() -> None:
    assert _row(_node(rules.COMM_COLL_NODE, comm_size=8)) is None  # an old converter's CPU-side c10d op
    assert not rules.gives_row(rules.COMM_COLL_NODE, None) and rules.gives_row(rules.COMM_SEND_NODE, None)
    assert _row(_node(rules.COMM_COLL_NODE, comm_type=et_def_pb2.ALL_REDUCE, comm_dst=4)) == {
        "comm_type": "ALL_REDUCE",
        "peer": None,
        "in_bytes": None,
    }
    assert _row(_node(rules.COMM_COLL_NODE, comm_type=999))["comm_type"] == "COMM_TYPE_999"  # type: ignore[index]


def test_node_type_names_keep_unknown_numbers() -> None:
    assert rules.TYPE_NAMES[rules.COMM_COLL_NODE] == "COMM_COLL_NODE"
    assert rules.TYPE_NAMES[8] == "NODE_TYPE_8"
    assert set(rules.EXTENSION_NODE_TYPES.values()).isdisjoint(rules.NODE_TYPE_NAMES)


def test_the_json_reader_reads_the_integer_members_the_rules_name() -> None:
    members = {kind for kind in rules.INT_VARIANTS if kind != "bool_val"}
    assert set(jsonizer._INT_ATTR_KEYS.values()) == members
    assert jsonizer._INT_ATTR_KEYS["sfixed64Val"] == "sfixed64_val"
    assert rules.INT_LIST_VARIANTS == {kind.replace("_val", "_list") for kind in members}
