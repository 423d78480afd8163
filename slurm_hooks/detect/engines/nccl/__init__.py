"""Intra-node NCCL all-reduce bandwidth: engines, the nccl-tests parser and
the judge.  torch is imported only inside the torch engine."""
