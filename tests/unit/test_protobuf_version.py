"""Each generated module asks for exactly the protobuf runtime pyproject.toml's bound names.

A module written by a newer protoc refuses to load on the older runtimes the bound accepts,
so this fails until ``make proto`` (whose grpcio-tools is pinned) writes it again.
``tests/integration/test_protobuf_floor.py`` loads the modules on that runtime.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.protobuf_floor import ROOT, protobuf_floor

GENERATED = sorted(
    path
    for folder in ("pulsar_spark/protocol/_generated", "pulsar_spark/tubemq/wire/_generated")
    for path in (ROOT / folder).glob("*_pb2.py")
)
CHECK = re.compile(
    r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
    r"\s*(\d+),\s*(\d+),\s*(\d+),"
)


def test_every_generated_module_is_checked() -> None:
    assert [p.name for p in GENERATED] == [
        "pulsar_api_pb2.py",
        "tubemq_broker_pb2.py",
        "tubemq_master_pb2.py",
        "tubemq_rpc_pb2.py",
    ]


@pytest.mark.parametrize("module", GENERATED, ids=lambda p: p.name)
def test_generated_module_asks_for_the_floor(module: Path) -> None:
    found = CHECK.search(module.read_text(encoding="utf-8"))
    assert found is not None, f"{module.name} has no runtime version check"
    assert ".".join(found.groups()) == protobuf_floor(), (
        f"{module.name} was generated for protobuf {'.'.join(found.groups())}, not for the "
        f"oldest runtime pyproject.toml accepts ({protobuf_floor()}): run `make proto`"
    )
