"""Issue 15 item 3: the stale-reason case on this release's real Slurm, decided
by the code before the fix (6aa9a8e, PYTHONPATH=/tmp/old6aa) and after it."""
import os, subprocess, sys, tempfile
from slurm_hooks_lab.lab import Lab

d = tempfile.mkdtemp(prefix="stale-", dir="/tmp"); os.chmod(d, 0o755)
lab = Lab(d, nodes=2)
lab.up()
try:
    env = {**os.environ, **lab.env()}
    sc = lambda *a: subprocess.run(["scontrol", *a], env=env, check=True, capture_output=True, text=True).stdout
    sc("update", "NodeName=n2", "State=DRAIN", "Reason=admin: memory test #12")
    sc("update", "NodeName=n2", "State=RESUME")
    lab.wait_idle(["n2"])
    raw = sc("-o", "show", "node", "n2")
    print("slurm", lab.status().slurm_version, "::", " ".join(w for w in raw.split() if w.startswith(("State=", "Reason="))))
finally:
    lab.down()
prog = r'''
import sys
from datetime import datetime, timezone
try:
    from slurm_hooks.model import Action, Component, Finding, Status
    from slurm_hooks.policy import PolicyConfig, decide
    which = "before the fix (6aa9a8e)"
except ImportError:
    from slurm_hooks.core.model import Action, Component, Finding, Status
    from slurm_hooks.decide import PolicyConfig, decide
    which = "after the fix (HEAD)"
from slurm_hooks.slurm import parse
(node,) = parse.parse_scontrol_nodes(sys.stdin.read())
f = Finding("xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", index=0), Action.RESET_GPU)
(dec,) = decide([f], node, None, None, PolicyConfig(), datetime.now(timezone.utc))
print(f"{which}: {dec.kind} :: {dec.explanation}")
'''
for pp in ("/tmp/old6aa", ""):
    e = {**os.environ, "PYTHONPATH": pp} if pp else dict(os.environ)
    r = subprocess.run([sys.executable, "-c", prog], input=raw, env=e, capture_output=True, text=True, cwd="/tmp" if pp else None)
    print(r.stdout.strip() or r.stderr[-800:])
