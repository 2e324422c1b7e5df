"""The failover.* read options: parsed into the list of clusters at definition, every refusal
naming the option; and the watch that decides when the active cluster is left."""

from __future__ import annotations

import socket

import pytest

from pulsar_spark.client.failover import ActiveCluster, Clusters, ClusterWatch
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.common.address import cluster_name
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.source.read_options import ReadMode, ReadOptions, check_read_options
from pulsar_spark.source.value_schemas import answering_cluster
from pulsar_spark.source.write_options import WriteOptions

C1 = "pulsar://c1.example:6650"
C2 = "pulsar://c2.example:6650"
C3 = "pulsar://c3.example"
REPLICATED = {"subscriptionName": "geo-etl", "replicateSubscriptionState": "true"}


def parse(mode: ReadMode = ReadMode.STREAM, **options: str) -> ReadOptions:
    return ReadOptions.parse({"service.url": C1, "topic": "t", **options}, mode=mode)


def parse_error(mode: ReadMode = ReadMode.STREAM, **options: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        parse(mode, **options)
    return str(info.value)


def test_no_failover_by_default() -> None:
    assert parse(**REPLICATED).failover is None


def test_secondary_clusters_in_order_with_the_primary_settings() -> None:
    options = parse(
        **REPLICATED,
        **{
            "failover.secondaryServiceUrls": f" {C2} ; {C3} ",
            "failover.failoverDelayMs": "5000",
            "failover.checkIntervalMs": "250",
            "pulsar.client.operationTimeoutMs": "7000",
        },
    )
    clusters = options.failover
    assert clusters is not None
    assert clusters.names == (C1, C2, "pulsar://c3.example:6650")
    assert [s.service_url for s in clusters.settings] == [C1, C2, C3]
    assert {s.operation_timeout for s in clusters.settings} == {7.0}
    assert {s.connection for s in clusters.settings} == {options.client.connection}
    assert (clusters.failover_delay, clusters.check_interval) == (5.0, 0.25)


def test_failover_defaults() -> None:
    clusters = parse(**REPLICATED, **{"failover.secondaryServiceUrls": C2}).failover
    assert clusters is not None
    assert (clusters.failover_delay, clusters.check_interval) == (30.0, 1.0)
    assert clusters.switch_back_delay is None


def test_switch_back_delay() -> None:
    clusters = parse(
        **REPLICATED,
        **{"failover.secondaryServiceUrls": C2, "failover.switchBackDelayMs": "60000"},
    ).failover
    assert clusters is not None
    assert clusters.switch_back_delay == 60.0


def test_secondaries_need_a_replicated_subscription() -> None:
    wanted = (
        "option 'failover.secondaryServiceUrls' needs options 'subscriptionName' and "
        "'replicateSubscriptionState'='true': the stream starts on the next cluster from that "
        "subscription's replicated position"
    )
    assert parse_error(**{"failover.secondaryServiceUrls": C2}) == wanted
    assert (
        parse_error(subscriptionName="geo-etl", **{"failover.secondaryServiceUrls": C2}) == wanted
    )


def test_secondaries_are_for_streams_only() -> None:
    message = parse_error(ReadMode.BATCH, **{"failover.secondaryServiceUrls": C2})
    assert message == (
        "option 'failover.secondaryServiceUrls' applies to streaming reads only: a batch read "
        "has no position to carry to another cluster"
    )


@pytest.mark.parametrize(
    "name", ["failover.failoverDelayMs", "failover.checkIntervalMs", "failover.switchBackDelayMs"]
)
def test_timing_options_need_the_secondaries(name: str) -> None:
    assert parse_error(**REPLICATED, **{name: "1000"}) == (
        f"option {name!r} needs option 'failover.secondaryServiceUrls': the service URLs of the "
        "clusters to switch to, in order"
    )


def test_check_interval_within_the_delay() -> None:
    message = parse_error(
        **REPLICATED,
        **{
            "failover.secondaryServiceUrls": C2,
            "failover.failoverDelayMs": "1000",
            "failover.checkIntervalMs": "1001",
        },
    )
    assert message == (
        "option 'failover.checkIntervalMs' (1001) must not exceed option "
        "'failover.failoverDelayMs' (1000): a cluster is probed at least once before it is left"
    )


@pytest.mark.parametrize(
    "name", ["failover.failoverDelayMs", "failover.checkIntervalMs", "failover.switchBackDelayMs"]
)
def test_timing_options_are_positive(name: str) -> None:
    message = parse_error(**REPLICATED, **{"failover.secondaryServiceUrls": C2, name: "0"})
    assert message == f"option {name!r} must be a positive integer, got 0"


@pytest.mark.parametrize("listed", [C1, "pulsar://c1.example", f"{C2};{C2}"])
def test_a_cluster_listed_twice(listed: str) -> None:
    message = parse_error(**REPLICATED, **{"failover.secondaryServiceUrls": listed})
    assert message.startswith("option 'failover.secondaryServiceUrls': cluster pulsar://c")
    assert message.endswith("is listed twice (or is 'service.url'); separate the clusters with ';'")


def test_a_secondary_that_is_no_service_url() -> None:
    message = parse_error(**REPLICATED, **{"failover.secondaryServiceUrls": "http://c2:8080"})
    assert message == (
        "option 'failover.secondaryServiceUrls': service.url 'http://c2:8080' must look like "
        "pulsar://host:6650 or pulsar+ssl://host:6651"
    )


def test_every_cluster_uses_tls_or_none_does() -> None:
    message = parse_error(
        **REPLICATED, **{"failover.secondaryServiceUrls": "pulsar+ssl://c2.example:6651"}
    )
    assert message == (
        "option 'failover.secondaryServiceUrls': pulsar+ssl://c2.example:6651 and "
        "'service.url' must both use pulsar+ssl:// or both pulsar://: every cluster is reached "
        "with the same TLS settings"
    )


def test_schema_time_check_accepts_failover() -> None:
    options = {"service.url": C1, "topic": "t", **REPLICATED, "failover.secondaryServiceUrls": C2}
    assert check_read_options(options).failover is not None


def test_cluster_names_drop_the_path_and_fill_in_ports() -> None:
    assert cluster_name("pulsar://c2.example/") == "pulsar://c2.example:6650"
    assert cluster_name("pulsar+ssl://a,b:7000") == "pulsar+ssl://a:6651,b:7000"


def test_a_secondary_with_user_info_is_refused_without_showing_it() -> None:
    error = parse_error(
        **REPLICATED, **{"failover.secondaryServiceUrls": "pulsar://user:secret@c2.example"}
    )
    assert error.startswith("option 'failover.secondaryServiceUrls': ")
    assert "pulsar://***@c2.example" in error
    assert "secret" not in error
    assert "user" not in error.replace("user information", "")


# --- the watch ----------------------------------------------------------------------------------


def clusters(delay: float = 3.0, interval: float = 1.0, back: float | None = None) -> Clusters:
    return Clusters((ClientSettings(C1), ClientSettings(C2)), delay, interval, back)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def watch(
    answers: list[bool], time: FakeTime, probed: list[str], back: float | None = None
) -> ClusterWatch:
    def probe(settings: ClientSettings, timeout: float) -> bool:
        probed.append(settings.service_url)
        assert timeout == 1.0
        return answers.pop(0)

    return ClusterWatch(clusters(back=back), probe=probe, clock=time.clock, sleep=time.sleep)


def test_a_reachable_cluster_stays_active() -> None:
    time, probed = FakeTime(), []
    assert watch([True], time, probed).choose(C1) == C1
    assert (probed, time.sleeps) == ([C1], [])


def test_a_cluster_back_within_the_delay_stays_active() -> None:
    time, probed = FakeTime(), []
    assert watch([False, False, False, True], time, probed).choose(C1) == C1
    assert (probed, time.sleeps) == ([C1] * 4, [1.0, 1.0, 1.0])


def test_a_cluster_unreachable_for_the_delay_is_left_for_the_next() -> None:
    time, probed = FakeTime(), []
    assert watch([False] * 4, time, probed).choose(C1) == C2
    assert (probed, time.sleeps) == ([C1] * 4, [1.0, 1.0, 1.0])


def test_the_last_cluster_is_never_left() -> None:
    time, probed = FakeTime(), []
    assert watch([], time, probed).choose(C2) == C2
    assert probed == []


def test_no_switch_back_without_its_delay() -> None:
    time, probed = FakeTime(), []
    assert not watch([], time, probed).back_to_primary(C2)
    assert probed == []


def test_the_primary_is_read_again_once_it_has_answered_for_the_delay() -> None:
    time, probed = FakeTime(), []
    watching = watch([True, True, False, True, True, True], time, probed, back=10.0)
    answers = []
    for step in (0.0, 6.0, 6.0, 1.0, 9.0, 1.0):  # the primary drops out once in between
        time.now += step
        answers.append(watching.back_to_primary(C2))
    assert answers == [False, False, False, False, False, True]
    assert (probed, time.sleeps) == ([C1] * 6, [])


def test_the_primary_is_not_switched_back_to_from_itself() -> None:
    time, probed = FakeTime(), []
    assert not watch([], time, probed, back=1.0).back_to_primary(C1)
    assert probed == []


def test_an_unknown_recorded_cluster_is_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        clusters().settings_of("pulsar://elsewhere:6650")
    assert str(info.value) == (
        "the checkpointed offsets belong to cluster pulsar://elsewhere:6650, which is neither "
        f"the service.url nor one of the secondary service URLs ({C1}, {C2})"
    )


# --- where schemas are fetched -------------------------------------------------------------------


def test_schemas_are_asked_of_the_first_cluster_that_answers() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as up,
        socket.create_server(("127.0.0.1", 0)) as gone,
    ):
        up_url = f"pulsar://127.0.0.1:{up.getsockname()[1]}"
        gone_url = f"pulsar://127.0.0.1:{gone.getsockname()[1]}"
        gone.close()
        failing_over = {**REPLICATED, "failover.checkIntervalMs": "200"}
        options = ReadOptions.parse(
            {"service.url": gone_url, "topic": "t", "failover.secondaryServiceUrls": up_url}
            | failing_over,
            mode=ReadMode.STREAM,
        )
        assert answering_cluster(options).service_url == up_url
        options = ReadOptions.parse(
            {"service.url": up_url, "topic": "t", "failover.secondaryServiceUrls": gone_url}
            | failing_over,
            mode=ReadMode.STREAM,
        )
        assert answering_cluster(options).service_url == up_url
    assert answering_cluster(parse(ReadMode.BATCH)).service_url == C1


# --- writes ---------------------------------------------------------------------------------------


def parse_write(**options: str) -> WriteOptions:
    return WriteOptions.parse({"service.url": C1, "topic": "t", **options})


def test_writes_take_the_clusters_without_a_subscription() -> None:
    clusters = parse_write(
        **{"failover.secondaryServiceUrls": C2, "failover.switchBackDelayMs": "5000"}
    ).failover
    assert clusters is not None
    assert (clusters.names, clusters.switch_back_delay) == ((C1, C2), 5.0)
    assert parse_write().failover is None


def test_a_transactional_write_does_not_fail_over() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_write(transactional="true", **{"failover.secondaryServiceUrls": C2})
    assert str(info.value) == (
        "option 'failover.secondaryServiceUrls' cannot be combined with a transactional write: "
        "a transaction belongs to one cluster's coordinator"
    )


def test_retries_stop_at_the_failover_delay() -> None:
    assert clusters(delay=3.0).retry_limit(30.0) == 3.0
    assert clusters(delay=3.0).retry_limit(2.0) == 2.0


def active(answers: list[bool], time: FakeTime, probed: list[str]) -> ActiveCluster:
    def lookup_of(settings: ClientSettings) -> Lookup:
        return Lookup(settings, ConnectionPool())

    return ActiveCluster(clusters(back=10.0), lookup_of, watch(answers, time, probed, back=10.0))


def test_writers_stay_on_a_cluster_that_answers() -> None:
    time, probed = FakeTime(), []
    writing = active([True], time, probed)
    first = writing.lookup
    assert not writing.leave(first)
    assert (writing.name, writing.lookup, probed) == (C1, first, [C1])


def test_writers_move_on_together() -> None:
    time, probed = FakeTime(), []
    writing = active([False] * 4, time, probed)
    first = writing.lookup
    assert writing.leave(first)
    assert (writing.name, writing.lookup.service_url) == (C2, C2)
    assert writing.leave(first)  # another producer on the cluster left: no probe, no wait
    assert (probed, time.sleeps) == ([C1] * 4, [1.0, 1.0, 1.0])


def test_writers_go_back_to_the_primary_when_due() -> None:
    time, probed = FakeTime(), []
    writing = active([False] * 4 + [True, True], time, probed)
    writing.leave(writing.lookup)
    writing.refresh()
    assert writing.name == C2
    time.now += 10.0
    writing.refresh()
    assert (writing.name, writing.lookup.service_url) == (C1, C1)
