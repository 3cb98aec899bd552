"""The aggregated-list request ListByTag and the check share, and reading
one page of its answer (pure).

`returnPartialSuccess`: google-cloud-compute 1.57 has no such field on
`AggregatedListInstancesRequest` (it lists only filter, includeAllScopes,
maxResults, orderBy, pageToken, project and serviceProjectNumber), so it is
set only when the installed SDK knows it (`PARTIAL_SUCCESS`). Without it the
API's default applies: a zone that can't be read fails the whole request
rather than being left out, so ListByTag raises and GC skips this provider
for that sweep (safe; a long zonal outage pauses GC for the whole project).
When the API does answer with unreachable scopes (`unreachables`, or a
scope whose warning is UNREACHABLE), their instances are left out, which is
also safe (GC never deletes what isn't listed), and the scopes are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.cloud import compute_v1

from providers import base
from providers.base import Instance
from providers.gcp.ids import format_id, last_segment
from providers.gcp.instances import to_instance

MANAGED_FILTER = f"labels.{base.LABEL_MANAGED} = {base.LABEL_MANAGED_YES}"
PARTIAL_SUCCESS = "return_partial_success" in compute_v1.AggregatedListInstancesRequest.meta.fields
UNREACHABLE = "UNREACHABLE"


def list_request(project: str, max_results: int | None = None) -> compute_v1.AggregatedListInstancesRequest:
    req = compute_v1.AggregatedListInstancesRequest(project=project, filter=MANAGED_FILTER)
    if max_results is not None:
        req.max_results = max_results
    if PARTIAL_SUCCESS:  # pragma: no cover - depends on the installed SDK
        req.return_partial_success = True  # type: ignore[attr-defined]
    return req


@dataclass
class Page:
    instances: list[Instance] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)  # scopes, e.g. zones/us-east1-b
    next_page_token: str = ""


def read_page(resp: compute_v1.InstanceAggregatedList) -> Page:
    page = Page(next_page_token=resp.next_page_token)
    page.unreachable.update(resp.unreachables)
    for scope, scoped in resp.items.items():
        if scoped.warning.code == UNREACHABLE:
            page.unreachable.add(scope)
        for inst in scoped.instances:
            # The filter already did this; an instance without the mark is
            # never listed, whatever the server answered.
            if inst.labels.get(base.LABEL_MANAGED) != base.LABEL_MANAGED_YES:
                continue
            zone = last_segment(inst.zone) if inst.zone else last_segment(scope)
            page.instances.append(to_instance(format_id(zone, inst.name), inst))
    return page
