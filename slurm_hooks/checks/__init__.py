"""Health checks: one module per check; gather touches probes, judge is pure."""
