"""The data model is declared once (schemas/tables.toml); everything else follows it."""

from __future__ import annotations

from pathlib import Path

from tracekit.schema import TABLES, arrow_schema, markdown, table_specs

ROOT = Path(__file__).resolve().parent.parent


def test_documentation_is_generated_from_the_declaration() -> None:
    assert (ROOT / "schemas" / "README.md").read_text() == markdown(), "run `make docs`"


def test_the_row_types_are_those_tables_toml_declares() -> None:
    from tracekit.schema import row_classes

    assert (ROOT / "tracekit" / "rows.py").read_text() == row_classes(), "run `make docs`"


def test_every_table_has_documented_columns_and_a_key_among_them() -> None:
    assert tuple(table_specs()) == TABLES
    for spec in table_specs().values():
        assert spec.doc and all(c.doc for c in spec.columns)
        assert set(spec.key) <= set(spec.column_names)
        assert arrow_schema(spec.name).names == spec.column_names


def test_the_issue_contract_columns_exist() -> None:
    contract = {
        "traces": "trace_id job_id rank path format schema_version size_bytes sha256 node_count status error",
        "jobs": "job_id world_size started_at label source",
        "process_groups": "job_id pg_name pg_desc group_size ranks",
        "collectives": "job_id rank op_id op_name comm_type is_uneven pg_name group_size peer dtype in_elems "
        "out_elems in_bytes out_bytes in_splits out_splits seq start_us duration_us",
        "ops": "job_id rank op_id name type start_us duration_us ctrl_deps data_deps",
    }
    for table, columns in contract.items():
        assert set(columns.split()) <= set(arrow_schema(table).names), table


def test_the_comm_type_table_names_every_chakra_code_as_the_proto_does() -> None:
    from tracekit.parsers import et_def_pb2
    from tracekit.schema import COMM_TYPE_TABLE, COMM_TYPES

    codes = {code: c.name for c in COMM_TYPE_TABLE for code in c.chakra_codes}
    proto = {v.number: v.name for v in et_def_pb2.CollectiveCommType.DESCRIPTOR.values}
    assert set(codes) == set(proto)
    assert all(codes[k] == name.removesuffix("_BLOCK") for k, name in proto.items())
    assert len({c.stem for c in COMM_TYPE_TABLE}) == len(COMM_TYPES) == len(set(COMM_TYPES))


def test_the_comm_type_spellings_all_come_from_the_one_table() -> None:
    from tracekit.parsers.common.names import C10D_NAMES, CHAKRA_COMM_TYPES, comm_type_of
    from tracekit.report.format import COMM_NAMES
    from tracekit.schema import COMM_TYPE_TABLE

    for c in COMM_TYPE_TABLE:
        assert COMM_NAMES[c.name] == c.display
        assert comm_type_of(f"nccl:{c.stem}") == c.name  # the stem reads back as the type
        if c.c10d is not None:
            assert C10D_NAMES[c.name] == c.c10d and comm_type_of(f"c10d::{c.c10d}_") == c.name
        assert all(CHAKRA_COMM_TYPES[code] == c.name for code in c.chakra_codes)
