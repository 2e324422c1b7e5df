"""Each committed generated module must declare exactly what its file under proto/ declares."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2

from pulsar_spark.protocol._generated import pulsar_api_pb2
from pulsar_spark.tubemq.wire._generated import (
    tubemq_broker_pb2,
    tubemq_master_pb2,
    tubemq_rpc_pb2,
)

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"

# (the .proto file, its committed module, the directory holding the module's .pyi stub)
GENERATED = [
    ("pulsar_api.proto", pulsar_api_pb2, "pulsar_spark/protocol/_generated"),
    ("tubemq_rpc.proto", tubemq_rpc_pb2, "pulsar_spark/tubemq/wire/_generated"),
    ("tubemq_master.proto", tubemq_master_pb2, "pulsar_spark/tubemq/wire/_generated"),
    ("tubemq_broker.proto", tubemq_broker_pb2, "pulsar_spark/tubemq/wire/_generated"),
]
IDS = [proto for proto, _, _ in GENERATED]


def _compiled_descriptor(proto: Path, tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    out = tmp_path / "descriptor.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto.parent}",
            f"--descriptor_set_out={out}",
            str(proto),
        ],
        check=True,
    )
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert len(files.file) == 1
    return files.file[0]


def _without_json_names(
    messages: Iterable[descriptor_pb2.DescriptorProto],
) -> None:
    # protoc fills json_name in descriptor sets; the runtime's copy leaves it out.
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _without_json_names(message.nested_type)


@pytest.mark.parametrize(("proto", "module", "_stub_dir"), GENERATED, ids=IDS)
def test_generated_module_matches_proto(
    proto: str, module: ModuleType, _stub_dir: str, tmp_path: Path
) -> None:
    compiled = _compiled_descriptor(PROTO_DIR / proto, tmp_path)
    committed = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(committed)
    _without_json_names(compiled.message_type)
    _without_json_names(committed.message_type)
    assert committed == compiled, (
        f"{module.__name__} is out of date with proto/{proto}: run `make proto`"
    )


@pytest.mark.parametrize(("proto", "module", "stub_dir"), GENERATED, ids=IDS)
def test_stub_lists_every_message(proto: str, module: ModuleType, stub_dir: str) -> None:
    stub = (ROOT / stub_dir / f"{Path(proto).stem}_pb2.pyi").read_text()
    for name in module.DESCRIPTOR.message_types_by_name:
        assert f"class {name}(" in stub, f"{name} missing from the .pyi stub: run `make proto`"
