"""Sans-IO core of Pulsar's binary protocol: bytes in, values out, and back.

Nothing in this package opens sockets, starts threads, or imports Spark or Arrow; the client
layer drives it over real connections and tests drive it with byte fixtures.
"""
