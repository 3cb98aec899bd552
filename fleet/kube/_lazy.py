"""The names of `fleet.kube` that load the kubernetes SDK, re-exported by
`fleet.kube` on first use (so a process that needs only the resources or the
errors, such as the `fleet` command's tables, never imports the SDK)."""

from fleet.kube.connection import CONNECTION_ERRORS as CONNECTION_ERRORS
from fleet.kube.connection import FIELD_MANAGER as FIELD_MANAGER
from fleet.kube.connection import REQUEST_TIMEOUT as REQUEST_TIMEOUT
from fleet.kube.connection import ApiClient as ApiClient
from fleet.kube.connection import api_client as api_client
from fleet.kube.connection import cluster_configuration as cluster_configuration
from fleet.kube.connection import scale as scale
from fleet.kube.secrets import MAX_SECRET_VALUE as MAX_SECRET_VALUE
from fleet.kube.secrets import create_secret as create_secret
from fleet.kube.watch import ADDED as ADDED
from fleet.kube.watch import BOOKMARK as BOOKMARK
from fleet.kube.watch import DELETED as DELETED
from fleet.kube.watch import MODIFIED as MODIFIED
from fleet.kube.watch import SYNC as SYNC
from fleet.kube.watch import Backoff as Backoff
from fleet.kube.watch import Watcher as Watcher
from fleet.kube.watch import WatchStream as WatchStream
from fleet.kube.watch import list_page as list_page
from fleet.kube.watch import object_name as object_name
from fleet.kube.writer import CACHE_TTL as CACHE_TTL
from fleet.kube.writer import CONFLICT_RETRIES as CONFLICT_RETRIES
from fleet.kube.writer import FOREIGN as FOREIGN
from fleet.kube.writer import LABEL_INSTALLATION as LABEL_INSTALLATION
from fleet.kube.writer import LABEL_MANAGED_BY as LABEL_MANAGED_BY
from fleet.kube.writer import MANAGED_BY as MANAGED_BY
from fleet.kube.writer import PATCHED as PATCHED
from fleet.kube.writer import StatusCache as StatusCache
from fleet.kube.writer import Writer as Writer
from fleet.kube.writer import connect as connect
from fleet.kube.writer import foreign_owner as foreign_owner
from fleet.kube.writer import labels_for as labels_for
from fleet.kube.writer import selector_for as selector_for
