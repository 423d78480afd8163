"""Only for the ``lab`` extra: setup.cfg holds everything else.

The lab (``lab/``, distribution ``slurm-hooks-lab``) is a separate
distribution so that ``pip install .`` ships no lab code, while ``pip install
'.[lab]'`` installs it from this checkout.  A PEP 508 direct reference can
only name a local project by an absolute URL, so that one extra is computed
here; setup() replaces setup.cfg's extras as a whole, so they are read from
there and the lab is added to them.
"""

import configparser
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
_cfg = configparser.ConfigParser()
_cfg.read(HERE / "setup.cfg", encoding="utf-8")
EXTRAS = {
    name: [line.strip() for line in value.splitlines() if line.strip()]
    for name, value in _cfg["options.extras_require"].items()
}
EXTRAS["lab"] = [f"slurm-hooks-lab @ {(HERE / 'lab').as_uri()}"]

setup(extras_require=EXTRAS)
