import numpy as np
import pytest
from numpy.testing import assert_allclose

from attncourse import STEPS, TOLERANCE, compare, gradcheck, numerical_gradient


def test_fixed_steps_and_tolerance():
    assert STEPS == (1e-5, 1e-6) and TOLERANCE == 1e-7


def test_numerical_gradient_of_a_cubic_visits_every_coordinate():
    x = np.random.default_rng(0).normal(size=(3, 4))
    f = lambda x: float(np.sum(x ** 3))
    # central differences of a cubic are off by exactly h^2 per coordinate
    assert_allclose(numerical_gradient(f, x, 1e-3), 3 * x ** 2 + 1e-6, rtol=1e-8, atol=1e-8)


def test_numerical_gradient_leaves_its_input_alone():
    x = np.arange(6.0).reshape(2, 3)
    before = x.copy()
    numerical_gradient(lambda x: float(np.sum(x ** 2)), x, 1e-5)
    assert np.array_equal(x, before)


def test_gradcheck_passes_true_gradients_and_catches_wrong_ones():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    C = rng.normal(size=(3, 2))
    f = lambda A, B: float(np.sum((A @ B) * C))
    good = {"A": C @ B.T, "B": A.T @ C}
    assert gradcheck(f, {"A": A, "B": B}, good).passed
    # fault controls: a sign error, a single wrong coordinate, a transposed factor
    one_off = good["A"].copy()
    one_off[2, 3] += 1e-5
    for wrong in ({"A": -good["A"]}, {"A": one_off}, {"B": (C.T @ A).T * 1.5}):
        report = gradcheck(f, {"A": A, "B": B}, wrong)
        assert not report.passed and report.worst > TOLERANCE


def test_report_lists_every_input_and_step():
    f = lambda a: float(np.sum(a ** 2))
    report = gradcheck(f, {"a": np.ones(3)}, {"a": 2 * np.ones(3)})
    assert set(report.errors) == {("a", 1e-5), ("a", 1e-6)}
    assert "passed" in str(report)


def test_gradcheck_rejects_a_gradient_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"gradient for a has shape \(3, 1\), input has \(3,\)"):
        gradcheck(lambda a: float(a.sum()), {"a": np.ones(3)}, {"a": np.ones((3, 1))})


def test_compare_says_exact_approximate_or_wrong():
    x = np.array([0.1, 0.2])
    assert "exact: True" in compare("x", x, x.copy())
    line = compare("x", x + 1e-14, x)
    assert "exact: False" in line and "approximate: True" in line
    assert "approximate: False" in compare("x", x + 1e-3, x)
