"""Which Proxy placements the kubernetes provider can never satisfy (pure).

None: a pod ignores all of `placement` (region, zone, machineType and image
alike: the image is the provider's `image:`, one for every pod), so any
placement is satisfiable, and ignored as documented in
docs/kubernetes-provider.md. Registered as the type's placement check
(`providers.registry`) so the controller asks every type the same way, and
`create` asks it too, so a rule added here holds in both places. Imports no
SDK.
"""

from __future__ import annotations

from providers.base import Placement
from providers.kubernetes.config import KubernetesConfig


def placement_problem(block: KubernetesConfig, placement: Placement) -> str | None:
    """Why no pod of this provider could have `placement`: never."""
    return None
