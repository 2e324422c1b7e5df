"""The Spark side: the ``pulsar`` Python data source, its options, offsets, readers and writers."""
