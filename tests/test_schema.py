"""The data model is declared once (schemas/tables.toml); everything else follows it."""

from __future__ import annotations

from pathlib import Path

from tracekit.schema import TABLES, arrow_schema, markdown, table_specs

ROOT = Path(__file__).resolve().parent.parent


def test_documentation_is_generated_from_the_declaration() -> None:
    assert (ROOT / "schemas" / "README.md").read_text() == markdown(), "run `make docs`"


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
