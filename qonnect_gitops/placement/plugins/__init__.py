"""The filter and score plugins the planner runs, in order. Add a module, list it here."""

from __future__ import annotations

from qonnect_gitops.placement.framework import DynamicScore, Filter, Score
from qonnect_gitops.placement.plugins.affinity import AffinityScore
from qonnect_gitops.placement.plugins.arch import ArchitectureFilter
from qonnect_gitops.placement.plugins.capacity import CapacityFilter, NodeSizeFilter
from qonnect_gitops.placement.plugins.closeness import ClosenessScore
from qonnect_gitops.placement.plugins.cost import CostCapFilter, CostScore, EnergyScore
from qonnect_gitops.placement.plugins.health import HealthFilter
from qonnect_gitops.placement.plugins.latency import LatencyEnvelopeFilter, LatencyScore
from qonnect_gitops.placement.plugins.taints import TaintFilter, TaintPreferenceScore
from qonnect_gitops.placement.plugins.tier import (
    SelectorFilter,
    TierFilter,
    TierPreferenceScore,
)
from qonnect_gitops.placement.plugins.traffic import TrafficScore
from qonnect_gitops.placement.plugins.utilisation import UtilisationScore

# Filters that depend on the goals only: a cluster failing one of them is never right for
# the component, so replicas there move at once (goals changed).
GOAL_FILTERS: tuple[Filter, ...] = (
    TierFilter(),
    SelectorFilter(),
    TaintFilter(),
    ArchitectureFilter(),
    CostCapFilter(),
)
# Filters on what was observed: health first (failover), then latency, then whether any
# node (as reported, or as declared) could hold one replica at all.
OBSERVED_FILTERS: tuple[Filter, ...] = (HealthFilter(), LatencyEnvelopeFilter(), NodeSizeFilter())
DYNAMIC_FILTERS: tuple[Filter, ...] = (CapacityFilter(),)

# Scores whose vector is fixed for the cycle (the exact reference objective uses these).
STATIC_SCORES: tuple[Score, ...] = (
    LatencyScore(),
    CostScore(),
    EnergyScore(),
    TierPreferenceScore(),
    TaintPreferenceScore(),
    TrafficScore(),
    AffinityScore(),
)
DYNAMIC_SCORES: tuple[DynamicScore, ...] = (UtilisationScore(), ClosenessScore())
