"""The lists of Kubernetes e2e specs (sig-scheduling; DRA) usher does not pass yet, and why.

Every entry is a spec kube-scheduler passes on this harness (e2e/conformance/cluster.py)
and usher fails because a feature is missing, said plainly. The CI test
(e2e/test_conformance.py) skips these specs and fails on any other spec usher
fails; the full run (``make conformance``) still runs them and fails when usher
passes one, so an entry goes as soon as its feature lands.

This list only shrinks: `MAX_ENTRIES` is checked by the CI test; lower it with
every entry removed, never raise it. A new spec usher fails is a bug to fix,
not an entry to add.

Keys are spec names as run.py's ``spec_name`` gives them: the ginkgo full text
without the label list (``[sig-scheduling] <container> <spec>``, ``[sig-node]
[DRA] <container> <spec>``).
"""

from __future__ import annotations

EXPECTED_FAILURES: dict[str, str] = {}

#: Entries usher sometimes passes without the feature, when equal node scores happen to
#: fall its way: such a pass is not reported as "remove it". They leave the list when
#: the feature lands, like the others.
PASSES_BY_CHANCE: frozenset[str] = frozenset()

#: The ratchet: the number of entries may only go down (see the module docstring).
MAX_ENTRIES = 0

#: The same for the DRA specs (run.py's ``dra`` and ``dra-kubelet`` suites).
DRA_EXPECTED_FAILURES: dict[str, str] = {}
DRA_PASSES_BY_CHANCE: frozenset[str] = frozenset()
DRA_MAX_ENTRIES = 0
