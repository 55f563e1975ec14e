"""``colocateWith``: a component runs only where the components it follows run, and moves
with them."""

from __future__ import annotations

import pytest

from qonnect_gitops.model import GoalsError, load_goals
from qonnect_gitops.placement import plan
from tests.placement.builders import after, cluster, component, current, goals, observed

CLUSTERS = [cluster("a", cpu_hour=0.05), cluster("b", cpu_hour=0.01), cluster("c", cpu_hour=0.02)]


def _cart_and_redis(**redis: object):
    # Alone, redis would take the cheapest cluster (b); cart is pinned to c by a selector.
    cart = component("cart", qos={"objective": "cost", "clusterSelector": {"matchLabels": {"qonnect.io/cluster": "c"}}})
    from dataclasses import replace

    red = replace(component("redis", qos={"objective": "cost"}, **redis), colocate_with=("shop/cart",))
    return cart, red


def test_a_follower_goes_where_its_anchor_runs_not_where_it_scores_best() -> None:
    cart, redis = _cart_and_redis()
    p = plan(goals(CLUSTERS, [cart, redis]), observed(), current({}))
    assert p.placements()["shop/cart"] == {"c": 1}
    assert p.placements()["shop/redis"] == {"c": 1}
    (assignment,) = p.components["shop/redis"].assignments
    assert "colocateWith" in assignment.reason
    assert p.unmet == ()


def test_when_the_anchor_moves_the_follower_follows_in_the_same_cycle() -> None:
    cart, redis = _cart_and_redis()
    p0 = plan(goals(CLUSTERS, [cart, redis]), observed(), current({}))
    # Now cart may go anywhere and c is down: cart fails over, redis follows it.
    free_cart = component("cart", qos={"objective": "cost"})
    g2 = goals(CLUSTERS, [free_cart, redis])
    p2 = plan(g2, observed(clusters={"c": {"healthy": False}}), after(p0))
    where = p2.placements()["shop/cart"]
    assert set(where) != {"c"} and p2.placements()["shop/redis"] == where
    # And it stays there in the next cycle.
    p3 = plan(g2, observed(clusters={"c": {"healthy": False}}), after(p2))
    assert p3.placements() == p2.placements()


def test_no_room_beside_the_anchor_is_an_unmet_goal_not_a_placement_elsewhere() -> None:
    cart, redis = _cart_and_redis(cpu=8000)  # no node of c (4 CPU) holds it
    p = plan(goals(CLUSTERS, [cart, redis]), observed(), current({}))
    assert p.placements()["shop/redis"] == {}
    assert [u.component for u in p.unplaced] == ["shop/redis"]


def test_the_loader_resolves_and_checks_colocate_with(template_files) -> None:
    text = template_files["apps/bookinfo/app.yaml"].decode()
    with_ratings = text.replace("      manifests: [manifests/reviews-v2.yaml]\n",
                                "      manifests: [manifests/reviews-v2.yaml]\n      colocateWith: [ratings]\n", 1)
    g = load_goals({**template_files, "apps/bookinfo/app.yaml": with_ratings.encode()})
    assert g.component("bookinfo/reviews-v2").colocate_with == ("bookinfo/ratings",)
    unknown = with_ratings.replace("colocateWith: [ratings]", "colocateWith: [nope]")
    loop = with_ratings.replace("      manifests: [manifests/ratings.yaml]\n",
                                "      manifests: [manifests/ratings.yaml]\n      colocateWith: [reviews-v2]\n", 1)
    for text, message in ((unknown, "unknown component 'nope'"), (loop, "leads back to this component")):
        with pytest.raises(GoalsError, match=message):
            load_goals({**template_files, "apps/bookinfo/app.yaml": text.encode()})
