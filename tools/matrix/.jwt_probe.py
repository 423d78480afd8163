import sys, tempfile, os
from slurm_hooks_lab.lab import Lab, rest_auth
from slurm_hooks.slurm.rest_backend import RestClient
d = tempfile.mkdtemp(prefix="jwtprobe-", dir="/tmp"); os.chmod(d, 0o755)
lab = Lab(d, nodes=2)
lab.up()
try:
    print("rest_auth", lab._read_state().get("rest_auth"), open(lab.slurm_conf).read().count("jwt"))
    c = lab.rest_client(timeout=10, retries=0)
    print("api", c.api, [n.name for n in c.list_nodes()])
    for tok in (None, c.session.headers.get("X-SLURM-USER-TOKEN", "x")[:-4] + "AAAA"):
        try:
            RestClient(socket=lab.start_rest(), user="root", token=tok, api=c.api, retries=0).list_nodes()
            print("NOT refused", tok is None)
        except Exception as e:
            print("refused", type(e).__name__, str(e)[:200])
    print(lab.client().show_config().get("SchedulerParameters"))
finally:
    print(open(lab.log_dir / "slurmrestd.out").read()[-1500:])
    lab.down()
