"""Site checks as data: the ``[[site_checks]]`` section of the config.

A site describes its own checks (this mount read-write, this daemon running
as root, this command's output matching ...) as a kind plus arguments plus
the hosts it applies to, with no Python to write.  They are judged the way
the built-in checks are: :mod:`.gather` reads the machine once per family
(roots injectable: /proc, /sys, the commands), :mod:`.judge` is pure, and
:mod:`.check` turns every verdict into a :class:`~slurm_hooks.core.model.Finding`
of the registered check ``site``, so findings, reasons, metrics and history
are the same as for the built-in checks.

The kinds cover LBNL NHC's check families (:mod:`.kinds`), so that a site's
``nhc.conf`` can be translated (:mod:`.nhc_import`, ``slurm-hooks nhc
import``) and run side by side with NHC before the switch (:mod:`.compare`).
"""
