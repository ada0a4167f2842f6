"""GPU schedule rules, by name. A new rule is one module here and one line in :data:`RULES`."""

from __future__ import annotations

from psa_tvm.compiler.rules.base import Pass, ScheduleRule
from psa_tvm.compiler.rules.rowwise import Rowwise
from psa_tvm.compiler.rules.tiled import Tiled

RULES: dict[str, ScheduleRule] = {rule.name: rule for rule in (Rowwise(), Tiled())}


def get_rule(name: str) -> ScheduleRule:
    """The rule called ``name``; ``ValueError`` listing the known ones otherwise."""
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"schedule: expected one of {sorted(RULES)}, got {name!r}") from None


__all__ = ["RULES", "Pass", "ScheduleRule", "get_rule"]
