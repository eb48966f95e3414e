"""Tests of attncourse.kit.sampling: the Hoeffding + Bonferroni bound, its
false-alarm rate, its power against a shifted distribution, the checks of its input."""

import math

import numpy as np
import pytest

import attncourse as ac
from attncourse import kit
from attncourse.kit import CheckFailed
from attncourse.kit.sampling import DrawsReport, assert_draws_match, frequency_bound

ALPHA = 1e-6


def test_the_bound_is_the_stated_formula():
    assert frequency_bound(20_000, 4, 1e-6) == math.sqrt(math.log(8e6) / 40_000)
    # solving 2 m exp(-2 n eps^2) = alpha for eps gives back alpha
    n, m, alpha = 3000, 7, 0.01
    eps = frequency_bound(n, m, alpha)
    assert math.isclose(2 * m * math.exp(-2 * n * eps**2), alpha, rel_tol=1e-12)


def test_the_bound_shrinks_like_one_over_sqrt_n_and_grows_with_m_and_confidence():
    assert math.isclose(frequency_bound(40_000, 5, ALPHA),
                        frequency_bound(10_000, 5, ALPHA) / 2, rel_tol=1e-14)
    assert frequency_bound(1000, 10, ALPHA) > frequency_bound(1000, 5, ALPHA)
    assert frequency_bound(1000, 5, 1e-9) > frequency_bound(1000, 5, 1e-3)


def test_the_false_alarm_rate_stays_below_alpha():
    # 4000 experiments of n = 300 draws from the right distribution, alpha = 0.05
    p = np.array([0.05, 0.15, 0.3, 0.5])
    rng = np.random.default_rng(0)
    counts = rng.multinomial(300, p, size=4000)
    gaps = np.abs(counts / 300 - p).max(axis=1)
    rate = np.mean(gaps >= frequency_bound(300, 4, 0.05))
    assert rate <= 0.05  # Hoeffding is conservative: the observed rate is far below
    for row in counts[:50]:  # and the check agrees with the formula on the same draws
        draws = np.repeat(np.arange(4), row)
        assert_draws_match(draws, p, alpha=0.05)


def test_a_shift_beyond_twice_the_bound_is_caught():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    n = 20_000
    eps = frequency_bound(n, 4, ALPHA)
    q = p + np.array([2.2, 0, 0, -2.2]) * eps  # shifted by 2.2 eps at two tokens
    for seed in range(5):
        draws = np.random.default_rng(seed).choice(4, size=n, p=q)
        with pytest.raises(CheckFailed) as info:
            assert_draws_match(draws, p, alpha=ALPHA)
        assert info.value.property == "distribution"
        stated = f"eps = {eps:.3g} ({n} draws, 4 outcomes, alpha = 1e-06)"
        assert stated in str(info.value)
        assert_draws_match(draws, q, alpha=ALPHA)  # they do match the shifted one


def test_the_report_names_the_largest_gap_and_its_token():
    P = np.array([0.25, 0.25, 0.5])
    draws = np.array([[0] * 240 + [1] * 260 + [2] * 500])  # any shape
    report = assert_draws_match(draws, P, alpha=ALPHA)
    assert isinstance(report, DrawsReport)
    assert report.token in (0, 1) and math.isclose(report.max_gap, 0.01)
    assert report.n_draws == 1000 and report.eps == frequency_bound(1000, 3, ALPHA)
    np.testing.assert_allclose(report.frequencies, [0.24, 0.26, 0.5])
    assert kit.assert_draws_match is assert_draws_match


def test_a_token_outside_the_distribution_fails_the_check():
    message = r"1 draws are outside the 3 tokens 0..2, e.g. 5"
    with pytest.raises(CheckFailed, match=message):
        assert_draws_match(np.array([0, 1, 5]), np.ones(3) / 3, alpha=ALPHA)


def test_a_token_of_probability_zero_that_is_drawn_often_fails():
    P = np.array([0.5, 0.5, 0.0])
    draws = np.array([0] * 400 + [1] * 400 + [2] * 200)
    message = "token 2 has frequency 0.2 but probability 0"
    with pytest.raises(CheckFailed, match=message):
        assert_draws_match(draws, P, alpha=ALPHA)


@pytest.mark.parametrize("args, match", [
    ((0, 3, 0.1), "n_draws must be an integer >= 1, got 0"),
    ((10.0, 3, 0.1), "n_draws must be an integer >= 1, got 10.0"),
    ((10, 0, 0.1), "n_outcomes must be an integer >= 1, got 0"),
    ((10, 3, 0.0), r"alpha must be a number in \(0, 1\), got 0.0"),
    ((10, 3, 1.0), "alpha must be .* got 1.0"),
    ((10, 3, True), "alpha must be .* got True"),
])
def test_frequency_bound_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        frequency_bound(*args)


@pytest.mark.parametrize("draws, P, alpha, match", [
    (np.array([0, 1]), np.array([0.5, 0.6]), ALPHA, "within 1e-9, got sum 1.1"),
    (np.array([0, 1]), np.array([1.5, -0.5]), ALPHA, "P must be >= 0"),
    (np.array([0, 1]), np.ones((2, 2)) / 4, ALPHA, r"1-D, got shape \(2, 2\)"),
    (np.array([], dtype=int), np.ones(2) / 2, ALPHA, "non-empty array of token ids"),
    (np.array([0.0, 1.0]), np.ones(2) / 2, ALPHA, "got dtype float64"),
    (np.array([0, 1]), np.ones(2) / 2, 2.0, r"alpha must be a number in \(0, 1\)"),
])
def test_assert_draws_match_rejects_bad_input(draws, P, alpha, match):
    with pytest.raises(ValueError, match=match):
        assert_draws_match(draws, P, alpha=alpha)
