"""Notification sinks: failures are logged, never raised into remediation."""
