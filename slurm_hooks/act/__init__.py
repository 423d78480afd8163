"""Acting on decisions: the remediation engine, notifications, metrics."""
