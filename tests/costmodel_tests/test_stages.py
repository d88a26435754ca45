"""costmodel.stages: the stage plan and the loop over its stage groups."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.layers import LayerCosts
from costmodel.schedule import pipeline_span_s, pipeline_timeline, stage_layers
from costmodel.stages import PipelineComm, stage_plan, stage_times


@pytest.mark.parametrize("layers", [5, 24, 78, 80, 126])
def test_plan_reproduces_megatrons_splits(layers):
    pp = np.arange(1, layers + 1)
    plan = stage_plan(layers, pp)
    first, mid, last, ok = stage_layers(float(layers), pp)
    g0, g1, g2 = plan.groups
    assert (g0.layers == first).all() and (g1.layers == last).all() and (g2.layers == mid).all()
    assert (plan.splittable == ok).all()
    # the loss's stage is the last; the middles are stages 1 .. pp-2
    assert (g1.index == pp - 1).all() and (g1.count == np.where(pp == 1, 0, 1)).all()
    assert (g2.count == np.maximum(pp - 2, 0)).all()
    assert g0.embedding.all() and (g0.head == (pp == 1)).all() and g1.head.all()
    # every stage of a splittable plan holds its layers, and they add up to L
    for p in (p for p in pp if ok[p - 1]):
        per_stage = [plan.stage_layers(i)[p - 1] for i in range(p)]
        assert sum(per_stage) == layers and min(per_stage) >= 1


def _layer(n, **kw):
    z = np.zeros(n)
    vals = dict(forward_s=z + 1.0, backward_s=z + 2.0, recompute_s=z, tp_comm_s=z + 0.25,
                host_s=z, embedding_s=z + 0.5, head_s=z + 3.0, activation_bytes=z,
                full_activation_bytes=z, grad_accum_s=z, embedding_grad_accum_s=z,
                hp_grad_s=z, embedding_hp_grad_s=z)
    vals.update(kw)
    return LayerCosts(**vals)


def test_stage_loop_matches_the_first_middle_last_span():
    pp = np.array([1, 2, 3, 4, 7, 8])
    n = len(pp)
    plan = stage_plan(26, pp)
    z = np.zeros(n)
    on = pp > 1
    pipe = PipelineComm(z, z, z, np.where(on, 0.1, 0.0), np.where(on, 0.2, 0.0), 0.0,
                        np.zeros(n))
    layer = _layer(n)
    st = stage_times(plan, layer, pipe)
    lt = layer.total_s
    first_g, last_g, mid_g = plan.groups
    first = first_g.layers * lt + 0.5 + np.where(pp == 1, 3.0, np.where(on, 0.1, 0.0))
    last = last_g.layers * lt + 3.0 + 0.1
    middle = mid_g.layers * lt + 0.2
    m = np.full(n, 16.0)
    span, steady, bubble = pipeline_span_s(first, middle, last, pp, m, 1, 1)
    got = pipeline_timeline(st.slowest_s, st.total_s, m, 1, 1)
    np.testing.assert_array_equal(got[0], span)
    np.testing.assert_array_equal(got[2], bubble)
    # the loss's stage wins a tie for the slowest; a middle stage must be strictly slower
    np.testing.assert_array_equal(st.slowest_layers,
                                  np.where((middle > np.maximum(first, last)) & (pp >= 3),
                                           mid_g.layers,
                                           np.where((last >= first) & (pp > 1), last_g.layers,
                                                    first_g.layers)))
