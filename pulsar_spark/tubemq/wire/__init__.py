"""Apache InLong TubeMQ's wire protocol, sans-IO: frames, RPC envelopes and messages.

Like the Pulsar side (``pulsar_spark.protocol``), nothing here opens a socket, starts a
thread or imports Spark or Arrow: ``framing`` turns bytes into frames and back, ``rpc``
wraps each call in its envelope and reads the reply, ``messages`` turns the payloads of a
GetMessage reply into values and attributes and builds the payload of a SendMessage, and
``metadata`` parses the broker and topic strings the master sends.

Offsets, as a 2.4.0 broker showed them
--------------------------------------
A topic's partitions on a broker share the store they live in (one store unless the topic is
configured with more), and an offset is a byte position in that store's index, 28 bytes per
message, whatever its partition: three partitions written in turn get offsets 0, 28, 56, 84...
``SendMessageResponseB2P.appendOffset`` is the offset of the message just written.

A consumer registers with the broker per partition (``RegisterRequestC2B``; the broker does not
ask the master). ``currOffset`` in the request, when set, moves the group's offset there;
otherwise ``readStatus`` 0 starts a new group at the oldest offset and 1 at the end. Each
GetMessage returns the messages of that partition found from the group's offset on
(``currOffset`` in the reply is where the read started) and advances past what it scanned,
messages of other partitions included; ``lastPackConsumed`` commits the previous read, and
CommitOffset returns the committed offset. A read may return no message with errCode 200 and
still advance; errCode 404 ("The request offset reached maxOffset!") marks the end. A message
in a reply carries its message id but not its own offset.
"""
