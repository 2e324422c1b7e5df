"""Arrow conversion: decoded message columns to record batches, and record batches to messages."""
