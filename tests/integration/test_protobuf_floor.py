"""The package on the oldest protobuf runtime pyproject.toml accepts.

A new virtual environment gets that protobuf release from PyPI and the wheel of this checkout,
both before anything else can be seen from it; then a ``.pth`` file lets it import the test
environment's other packages (crc32c, ...) after its own, so its protobuf is the old one. There
the generated modules load (their version check passes) and frames go through them both ways:
a Pulsar SEND with its checksummed payload section, and a TubeMQ request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.packaging import (
    build_wheel,
    clean_env,
    new_venv,
    pip_install,
    run,
    see_test_environment,
)
from support.protobuf_floor import protobuf_floor

pytestmark = pytest.mark.integration

ROUND_TRIP = """
import json

import google.protobuf
from google.protobuf.internal import api_implementation

from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol._generated import pulsar_api_pb2
from pulsar_spark.protocol.framing import FrameDecoder
from pulsar_spark.protocol.payload import encode_payload_section, parse_payload_section
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2, tubemq_master_pb2
from pulsar_spark.tubemq.wire.framing import FrameDecoder as TubeFrameDecoder

metadata = pb.MessageMetadata(
    producer_name="floor", sequence_id=7, publish_time=1767225600000, partition_key="k"
)
metadata.properties.add(key="source", value="floor-test")
section = encode_payload_section(metadata, b"value-7")
frame = commands.send(producer_id=3, sequence_id=7, num_messages=1, highest_sequence_id=7,
                      is_chunk=False, section=section)
[decoded] = FrameDecoder().feed(frame)
section = parse_payload_section(decoded.payload)

request = tubemq_broker_pb2.SendMessageRequestP2B(
    clientId="c", topicName="t", partitionId=2, data=b"v", flag=0, checkSum=-1, sentAddr=1
)
[tube_frame] = TubeFrameDecoder().feed(rpc.encode_request(9, request))
tube = rpc.decode_request(tube_frame)

print(json.dumps({
    "protobuf": google.protobuf.__version__,
    "protobuf_file": google.protobuf.__file__,
    "implementation": api_implementation.Type(),
    "generated": [pulsar_api_pb2.__file__, tubemq_master_pb2.__file__],
    "send": [decoded.command.send.producer_id, decoded.command.send.sequence_id],
    "metadata": [
        section.metadata.producer_name,
        section.metadata.partition_key,
        [(p.key, p.value) for p in section.metadata.properties],
    ],
    "payload": bytes(section.payload).decode(),
    "tubemq": [tube.serial_no, tube.message.topicName, tube.message.partitionId],
}))
"""


def test_generated_modules_round_trip_frames_on_the_oldest_protobuf(tmp_path: Path) -> None:
    floor = protobuf_floor()
    wheel = build_wheel(tmp_path)
    python, site_packages = new_venv(tmp_path / "venv")
    pip_install(python, "--no-deps", f"protobuf=={floor}", str(wheel))
    see_test_environment(site_packages)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    result = run([str(python), "-c", ROUND_TRIP], cwd=outside, env=clean_env(python), timeout=120)
    found = json.loads(result.stdout)
    assert found["protobuf"] == floor
    assert Path(found["protobuf_file"]).resolve().is_relative_to(site_packages)
    for module in found["generated"]:
        assert Path(module).resolve().is_relative_to(site_packages), module
    assert found["send"] == [3, 7]
    assert found["metadata"] == ["floor", "k", [["source", "floor-test"]]]
    assert found["payload"] == "value-7"
    assert found["tubemq"] == [9, "t", 2]
