"""usher's watches: Pods, Nodes, Namespaces, DRA, volume and other objects, from kopf's streams into the scheduler.

This module is the package's public face: the rest of usher imports from here.
Each kind is read from kopf's watch stream, with kopf's login and settings; usher
registers no kopf handler, so kopf writes nothing to the watched objects. The
jobs, one module each:

- ``kinds``: the watched kinds, their versions, scope and collection paths;
- ``discovering``: which optional kinds (PodGroups, Workloads, DeviceTaintRules)
  the API server serves, asked once at start-up (`discover`);
- ``streaming``: one kopf stream per kind, each event handed to the sink once,
  in order (`Streams`), and kopf made a read-only watch layer (`configure`);
- ``relisting``: when kopf lists a kind again (after a 410, say), the objects the
  sink holds that the new listing lacks are deleted at once, as client-go's
  informers do, with the argument that nothing existing is dropped;
- ``holdings``: what the sink holds, and the one path every delivery takes;
- ``syncing``: when the cache is synced, from usher's own LIST of every kind
  (`InitialSync`);
- ``reconciling``: the safety net, a slow and careful comparison of what the sink
  holds with usher's LISTs every five minutes (`Reconciler`);
- ``listing``: usher's own metadata-only paginated LISTs (`api_lister`);
- ``registering``: one scheduler's watches wired to its sink (`register`);
- ``ports``, ``keys``: the protocols the watches talk to, and how objects are told apart;
- ``kopf_private``: every use of kopf's private API, and only there.
"""

from usher.adapters.watching.discovering import discover
from usher.adapters.watching.holdings import Held, Holdings
from usher.adapters.watching.keys import Identity, object_key
from usher.adapters.watching.kinds import (
    CLUSTER_SCOPED,
    DEVICE_TAINT_RULES,
    DRA_RESOURCES,
    KINDS,
    OPTIONAL_KINDS,
    POD_GROUPS,
    VERSIONS,
    VOLUME_RESOURCES,
    WORKLOAD_KINDS,
    WORKLOADS,
    Kind,
    api_path,
    version,
)
from usher.adapters.watching.kopf_private import Vault
from usher.adapters.watching.listing import METADATA_ONLY, ListingError, api_lister
from usher.adapters.watching.ports import DeletionRecorder, Deliver, Lister, WatchSink
from usher.adapters.watching.reconciling import Reconciler, ReconcileSettings
from usher.adapters.watching.registering import Watches, register
from usher.adapters.watching.streaming import EVENTS_PER_TURN, Streams, configure
from usher.adapters.watching.syncing import InitialSync, SyncSettings

__all__ = [
    "CLUSTER_SCOPED",
    "DEVICE_TAINT_RULES",
    "DRA_RESOURCES",
    "EVENTS_PER_TURN",
    "KINDS",
    "METADATA_ONLY",
    "OPTIONAL_KINDS",
    "POD_GROUPS",
    "VERSIONS",
    "VOLUME_RESOURCES",
    "WORKLOADS",
    "WORKLOAD_KINDS",
    "DeletionRecorder",
    "Deliver",
    "Held",
    "Holdings",
    "Identity",
    "InitialSync",
    "Kind",
    "Lister",
    "ListingError",
    "ReconcileSettings",
    "Reconciler",
    "Streams",
    "SyncSettings",
    "Vault",
    "WatchSink",
    "Watches",
    "api_lister",
    "api_path",
    "configure",
    "discover",
    "object_key",
    "register",
    "version",
]
