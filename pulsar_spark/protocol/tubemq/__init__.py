"""Apache InLong TubeMQ's wire protocol, sans-IO: frames, RPC envelopes and messages.

Like the Pulsar side (``pulsar_spark.protocol``), nothing here opens a socket, starts a
thread or imports Spark or Arrow: ``framing`` turns bytes into frames and back, ``rpc``
wraps each call in its envelope and reads the reply, ``messages`` turns the payloads of a
GetMessage reply into values and attributes and builds the payload of a SendMessage.
"""
