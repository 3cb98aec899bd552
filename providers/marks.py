"""The contract's GC marks of a create, built once (pure).

Every `create` writes the same marks in the call that makes the instance
(docs/providers.md §4): managed, the UID, and the installation and the
Proxy's namespace when the request names them. `of` builds that mapping;
each provider only decides where it lands (aws tags, gcp and hetzner labels,
kubernetes pod labels, local the state record; kvm writes the same values as
domain `<metadata>` elements). `problem` is the check before the backend is
touched: what a backend admits as a mark value is its own `ValueRule` (GCE
and Hetzner label values, EC2 tag values), a parameter rather than a copy.

Called by aws `build`, gcp `insert`, hetzner `servers`, kubernetes `pod`,
local `state` (`of`), and by every provider's create (`problem`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from providers import base
from providers.base import CreateRequest


@dataclass(frozen=True)
class ValueRule:
    """What one backend admits as a mark value, and how to say it.

    Only the UID is judged by it: the installation and namespace marks are
    DNS-1123 labels (`base.installation_problem`, `base.namespace_mark`),
    which every backend's values admit."""

    what: str  # "GCE label value"
    pattern: re.Pattern[str]
    rule: str = ""  # the pattern in words, for the message

    def problem(self, field: str, value: str) -> str | None:
        if self.pattern.match(value):
            return None
        rule = f"{self.rule}; " if self.rule else ""
        return f"{field} is not a valid {self.what} ({rule}got {value[:80]!r})"


def of(request: CreateRequest) -> dict[str, str]:
    """The marks as one mapping, in the contract's order."""
    marks = {base.LABEL_MANAGED: base.LABEL_MANAGED_YES, base.LABEL_UID: request.uid}
    if request.installation:
        marks[base.LABEL_INSTALLATION] = request.installation
    namespace = base.namespace_mark(request)
    if namespace:
        marks[base.LABEL_NAMESPACE] = namespace
    return marks


def problem(request: CreateRequest, values: ValueRule | None = None) -> str | None:
    """Why the request's marks can't be written, or None: the UID against
    the backend's `values` (None: it takes any string), then the
    installation (a DNS-1123 label, or empty)."""
    if values is not None:
        bad = values.problem("uid", request.uid)
        if bad:
            return bad
    return base.installation_problem(request.installation)
