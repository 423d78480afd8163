"""Burn-in, NCCL and DCGM engines: run, parse, judge."""
