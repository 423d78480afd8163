"""A site's own NHC function (kind ``nhc_function``) under slurmd, on the real lab.

slurmd runs our healthcheck shim every 2 s, in its own environment (no PATH,
as for any HealthCheckProgram); the site check sources a scripts directory
holding a function written as NHC's are.  While it passes, the node stays in
service; when it dies, our drain carries its message (docs/site-checks.md),
and no other node is drained by us.
"""

from __future__ import annotations

import pytest
from slurm_hooks_lab.hooks import install

from slurm_hooks.core.reason import is_ours, parse_reason

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODE = "n3"

#: Written as a site writes its checks beside NHC's: a default from the
#: environment, ``die`` with "$FUNCNAME:  why", then ``return 1``.
SITE_SCRIPT = """\
SITE_FLAG="${SITE_FLAG:-/nonexistent}"

function check_site_flag() {
    touch "$SITE_FLAG.seen"
    if [[ ! -f "$SITE_FLAG" ]]; then
        die 1 "$FUNCNAME:  $SITE_FLAG is gone"
        return 1
    fi
    return 0
}
"""


def test_a_site_function_drains_its_node_with_the_message_it_died_with(fresh_lab, tmp_path):
    lab = fresh_lab
    tmp_path.chmod(0o755)
    scripts = tmp_path / "scripts"
    scripts.mkdir(mode=0o755)
    (scripts / "site.nhc").write_text(SITE_SCRIPT)
    flag = tmp_path / "flag"
    flag.write_text("ok\n")
    seen = tmp_path / "flag.seen"
    hooks = install(lab, healthcheck_interval=2)
    try:
        hooks.add_config(
            NODE,
            f'[[site_checks]]\nname = "flag"\nkind = "nhc_function"\n'
            f'function = "check_site_flag"\nscripts_dir = "{scripts}"\n'
            f'env = {{ SITE_FLAG = "{flag}" }}\n',
        )
        # The function ran under slurmd and passed: the node stays in service.
        lab.wait_for(seen.exists, 30, what="the site function run by the health check")
        seen.unlink()
        lab.wait_for(seen.exists, 30, what="a second health check")
        node = lab.client().get_node(NODE)
        assert not node.drained, node.reason

        flag.unlink()
        lab.wait_for(lambda: lab.client().get_node(NODE).drained, 30, what="our drain")
        node = lab.client().get_node(NODE)
        assert is_ours(node.reason), node.reason
        r = parse_reason(node.reason)
        assert (r.code, r.component) == ("NHC_FUNCTION", "site:flag")
        # die's message, as NHC's note would carry it (blanks squeezed in a reason).
        assert r.text == f"flag: check_site_flag: {flag} is gone"
        for other in lab.client().list_nodes():
            if other.name != NODE:
                assert not (other.drained and is_ours(other.reason)), other
    finally:
        hooks.finish()
