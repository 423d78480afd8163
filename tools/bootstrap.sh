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
for p in slurmctld slurmd slurm-client munge slurmrestd util-linux procps python3 python3-venv python3-numpy; do
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

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.slurm-hooks-installed
if [ ! -e "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
  || [ pyproject.toml -nt "$stamp" ] || [ lab/setup.cfg -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # The product and the lab (a separate distribution the product never imports).
  .venv/bin/python -m pip install -q -e '.[test]' -e ./lab
  touch "$stamp"
fi
