"""Thin process entry points: the hook, prolog, watcher, grace worker, acceptance, preflight."""
