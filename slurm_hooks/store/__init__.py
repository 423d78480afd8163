"""Node-local durable state: atomic files, the state store (cursors, incidents), the audit log."""
