"""Tests of attncourse.cost: the counting model against a reference that counts with loops."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attncourse.cost import AttentionCost, attention_cost, counted_head_forward
from attncourse.examples import random_head
from attncourse.layers.head import head_forward


def test_formula_values():
    c = attention_cost(T=5, D=7, d=3, r=4)
    assert c == AttentionCost(projections=5 * 7 * (2 * 3 + 4), scores=25 * 3, output=25 * 4, weights_stored=25)
    assert c.multiply_adds == 350 + 75 + 100


@pytest.mark.parametrize("sizes, shown", [
    (dict(T=0, D=2, d=2, r=2), "T=0"), (dict(T=2, D=2, d=-1, r=2), "d=-1"), (dict(T=2.0, D=2, d=2, r=2), "T=2.0"),
])
def test_formula_rejects_bad_sizes(sizes, shown):
    with pytest.raises(ValueError, match=f"sizes must be positive integers.*{shown}"):
        attention_cost(**sizes)


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4), st.integers(0, 1000))
def test_counted_reference_matches_the_formula_and_the_head(T, D, d, r, seed):
    h = random_head(seed=seed, T=T, D=D, d=d, r=r)
    O, A, counted = counted_head_forward(h.X, h.W_Q, h.W_K, h.W_V)
    assert counted == attention_cost(T, D, d, r)
    O_ref, saved = head_forward(h.params, h.X)
    A_ref = saved["A"]
    assert_allclose(O, O_ref, rtol=1e-12, atol=1e-12)
    assert_allclose(A, A_ref, rtol=1e-12, atol=1e-12)


def test_swapping_d_and_r_in_the_model_is_caught():
    # fault control: a model that counts Q K^T with r and A V with d disagrees when d != r
    h = random_head(seed=1, T=5, D=7, d=3, r=4)
    counted = counted_head_forward(h.X, h.W_Q, h.W_K, h.W_V)[2]
    T, D, d, r = 5, 7, 3, 4
    swapped = AttentionCost(projections=T * D * (2 * d + r), scores=T * T * r, output=T * T * d, weights_stored=T * T)
    assert counted != swapped
    forgot_a_projection = attention_cost(T, D, d, r)._replace(projections=T * D * (d + r))
    assert counted != forgot_a_projection


def test_quadratic_terms_scale_with_T_squared():
    c1, c2 = attention_cost(100, 64, 16, 16), attention_cost(200, 64, 16, 16)
    assert c2.scores == 4 * c1.scores and c2.output == 4 * c1.output and c2.weights_stored == 4 * c1.weights_stored
    assert c2.projections == 2 * c1.projections


def test_counted_reference_rejects_batches_and_bad_shapes():
    h = random_head(seed=0, T=3, D=4, d=2, r=2)
    with pytest.raises(ValueError, match=r"2-D X \(T, D\), got shape \(2, 3, 4\)"):
        counted_head_forward(np.stack([h.X, h.X]), h.W_Q, h.W_K, h.W_V)
    with pytest.raises(ValueError, match=r"W_Q must have one row per input feature"):
        counted_head_forward(h.X, h.W_Q.T, h.W_K, h.W_V)
