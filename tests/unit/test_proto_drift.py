"""The committed generated module must declare exactly what proto/pulsar_api.proto declares."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2

from pulsar_spark.protocol._generated import pulsar_api_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "pulsar_api.proto"


def _compiled_descriptor(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    out = tmp_path / "descriptor.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO.parent}",
            f"--descriptor_set_out={out}",
            str(PROTO),
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


def test_generated_module_matches_proto(tmp_path: Path) -> None:
    compiled = _compiled_descriptor(tmp_path)
    committed = descriptor_pb2.FileDescriptorProto()
    pulsar_api_pb2.DESCRIPTOR.CopyToProto(committed)
    _without_json_names(compiled.message_type)
    _without_json_names(committed.message_type)
    assert committed == compiled, (
        "pulsar_spark/protocol/_generated is out of date with proto/pulsar_api.proto: "
        "run `make proto`"
    )


def test_stub_lists_every_message() -> None:
    stub = (ROOT / "pulsar_spark/protocol/_generated/pulsar_api_pb2.pyi").read_text()
    for name in pulsar_api_pb2.DESCRIPTOR.message_types_by_name:
        assert f"class {name}(" in stub, f"{name} missing from the .pyi stub: run `make proto`"
