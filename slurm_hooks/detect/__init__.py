"""Detection: probes (the only code that reads the machine), XIDs, checks, engines, the runner."""
