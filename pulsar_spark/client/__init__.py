"""Blocking I/O on top of the sans-IO protocol: connections, lookup, reader and producer.

Everything here is usable from a plain thread, such as a Spark task: calls block with a
timeout, never forever, and the broker's keep-alive pings are answered by each connection's
own reader thread even while the caller is busy elsewhere.
"""
