"""Pure policy: findings, node states and history in, decisions out.  No I/O."""
