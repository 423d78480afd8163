#!/usr/bin/env bash
# Install what slurm-hooks needs on a fresh Debian 12 or 13 machine, as root:
# Debian's Slurm and munge (for the lab), Python's venv, and a virtualenv at
# .venv with the package and its test extras.  Safe to run again: it only
# installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
# python3-numpy: the demo's training job runs as an unprivileged user with
# Debian's python3, which cannot read a virtualenv under a private /root.
# slurm-wlm-jwt-plugin: auth_jwt.so, for the lab's slurmrestd with JWT (24.11+).
# openmpi-bin, python3-mpi4py: the lab's MPI job (mpi_train.py), whose ranks
# block in a real MPI_Allreduce; libpmix-dev: libpmix.so, which Slurm's pmix
# plugin loads for `srun --mpi=pmix` (the runtime package has only libpmix.so.2).
# bindfs: a FUSE file system an unprivileged user mounts in the hostile-user
# tests (tests/test_progress_fuse.py).
for p in slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin util-linux procps \
  python3 python3-venv python3-numpy openmpi-bin python3-mpi4py libpmix-dev bindfs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: need root to install: ${need_pkgs[*]}" >&2; exit 2
  fi
  echo "bootstrap: apt-get install ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
# A non-root submitter for jobs in the lab and the tests.
id sltest >/dev/null 2>&1 || useradd -m -s /bin/bash sltest 2>/dev/null || true

# A virtualenv of this machine's Python (a root's .venv is its own: the
# checkout is copied into a root without the host's .venv).
if ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
  rm -rf .venv
  python3 -m venv .venv
fi
# Reinstall when what pip read changed (the packaging files' content, not
# their times: a fresh copy or clone has new times and the same content) or
# when either distribution is missing from the venv, whatever the stamp says.
stamp=.venv/.slurm-hooks-installed
want=$(cat setup.cfg setup.py pyproject.toml lab/setup.cfg 2>/dev/null | sha256sum | cut -d' ' -f1)
want="$want $(.venv/bin/python -c 'import sys; print(sys.version.split()[0])')"
installed() {
  # Both distributions, installed from this checkout (editable: the import
  # finds the package in the work tree, not a stale copy elsewhere).
  .venv/bin/python - "$PWD" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, os, sys
for dist in ("slurm-hooks", "slurm-hooks-lab"):
    md.version(dist)
import slurm_hooks, slurm_hooks_lab
top = os.path.realpath(sys.argv[1]) + os.sep
for mod in (slurm_hooks, slurm_hooks_lab):
    assert os.path.realpath(mod.__file__).startswith(top), mod.__file__
PY
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! installed; then
  rm -f "$stamp"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # The product and the lab (a separate distribution the product never imports).
  .venv/bin/python -m pip install -q -e '.[test]' -e ./lab
  installed || { echo "bootstrap: slurm-hooks or slurm-hooks-lab missing from .venv after pip install" >&2; exit 1; }
  echo "$want" >"$stamp"
fi

# promtool (tests/test_observability_files.py checks the alert rules with it):
# Debian's `prometheus` package, its promtool binary only, unpacked into the
# virtualenv.  Installing the package itself would also enable and start a
# Prometheus server (port 9090) on every machine that runs the tests.
# SLURM_HOOKS_PROMTOOL=0: not needed (tools/matrix/root-tests: a root runs
# only the Slurm-facing tests).
if [ "${SLURM_HOOKS_PROMTOOL:-1}" != 0 ] && [ ! -x .venv/bin/promtool ]; then
  pt=$(mktemp -d "${TMPDIR:-/tmp}/slurm-hooks-promtool.XXXXXX")
  chmod 755 "$pt" # apt's download sandbox user writes here
  (cd "$pt" && { apt-get download prometheus >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; }) ||
    { echo "bootstrap: apt-get download prometheus failed (for promtool)" >&2; rm -rf "$pt"; exit 1; }
  dpkg-deb --fsys-tarfile "$pt"/prometheus_*.deb | tar -xf - -C "$pt" ./usr/bin/promtool
  install -m 755 "$pt/usr/bin/promtool" .venv/bin/promtool
  rm -rf "$pt"
fi
