"""Core types every stage shares: model, errors, config, the reason grammar, hostlists."""
