"""The package's layers, read from its source: what each layer may import, where PySpark may
be used, what the sans-IO protocol layer may not touch, and no circle of imports.

The layers, lowest first: ``errors`` (the one exception tree), the shared base modules
(message ids, topic names), ``common`` (what both connectors use, importing neither), then
Pulsar's ``protocol`` (bytes in, values out), ``client`` (connections and I/O) and ``arrow``
(Arrow conversion) on top of it, then ``source`` (the source's and sink's own logic: options,
positions, offsets, planning, counting, failover; no PySpark), then ``spark`` (the data
sources, readers and writers Spark calls); ``jobs`` and ``local`` are programs beside them.
TubeMQ's package has the same layers of its own (``tubemq.wire`` sans-IO like ``protocol``,
then ``tubemq.client``, ``tubemq.arrow``, ``tubemq.spark``) over ``errors`` and ``common``
only; no Pulsar module imports it, and it imports none. Imports inside ``if TYPE_CHECKING:``
are for type checkers only and are not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pulsar_spark"
BASE = {"message_id", "topic", "_version"}
TUBEMQ_LAYERS = ("wire", "client", "arrow", "spark")
PULSAR = {"errors", "base", "common"}  # what every Pulsar layer may import besides its own
TUBEMQ = {"errors", "common", "tubemq"}  # the same for TubeMQ's (tubemq: its errors)
MAY_IMPORT = {
    "errors": {"errors"},
    "base": {"errors", "base"},
    "common": {"errors", "common"},
    "protocol": PULSAR | {"protocol"},
    "client": PULSAR | {"protocol", "client"},
    "arrow": PULSAR | {"protocol", "arrow"},
    "source": PULSAR | {"protocol", "client", "arrow", "source"},
    "spark": PULSAR | {"protocol", "client", "arrow", "source", "spark"},
    "tubemq": {"errors", "tubemq"},
    "tubemq.wire": TUBEMQ | {"tubemq.wire"},
    "tubemq.client": TUBEMQ | {"tubemq.wire", "tubemq.client"},
    "tubemq.arrow": TUBEMQ | {"tubemq.wire", "tubemq.arrow"},
    "tubemq.spark": TUBEMQ | {"tubemq.wire", "tubemq.client", "tubemq.arrow", "tubemq.spark"},
    # the package itself: registration of the data sources, and the lag of a query
    "root": {"errors", "base", "source", "spark", "tubemq.spark"},
    "jobs": {"errors", "base", "root", "local", "spark"},
    "local": {"errors", "base", "local"},
}
PYSPARK_LAYERS = {"spark", "tubemq.spark", "jobs", "root"}
SANS_IO_LAYERS = {"protocol", "tubemq.wire"}
# What would give the protocol layer I/O, threads, a clock or randomness of its own: those are
# handed in by the layers above.
NOT_IN_PROTOCOL = {
    "asyncio",
    "concurrent",
    "os",
    "random",
    "secrets",
    "select",
    "selectors",
    "socket",
    "ssl",
    "subprocess",
    "threading",
    "time",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] == "tubemq" and len(parts) > 2 and parts[2] in TUBEMQ_LAYERS:
        return f"tubemq.{parts[2]}"
    return "base" if parts[1] in BASE else parts[1]


def sources() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_generated" not in path.parts:
            yield path


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    yield from _imports(ast.parse(path.read_text(encoding="utf-8")).body)


def _imports(body: list[ast.stmt]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        yield from _imports(_statements_within(node))


def _statements_within(node: ast.AST) -> list[ast.stmt]:
    """The statements directly inside ``node``, also those of its except handlers and match
    cases."""
    found: list[ast.stmt] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            found.append(child)
        else:
            found.extend(_statements_within(child))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


MODULES = {module_name(path): sorted(set(imports(path))) for path in sources()}


def own_imports(module: str) -> list[str]:
    """The package's modules that ``module`` imports (names of classes and functions
    imported from a module count as that module)."""
    return sorted({t for t in MODULES[module] if t in MODULES and t != module})


def may_import(module: str, target: str) -> bool:
    return layer(target) in MAY_IMPORT[layer(module)]


def test_the_layers_are_all_known() -> None:
    assert {layer(m) for m in MODULES} == set(MAY_IMPORT)


def test_no_module_imports_from_a_layer_above_it() -> None:
    wrong = {
        module: [t for t in own_imports(module) if not may_import(module, t)] for module in MODULES
    }
    assert {module: targets for module, targets in wrong.items() if targets} == {}


def test_pyspark_is_used_in_the_spark_layer_only() -> None:
    uses = {
        module: [t for t in targets if t.split(".")[0] == "pyspark"]
        for module, targets in MODULES.items()
        if layer(module) not in PYSPARK_LAYERS
    }
    assert {module: found for module, found in uses.items() if found} == {}
    assert sum(layer(m) == "source" for m in uses) > 15  # every source module was read


def test_the_protocol_layer_has_no_io_threads_clock_or_randomness() -> None:
    uses = {
        module: [t for t in targets if t.split(".")[0] in NOT_IN_PROTOCOL]
        for module, targets in MODULES.items()
        if layer(module) in SANS_IO_LAYERS
    }
    assert {module: found for module, found in uses.items() if found} == {}
    assert {layer(module) for module in uses} == SANS_IO_LAYERS
    assert len(uses) > 25  # every protocol and TubeMQ wire module was read


def test_no_circle_of_imports() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in own_imports(module):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module)
    assert circles == []


def test_the_rules_catch_what_they_are_for() -> None:
    """The checks read real imports: a protocol module that imported time, or a client
    module that imported the spark layer, would be caught."""
    tree = ast.parse("import time\nfrom pulsar_spark.source.offsets import Offsets\n")
    found = list(_imports(tree.body))
    assert found == ["time", "pulsar_spark.source.offsets", "pulsar_spark.source.offsets.Offsets"]
    assert layer("pulsar_spark.source.offsets") not in MAY_IMPORT["client"]
    assert layer("pulsar_spark.spark.writer") not in MAY_IMPORT["source"]
    assert not may_import("pulsar_spark.client.reader", "pulsar_spark.tubemq.client.cluster")
    assert not may_import("pulsar_spark.source.counting", "pulsar_spark.tubemq.spark.limits")
    assert not may_import("pulsar_spark.common.data_loss", "pulsar_spark.message_id")
    assert not may_import("pulsar_spark.common.retry", "pulsar_spark.client.connection")
    assert not may_import("pulsar_spark.tubemq.wire.rpc", "pulsar_spark.protocol.encode")
    assert not may_import("pulsar_spark.tubemq.wire.rpc", "pulsar_spark.tubemq.client.cluster")
    assert not may_import("pulsar_spark.tubemq.client.consumer", "pulsar_spark.client.reader")
    assert not may_import("pulsar_spark.tubemq.spark.options", "pulsar_spark.source.positions")
    assert may_import("pulsar_spark.tubemq.wire.rpc", "pulsar_spark.common.varints")
    typing_only = ast.parse("if TYPE_CHECKING:\n    import threading\nelse:\n    import os\n")
    assert list(_imports(typing_only.body)) == ["os"]
