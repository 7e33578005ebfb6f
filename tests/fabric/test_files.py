"""Fabric files: good TOML/JSON/YAML files give the spec they say; every bad value, unknown key
and key the kind does not read is a one-line InputError naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.errors import InputError
from tracekit.fabric import PRESETS, FabricSpec, load_fabric
from tracekit.fabric.files import KEYS

RAIL_TOML = """kind = "rail"
hosts_per_group = 16
spines = 16
nic_gbps = 400
leaf_spine_gbps = 400
oversubscription = 1.0
link_latency_us = 1.0
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_spec_example_file(tmp_path: Path) -> None:
    spec = load_fabric(write(tmp_path, "rail.toml", RAIL_TOML))
    assert spec == FabricSpec(
        kind="rail",
        hosts_per_group=16,
        spines=16,
        nic_Bps=50e9,
        leaf_spine_Bps=50e9,
        oversubscription=1.0,
        link_latency_s=1e-6,
    )


def test_json_and_yaml_say_the_same(tmp_path: Path) -> None:
    data = {
        "kind": "clos3",
        "racks_per_pod": 4,
        "spines": 8,
        "cores": 2,
        "core_oversubscription": 3,
        "routing": "spray",
    }
    from_json = load_fabric(write(tmp_path, "f.json", json.dumps(data)))
    yaml_text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in data.items())
    from_yaml = load_fabric(write(tmp_path, "f.yaml", yaml_text))
    assert from_json == from_yaml
    assert from_json.core_oversubscription == 3.0 and from_json.routing == "spray"


def test_a_preset_with_overrides(tmp_path: Path) -> None:
    spec = load_fabric(
        write(tmp_path, "p.toml", 'preset = "meta-ai-zone"\noversubscription = 2.0\nname = "meta 2:1"\n')
    )
    assert spec == PRESETS["meta-ai-zone"].with_changes(oversubscription=2.0, name="meta 2:1")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('kind = "rail"\nspine = 4', "unknown key 'spine'"),
        ('kind = "ideal"\nspines = 4', "spines: kind 'ideal' has no such parameter"),
        ('kind = "clos2"\nhosts_per_group = 4', "hosts_per_group: kind 'clos2'"),
        ('kind = "torus"', "kind: must be one of"),
        ("spines = 4", "kind: must be one of"),
        ('preset = "meta"', "preset: must be one of"),
        ('preset = "ideal"\nkind = "ideal"', "kind: give either kind or preset"),
        ('kind = "clos2"\nspines = 0', "spines: must be an integer in 1..4096"),
        ('kind = "clos2"\nspines = 1e9', "spines: must be an integer"),
        ('kind = "clos2"\nspines = 100000', "spines: must be an integer in 1..4096"),
        ('kind = "clos2"\nspines = true', "spines: must be an integer"),
        ('kind = "clos2"\nspines = "16"', "spines: must be an integer"),
        ('kind = "clos2"\nlinks_per_spine = 2.5', "links_per_spine: must be an integer"),
        ('kind = "rail"\nhosts_per_group = -1', "hosts_per_group: must be an integer"),
        ('kind = "clos2"\noversubscription = 0', "oversubscription: must be a number in (0, 1000]"),
        ('kind = "clos2"\noversubscription = -2.0', "oversubscription: must be a number"),
        ('kind = "clos2"\noversubscription = inf', "oversubscription: must be a number"),
        ('kind = "clos2"\noversubscription = nan', "oversubscription: must be a number"),
        ('kind = "ideal"\nnic_gbps = 0', "nic_gbps: must be a number in (0, 1e+06]"),
        ('kind = "ideal"\nnic_gbps = 1e12', "nic_gbps: must be a number"),
        ('kind = "ideal"\nlink_latency_us = -1', "link_latency_us: must be a number in [0, 1e+06]"),
        ('kind = "ideal"\nrouting = "random"', "routing: must be one of ecmp, pinned, spray"),
        ('kind = "ideal"\nname = 5', "name: must be a string"),
        ('kind = "clos3"\ncores = 0', "cores: must be an integer"),
        ('kind = "clos3"\nspine_core_gbps = "fast"', "spine_core_gbps: must be a number"),
        ('kind = "clos2"\nleaf_spine_gbps = 100\noversubscription = 1.0\nspines = 2', ""),
    ],
)
def test_bad_files_give_one_line_errors_naming_the_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, "bad.toml", text + "\n")
    if not key:  # consistent values load; a disagreement shows once the NIC rate is known
        assert load_fabric(path).leaf_spine_Bps == 12.5e9
        return
    with pytest.raises(InputError) as info:
        load_fabric(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and key in message
    assert "\n" not in message and len(message) < 500


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("f.toml", "kind = ", "not a valid fabric file"),
        ("f.json", "[1, 2]", "a fabric file is a table"),
        ("f.json", "{", "not a valid fabric file"),
        ("f.yaml", "kind: [", "not a valid fabric file"),
        ("f.toml", "\udcff", "not a valid fabric file"),
    ],
)
def test_unreadable_files(tmp_path: Path, name: str, text: str, why: str) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(InputError, match=why) as info:
        load_fabric(path)
    assert "\n" not in str(info.value)


def test_a_missing_or_huge_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the fabric file"):
        load_fabric(tmp_path / "absent.toml")
    huge = write(tmp_path, "huge.toml", "# " + "x" * (1 << 20) + "\nkind = 'ideal'\n")
    with pytest.raises(InputError, match="at most 1048576 bytes"):
        load_fabric(huge)


def test_a_hostile_key_is_shown_short_and_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "k.json", json.dumps({"kind": "ideal", "x\n" * 500: 1}))
    with pytest.raises(InputError) as info:
        load_fabric(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 500


def test_every_key_is_documented_in_the_package_docstring() -> None:
    import tracekit.fabric

    doc = tracekit.fabric.__doc__ or ""
    assert all(key in doc for key in KEYS)
