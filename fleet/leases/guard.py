"""What one API process remembers of the lease state's epoch, and when it
grants nothing (pure, table-tested; issue 21).

Redis holds an epoch (`fleet:lease:epoch`: a random id and a `seq` every
lease and renewal bumps). Every API process sends the id and the highest
seq it saw with each lease and renewal (and checks them every
`CHECK_EVERY` s); the script answers with the epoch as it is now and, when
it shows that Redis lost data (the epoch vanished, is another one, or its
seq went back), sets a grace end in Redis. This view keeps the grace end
too, so a second loss (the grace itself gone) does not end it early.

Why a grace period: a lease Redis forgot is still used by its crawler
until the crawler's next renewal, which comes at the latest one `--lease-
max-ttl` later; granting its proxy to someone else meanwhile would hand it
out twice. During the grace the renewals re-create what was lost (the
renew body says the proxy, target and address), and after it every lease a
crawler still uses is known again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.store.leases import Epoch, GuardCall

CHECK_EVERY = 2.0  # seconds between a process's own epoch checks (and replica counts)

WHY = {"vanished": "the epoch key is gone (Redis restarted without its data, or was emptied)",
       "changed": "the epoch is another one (Redis lost its data and another API process noticed first)",
       "rolled-back": "the epoch's sequence went back (a failover to a replica that was behind, or an AOF "
                      "that lost its last writes)"}


@dataclass
class EpochView:
    grace: float  # seconds granted nothing after a loss shows
    epoch: str = ""
    seq: int = 0
    grace_until: float = 0.0
    lost: str = ""  # why the last loss showed ('' never)
    losses: int = field(default=0)

    def call(self) -> GuardCall:
        return GuardCall(epoch=self.epoch, seq=self.seq, grace=self.grace)

    def observe(self, got: Epoch) -> str:
        """Take a script's header in; the reason when it shows a loss ('' otherwise)."""
        if got.lost:
            self.seq = got.seq  # the new count: what this process saw before no longer exists
            self.lost = got.lost
            self.losses += 1
        elif got.id != self.epoch:
            self.seq = got.seq  # the first answer (or an epoch this process adopts)
        else:
            self.seq = max(self.seq, got.seq)
        self.epoch = got.id
        self.grace_until = max(self.grace_until, got.grace_until)
        return got.lost

    def in_grace(self, now: float) -> bool:
        return now < self.grace_until


def should_wait(replicas: int, wait_ms: int) -> int:
    """The WAIT timeout for a grant or renewal: 0 (do not wait) without a replica or with waiting off."""
    return wait_ms if replicas > 0 and wait_ms > 0 else 0
