"""Tests of attncourse.kit.symbolic: elementwise builders, gradients, moments and the
exact examples."""

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose

from attncourse.kit import symbolic as sy
from attncourse.kit.examples import example1, example2
from attncourse.layers.head import head_backward, head_forward

TIGHT = 64 * np.finfo(np.float64).eps


def test_matrix_symbols_and_bad_sizes():
    W = sy.matrix("W", 2, 3)
    assert W.shape == (2, 3) and str(W[1, 2]) == "W_23" and W[0, 0].is_real
    assert str(sy.matrix("B", 10, 2)[9, 1]) == "B_10,2"  # unambiguous past 9
    with pytest.raises(ValueError, match="matrix W needs positive sizes, got 0 x 3"):
        sy.matrix("W", 0, 3)


def test_elementwise_builders_equal_matrix_forms_on_unequal_shapes():
    X, W = sy.matrix("X", 2, 3), sy.matrix("W", 3, 4)
    assert sy.vanishes(sy.product(X, W) - X * W)  # (2, 3) x (3, 4) -> (2, 4)
    Q, K = sy.matrix("Q", 2, 3), sy.matrix("K", 4, 3)
    # (2, 3) x (3, 4) -> (2, 4)
    assert sy.vanishes(sy.scores(Q, K) - Q * K.T / sp.sqrt(3))
    A, V = sy.matrix("A", 2, 4), sy.matrix("V", 4, 5)
    assert sy.vanishes(sy.weighted_sum(A, V) - A * V)  # (2, 4) x (4, 5) -> (2, 5)
    assert sy.pairing(sp.Matrix([[1, 2]]), sp.Matrix([[3, 4]])) == 11


def test_vanishes_is_not_fooled():
    # fault control for the zero test: a missing term or a transposed product is
    # reported non-zero
    Q, K = sy.matrix("Q", 2, 3), sy.matrix("K", 4, 3)
    assert not sy.vanishes(sy.scores(Q, K) - Q * K.T)          # missing 1/sqrt(d)
    S, dA = sy.matrix("S", 2, 3), sy.matrix("dA", 2, 3)
    A = sy.softmax_rows(S)
    numerator_only = sp.Matrix(2, 3, lambda i, j: A[i, j] * dA[i, j])
    assert not sy.vanishes(sy.gradient(sy.pairing(dA, A), S) - numerator_only)
    assert not sy.vanishes(sp.Symbol("x"))
    assert sy.vanishes(sp.Integer(0))


def test_vanishes_with_exponentials():
    s, t = sp.symbols("s t", real=True)
    # the fast path treats exp(s), exp(t) as free symbols; relations between them fall
    # back to simplify
    assert sy.vanishes(
        sp.exp(s) / (sp.exp(s) + sp.exp(t)) + sp.exp(t) / (sp.exp(s) + sp.exp(t)) - 1
    )
    assert sy.vanishes(sp.exp(2 * s) - sp.exp(s) ** 2)
    assert not sy.vanishes(sp.exp(s) / (sp.exp(s) + sp.exp(t)) - sp.Rational(1, 2))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: sy.product(sy.matrix("X", 2, 3), sy.matrix("W", 2, 2)),
            r"X \(2, 3\) and W \(2, 2\)",
        ),
        (
            lambda: sy.scores(sy.matrix("Q", 2, 3), sy.matrix("K", 2, 2)),
            r"Q \(2, 3\) and K \(2, 2\)",
        ),
        (
            lambda: sy.weighted_sum(sy.matrix("A", 2, 3), sy.matrix("V", 2, 2)),
            r"A \(2, 3\) and V \(2, 2\)",
        ),
        (
            lambda: sy.pairing(sy.matrix("G", 2, 3), sy.matrix("O", 3, 2)),
            r"\(2, 3\) and \(3, 2\)",
        ),
        (lambda: sy.quotient_rule_paths(0), "n >= 1, got 0"),
    ],
)
def test_shape_errors_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_softmax_rows_sum_to_one_and_log3_gives_quarters():
    S = sy.matrix("S", 2, 3)
    A = sy.softmax_rows(S)
    assert all(sy.vanishes(sum(A.row(i)) - 1) for i in range(2))
    assert sy.softmax_rows(sp.Matrix([[sp.log(3), 0]])) == sp.Matrix(
        [[sp.Rational(3, 4), sp.Rational(1, 4)]]
    )


@pytest.mark.parametrize("n", [2, 3, 5])
def test_quotient_rule_paths(n):
    s, a, num, den = sy.quotient_rule_paths(n)
    J = sp.Matrix(n, n, lambda j, k: sp.diff(a[j], s[k]))
    assert sy.vanishes(J - num - den)
    assert sy.vanishes(num - sp.diag(*a)) and sy.vanishes(den + a * a.T)
    assert sy.vanishes(J * sp.ones(n, 1))
    # the numerator path alone does not have zero row sums
    assert not sy.vanishes(num * sp.ones(n, 1))


def test_general_jacobian():
    g = sy.softmax_jacobian_general()
    Z = g["Z"]
    a_j, a_k = sp.exp(g["s"][g["j"]]) / Z, sp.exp(g["s"][g["k"]]) / Z
    assert (
        sp.simplify(g["entry"] - (sp.KroneckerDelta(g["j"], g["k"]) * a_j - a_j * a_k))
        == 0
    )
    assert sp.simplify(g["row_sum"]) == 0


def test_expectation_factorises_over_independent_variables():
    q, k = sp.symbols("q k")
    E = sy.moment_symbol
    assert sy.expectation(q * k, [q, k]) == E(q, 1) * E(k, 1)
    assert sy.expectation(3 * q**2 * k + 2, [q, k]) == 3 * E(q, 2) * E(k, 1) + 2
    unit = lambda x, p: {1: 0, 2: 1}[p]
    for d in range(1, 5):
        qs, ks = sp.symbols(f"q1:{d + 1}"), sp.symbols(f"k1:{d + 1}")
        dot = sum(a * b for a, b in zip(qs, ks))
        assert sy.expectation(dot, qs + ks, unit) == 0
        # Var(q.k) = d under the moment assumptions
        assert sy.expectation(dot**2, qs + ks, unit) == d
        tied = sum(a * a for a in qs)
        assert sy.expectation(tied, qs, unit) == d  # tied q = k: mean d, not 0


def test_gradient_matches_hand_derivative():
    x = sy.matrix("x", 1, 3)
    f = x[0, 0] * x[0, 1] + sp.exp(x[0, 2])
    assert sy.gradient(f, x) == sp.Matrix([[x[0, 1], x[0, 0], sp.exp(x[0, 2])]])


@pytest.mark.parametrize(
    "exact, floats", [(sy.example1, example1), (sy.example2, example2)]
)
def test_exact_examples_equal_the_float_examples(exact, floats):
    ex, ef = exact(), floats()
    for name in ("X", "W_Q", "W_K", "W_V", "G"):
        assert_allclose(
            sy.to_float(ex[name]), getattr(ef, name), rtol=TIGHT, atol=TIGHT
        )


def test_exact_head_objective_and_its_gradient_on_example1():
    ex, ef = sy.example1(), example1()
    J = sy.head_objective(ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"], ex["G"])
    assert sp.simplify(J) == sp.Rational(15, 2)
    O, saved = head_forward(ef.params, ef.X)
    assert float(J) == pytest.approx(float(np.sum(O * ef.G)), abs=TIGHT)
    _, dX_numpy = head_backward(ef.params, saved, ef.G)
    X = sy.matrix("X", 2, 2)
    J_of_X = sy.head_objective(X, ex["W_Q"], ex["W_K"], ex["W_V"], ex["G"])
    dX = sy.gradient(J_of_X, X).subs(
        {X[i, j]: int(i == j) for i in range(2) for j in range(2)}
    )
    assert_allclose(sy.to_float(dX), dX_numpy, rtol=TIGHT, atol=TIGHT)
    # gradient_at builds the free matrix, differentiates and evaluates in one call
    dX_at = sy.gradient_at(
        lambda F: sy.head_objective(F, ex["W_Q"], ex["W_K"], ex["W_V"], ex["G"]),
        ex["X"],
        "X",
    )
    assert sy.vanishes(dX_at - dX)
    assert_allclose(sy.to_float(dX_at), dX_numpy, rtol=TIGHT, atol=TIGHT)


def test_gradient_at_evaluates_at_the_given_matrix_only():
    M = sp.Matrix([[1, 2, 3], [-1, 0, 2]])  # (2, 3), non-square
    W = sp.Matrix([[1, 0], [2, -1], [0, 3]])  # (3, 2)
    J_of = lambda F: sum((F * W).applyfunc(lambda e: e**2))  # noqa: E731  J = ||F W||^2
    grad = sy.gradient_at(J_of, M, "F")
    assert grad.shape == (2, 3)
    # dJ/dF = 2 (F W) W^T at F = M: (2, 3) x (3, 2) x (2, 3)
    assert grad == 2 * (M * W) * W.T
    assert not any(s.name.startswith("F_") for s in grad.free_symbols)


def test_to_exact_gives_the_binary_fractions_numpy_computes_with():
    M = np.array([[0.25, -1.5, 3.0], [0.125, 0.0, 1e-3]])
    exact = sy.to_exact(M)
    assert exact.shape == (2, 3)
    assert exact[0, 0] == sp.Rational(1, 4) and exact[1, 0] == sp.Rational(1, 8)
    # 1e-3 is not a binary fraction: its float is kept exactly
    assert exact[1, 2] != sp.Rational(1, 1000)
    assert_allclose(sy.to_float(exact), M, rtol=0, atol=0)  # round trip
    # a vector becomes a column
    assert sy.to_exact(np.array([0.5, 2.0])).shape == (2, 1)
    assert sy.to_exact(0.375) == sp.Rational(3, 8)
    with pytest.raises(
        ValueError,
        match=r"to_exact takes a scalar, a vector or a matrix, got shape \(1, 2, 2\)",
    ):
        sy.to_exact(np.zeros((1, 2, 2)))


def test_to_float():
    assert sy.to_float(sp.Rational(1, 4)) == 0.25
    out = sy.to_float(sp.Matrix([[sp.log(3), 1]]))
    assert out.dtype == np.float64 and out.shape == (1, 2)
    assert_allclose(out, [[np.log(3.0), 1.0]], rtol=TIGHT)
