"""Names, the one place their rules are written: Kubernetes' DNS-1123 label
and subdomain, and an RFC 1123 host name. Everyone may import this module
(it imports nothing of the project): the providers, fleet, the CRD and
OpenAPI tables (which take the patterns as text).

| rule      | pattern (`fullmatch`)                     | length        | used for                               |
|-----------|-------------------------------------------|---------------|----------------------------------------|
| label     | `LABEL`: lowercase letters, digits, '-',  | 1..63         | provider names, namespaces,            |
|           | starting and ending with a letter/digit   | (`MAX_LABEL`) | installation ids, label values         |
| subdomain | labels joined by '.' (`SUBDOMAIN`)        | 1..253        | Proxy and Secret names                 |
| hostname  | `HOSTNAME`: labels of letters (any case), | 1..253        | bind addresses, Redis and probe hosts, |
|           | digits and '-', each at most 63, by '.'   |               | lease targets (a trailing '.' allowed  |
|           |                                           |               | where `trailing_dot`)                  |

`LABEL` and `SUBDOMAIN` are Kubernetes' own formats (apimachinery's
`dns1123LabelFmt`/`dns1123SubdomainFmt`: the length is checked apart, as
there); a pattern for a schema is `anchored(...)`.
"""

from __future__ import annotations

import re

LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
MAX_LABEL = 63
SUBDOMAIN = rf"{LABEL}(\.{LABEL})*"
MAX_SUBDOMAIN = 253
HOST_LABEL = "[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
HOSTNAME = rf"{HOST_LABEL}(\.{HOST_LABEL})*"
MAX_HOSTNAME = 253

_LABEL = re.compile(LABEL, re.ASCII)
_SUBDOMAIN = re.compile(SUBDOMAIN, re.ASCII)
_HOSTNAME = re.compile(HOSTNAME, re.ASCII)

LABEL_RULE = "a DNS-1123 label (lowercase letters, digits, '-'; at most 63)"


def anchored(pattern: str) -> str:
    """`pattern` as a whole-string pattern (OpenAPI and CRD schemas match anywhere)."""
    return f"^{pattern}$"


def is_label(name: object, limit: int = MAX_LABEL) -> bool:
    """A DNS-1123 label of at most `limit` characters."""
    return isinstance(name, str) and 0 < len(name) <= limit and _LABEL.fullmatch(name) is not None


def is_subdomain(name: object, limit: int = MAX_SUBDOMAIN) -> bool:
    """A DNS-1123 subdomain of at most `limit` characters."""
    return isinstance(name, str) and 0 < len(name) <= limit and _SUBDOMAIN.fullmatch(name) is not None


def is_hostname(name: object, *, trailing_dot: bool = False) -> bool:
    """An RFC 1123 host name (any case) of at most 253 characters; a fully
    qualified one's trailing '.' only where `trailing_dot`."""
    if not isinstance(name, str):
        return False
    if trailing_dot and name.endswith("."):
        name = name[:-1]
    return 0 < len(name) <= MAX_HOSTNAME and _HOSTNAME.fullmatch(name) is not None
