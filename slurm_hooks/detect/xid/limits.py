"""Limits and paths of the kernel-log XID source: a leaf (it imports nothing
of ours), so the settings, the scanner, the parser and the source share them
without importing one another."""

#: Lines longer than this are skipped and counted (the kernel's own limit is
#: ~1 KiB per record; journal JSON carries more fields but nowhere near this).
MAX_LINE = 64 * 1024

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
KMSG_PATH = "/dev/kmsg"

#: What the first run (no cursor yet) reads: everything there is, or
#: nothing (start at the end, report only what comes later).
FIRST_RUN = ("all", "end")
