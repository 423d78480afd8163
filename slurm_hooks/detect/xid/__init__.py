"""XID events from the kernel log: parser, cursor, catalogue, multi-event rules."""
