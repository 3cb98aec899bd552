"""Shared base for provider config blocks: strict, so a typo is an error."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class Block(BaseModel):
    """A provider's config block. Unknown keys fail; values are immutable.

    `secret_fields` names fields whose values are redacted wherever the
    effective config is shown (paths to key files are not secret; keys are).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret_fields: ClassVar[tuple[str, ...]] = ()
