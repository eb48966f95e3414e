"""Tests of attncourse.sample: the exact distribution of each sampler, draws that match
it (a bound fixed before drawing), reproducibility, bad input and generation."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attncourse.kit.faults import sample as fsample
from attncourse.model import ModelConfig, init_model, model_forward
from attncourse.sample import (TOP_P_TOLERANCE, draw, generate, greedy, probabilities,
                               sample)
from attncourse.softmax import softmax
from attncourse.kit import CheckFailed
from attncourse.kit.sampling import assert_draws_match, frequency_bound

ALPHA = 1e-6  # the false-alarm rate of every draws test, fixed before drawing
N = 50_000  # eps = frequency_bound(N, m, ALPHA) is at most 0.0135 for m <= 8
Z4 = np.log([1.0, 2.0, 3.0, 4.0])  # softmax: [0.1, 0.2, 0.3, 0.4]


def logits(seed, shape=(4, 9), scale=2.0):
    return scale * np.random.default_rng(seed).normal(size=shape)


def draws(z, seed, n=N, **settings):
    """``n`` draws from the one distribution of the logits row ``z``."""
    return sample(np.broadcast_to(z, (n, z.shape[-1])), np.random.default_rng(seed),
                  **settings)


# --- temperature ----------------------------------------------------------------------


def test_temperature_one_is_the_softmax():
    z = logits(0, (2, 3, 9))
    assert_allclose(probabilities(z), softmax(z), rtol=1e-15, atol=1e-16)
    assert_allclose(probabilities(Z4), [0.1, 0.2, 0.3, 0.4], rtol=1e-14)


@pytest.mark.parametrize("T", [0.25, 0.5, 2.0, 7.0])
def test_temperature_divides_the_logits(T):
    z = logits(1)
    assert_allclose(probabilities(z, temperature=T), softmax(z / T), rtol=1e-13,
                    atol=1e-300)
    # on Z4 the tempered distribution is proportional to [1, 2, 3, 4] ** (1 / T)
    w = np.array([1.0, 2.0, 3.0, 4.0]) ** (1 / T)
    assert_allclose(probabilities(Z4, temperature=T), w / w.sum(), rtol=1e-13)


def test_temperature_zero_is_greedy_with_the_lowest_id_on_ties():
    z = np.array([[0.5, 2.0, 2.0, -np.inf], [-1.0, -3.0, -2.0, -1.0]])
    assert_array_equal(probabilities(z, temperature=0), [[0, 1, 0, 0], [1, 0, 0, 0]])
    assert_array_equal(greedy(z), [1, 0])
    assert_array_equal(sample(z, np.random.default_rng(5), temperature=0), [1, 0])


def test_a_small_temperature_approaches_the_greedy_one_hot():
    z = logits(2)
    one_hot = probabilities(z, temperature=0)
    assert np.abs(probabilities(z, temperature=1e-3) - one_hot).max() < 1e-12
    gap = np.abs(probabilities(z, temperature=0.5) - one_hot).max()
    assert gap > 1e-3  # not yet greedy at T = 1/2: the limit is approached, not reached
    # a tiny temperature sends far-off logits to exp(-inf) = 0 without any warning
    far = np.array([1e300, -1e300, 0.0, 1e300 * (1 - 1e-15)])
    assert_array_equal(probabilities(far, temperature=1e-300), [1, 0, 0, 0])


def test_a_large_temperature_approaches_uniform():
    P = probabilities(logits(3), temperature=1e6)
    assert np.abs(P - 1 / 9).max() < 1e-5


# --- top-k ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_top_k_keeps_exactly_the_k_largest_and_renormalises(k):
    z = logits(4, (6, 9))
    P = probabilities(z, top_k=k)
    assert_array_equal((P > 0).sum(axis=-1), k)
    largest = np.argsort(-z, axis=-1)[:, :k]
    assert_array_equal(np.sort(np.flatnonzero(P[0])), np.sort(largest[0]))
    kept = np.take_along_axis(softmax(z), largest, axis=-1)
    assert_allclose(np.take_along_axis(P, largest, axis=-1),
                    kept / kept.sum(axis=-1, keepdims=True), rtol=1e-13)
    assert_allclose(P.sum(axis=-1), 1.0, rtol=0, atol=1e-15)


def test_top_k_at_or_beyond_the_vocabulary_keeps_every_token():
    z = logits(5)
    assert_array_equal(probabilities(z, top_k=9), probabilities(z))
    assert_array_equal(probabilities(z, top_k=10**6), probabilities(z))


def test_top_k_breaks_ties_at_the_kth_place_by_the_lowest_id():
    z = np.log([2.0, 1.0, 4.0, 2.0, 2.0])
    assert_allclose(probabilities(z, top_k=2), np.array([2, 0, 4, 0, 0]) / 6,
                    rtol=1e-14)
    assert_allclose(probabilities(z, top_k=3), np.array([2, 0, 4, 2, 0]) / 8,
                    rtol=1e-14)
    assert_array_equal(probabilities(np.zeros(6), top_k=4), [0.25] * 4 + [0, 0])


def test_a_minus_inf_logit_gets_probability_zero_and_is_never_drawn():
    z = np.array([0.0, -np.inf, 1.0, -np.inf])
    P = probabilities(z, top_k=3)  # the third kept token has probability 0
    assert P[1] == 0 and P[3] == 0
    assert_allclose(P, softmax(z), rtol=1e-15)
    assert not np.isin(draws(z, 0, n=5000, top_k=3), [1, 3]).any()


# --- top-p ----------------------------------------------------------------------------


@pytest.mark.parametrize("p, expected", [
    (0.05, [0, 0, 0, 1]),  # the most probable is always kept
    (0.4, [0, 0, 0, 1]),  # reached exactly by the first token
    (0.6, np.array([0, 0, 3, 4]) / 7),
    (0.7, np.array([0, 0, 3, 4]) / 7),  # 0.4 + 0.3 reaches 0.7 (within the tolerance)
    (0.71, np.array([0, 2, 3, 4]) / 9),
    (1.0, [0.1, 0.2, 0.3, 0.4]),
])
def test_top_p_keeps_the_smallest_prefix_reaching_p(p, expected):
    assert_allclose(probabilities(Z4, top_p=p), expected, rtol=1e-14, atol=1e-300)


def test_top_p_tolerance_is_1e_12():
    P = probabilities(Z4)
    reached = P[3] + P[2]  # the two most probable
    assert TOP_P_TOLERANCE == 1e-12
    assert (probabilities(Z4, top_p=reached + 0.5e-12) > 0).sum() == 2  # within it
    assert (probabilities(Z4, top_p=reached + 1e-9) > 0).sum() == 3  # beyond it


@pytest.mark.parametrize("seed", range(4))
def test_top_p_is_minimal_on_random_logits(seed):
    z = logits(seed, (5, 11))
    p = np.random.default_rng(seed).uniform(0.05, 1.0)
    P, full = probabilities(z, top_p=p), softmax(z)
    kept = P > 0
    mass = np.where(kept, full, 0.0).sum(axis=-1)
    assert np.all(mass >= p - TOP_P_TOLERANCE)  # the kept tokens reach p ...
    smallest = np.where(kept, full, np.inf).min(axis=-1)
    assert np.all(mass - smallest < p - TOP_P_TOLERANCE)  # ... and are the fewest
    assert np.all(np.where(kept, full, 1.0).min(axis=-1)  # the most probable come first
                  >= np.where(kept, 0.0, full).max(axis=-1))
    assert_allclose(P[kept], (full / mass[:, None])[kept], rtol=1e-13)


# --- the order: temperature, top-k, top-p, renormalise --------------------------------


def test_the_combination_is_temperature_then_top_k_then_top_p():
    z = 2.0 * np.log([1.0, 2.0, 3.0, 4.0, 6.0])
    # T = 2: [1, 2, 3, 4, 6] / 16; top-3: [3, 4, 6] / 13; top-p 0.7: 6/13 + 4/13 >= 0.7
    P = probabilities(z, temperature=2.0, top_k=3, top_p=0.7)
    assert_allclose(P, [0, 0, 0, 0.4, 0.6], rtol=1e-14, atol=1e-300)
    # top-p before top-k would give another answer: 6/16 + 4/16 + 3/16 reaches 0.7
    assert_allclose(probabilities(z, temperature=2.0, top_p=0.7),
                    np.array([0, 0, 3, 4, 6]) / 13, rtol=1e-14, atol=1e-300)


def test_leading_batch_axes_broadcast_row_by_row():
    z = logits(6, (2, 3, 7))
    P = probabilities(z, temperature=0.8, top_k=4, top_p=0.9)
    for index in np.ndindex(2, 3):
        assert_array_equal(P[index], probabilities(z[index], temperature=0.8, top_k=4,
                                                   top_p=0.9))
    assert sample(z, np.random.default_rng(0)).shape == (2, 3)
    assert greedy(z).shape == (2, 3)


# --- draws match the exact distribution (bound fixed before drawing) ------------------


@pytest.mark.parametrize("settings", [
    {}, {"temperature": 0.5}, {"temperature": 3.0}, {"top_k": 3}, {"top_p": 0.8},
    {"temperature": 1.5, "top_k": 5, "top_p": 0.9},
], ids=str)
def test_draws_match_the_exact_distribution(settings):
    z = logits(7, (8,), scale=1.0)
    report = assert_draws_match(draws(z, 11, **settings),
                                probabilities(z, **settings), alpha=ALPHA)
    assert report.n_draws == N and report.max_gap < report.eps < 0.014


def test_greedy_draws_are_all_the_argmax():
    z = logits(8, (6,))
    ids = draws(z, 0, n=1000, temperature=0)
    assert_array_equal(ids, np.argmax(z))


def test_every_planted_fault_shifts_a_drawn_case_by_more_than_twice_the_bound():
    cases = [case for case in fsample.CASES if case[0] in fsample.DRAWN]
    for fault in fsample.FAULTS:
        wrong, _ = fault.function
        shifts = []
        for name, z, settings, expected in cases:
            P = wrong(z, **settings)
            if fault.name == "top_k_not_renormalised":  # clipped to the last id
                P = P.copy()
                P[..., -1] += 1.0 - P.sum()
            shifts.append(np.abs(P - expected).max())
        bound = frequency_bound(fsample.N_DRAWS, 5, fsample.ALPHA)
        assert max(shifts) > 2 * bound > 0, fault.name
        assert max(shifts) >= 0.1, fault.name


@pytest.mark.parametrize("fault", fsample.FAULTS, ids=lambda f: f.name)
def test_the_draws_check_catches_each_fault_and_passes_the_package(fault):
    check = fsample.CHECKS["draws match (alpha 1e-6)"]
    with pytest.raises(CheckFailed, match="distribution"):
        check.run(fault.function)
    assert check.run(fsample.CORRECT[fault.imitates]) is None


def test_the_temperature_fault_ignores_the_temperature():
    z = logits(9)
    for T in (0.3, 1.0, 4.0):
        assert_allclose(fsample.temperature_after_softmax(z, temperature=T), softmax(z),
                        rtol=1e-14)
    assert np.abs(probabilities(z, temperature=0.3) - softmax(z)).max() > 0.1


def test_the_top_k_fault_sampler_sends_the_missing_mass_to_the_last_id():
    z = np.log([[4.0, 3.0, 2.0, 1.0]])  # top-1 keeps 0.4; 0.6 of the draws fall off
    ids = fsample.sample_top_k_not_renormalised(np.repeat(z, 20_000, axis=0),
                                                np.random.default_rng(0), top_k=1)
    assert set(np.unique(ids)) == {0, 3}
    report_wrong = np.mean(ids == 3)
    assert abs(report_wrong - 0.6) < frequency_bound(20_000, 4, ALPHA)


# --- reproducibility and the draw -----------------------------------------------------


def test_the_same_seed_gives_the_same_ids_and_different_seeds_differ():
    z = logits(10, (500, 9))
    a = sample(z, np.random.default_rng(1), top_k=6)
    assert_array_equal(a, sample(z, np.random.default_rng(1), top_k=6))
    assert not np.array_equal(a, sample(z, np.random.default_rng(2), top_k=6))


def test_sample_uses_one_uniform_per_row_by_the_stated_inverse_cdf():
    z = logits(11, (3, 5, 9))
    rng = np.random.default_rng(4)
    ids = sample(z, rng, temperature=0.7)
    replay = np.random.default_rng(4)
    u = replay.random((3, 5))
    F = np.cumsum(probabilities(z, temperature=0.7), axis=-1)
    assert_array_equal(ids, np.argmax(F / F[..., -1:] > u[..., None], axis=-1))
    assert rng.random() == replay.random()  # exactly 15 uniforms were used


def test_draw_never_returns_a_token_of_probability_zero():
    P = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    ids = draw(np.broadcast_to(P, (20_000, 5)), np.random.default_rng(0))
    assert set(np.unique(ids)) == {1, 3}


@pytest.mark.parametrize("P, match", [
    (np.array([0.5, 0.6]), r"^P must hold probabilities \(>= 0, each row summing to 1 "
                           r"within 1e-9\); got shape \(2,\) with row sums from 1.1 to "
                           r"1.1$"),
    (np.array([1.5, -0.5]), r"P must hold probabilities \(>= 0"),
    (np.zeros((2, 0)),
     r"^P must have shape \(\.\.\., n_vocab\) with n_vocab >= 1, got shape \(2, 0\)$"),
])
def test_draw_rejects_what_is_not_a_distribution(P, match):
    with pytest.raises(ValueError, match=match):
        draw(P, np.random.default_rng(0))


def test_zero_rows_draw_zero_ids_and_no_uniform():
    rng, replay = np.random.default_rng(4), np.random.default_rng(4)
    ids = draw(np.empty((2, 0, 3)), rng)
    assert ids.shape == (2, 0) and ids.dtype == np.int64
    ids = sample(np.zeros((0, 5)), rng, temperature=0.5, top_k=2, top_p=0.5)
    assert ids.shape == (0,) and ids.dtype == np.int64
    assert rng.random() == replay.random()  # no row, no uniform drawn


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("settings, match", [
    ({"temperature": -0.5},
     r"^temperature must be a finite number in \[0, inf\), got -0.5$"),
    ({"temperature": np.nan}, "temperature must be .* got nan"),
    ({"temperature": np.inf}, "temperature must be .* got inf"),
    ({"temperature": "1"}, "temperature must be .* got '1'"),
    ({"temperature": True}, "temperature must be .* got True"),
    ({"top_k": 0}, r"^top_k must be None or an integer in \[1, inf\), got 0$"),
    ({"top_k": 2.0}, "top_k must be .* got 2.0"),
    ({"top_k": True}, "top_k must be .* got True"),
    ({"top_p": 0.0}, r"^top_p must be None or a finite number in \(0, 1\], got 0.0$"),
    ({"top_p": 1.01}, "top_p must be .* got 1.01"),
    ({"top_p": np.nan}, "top_p must be .* got nan"),
])
def test_bad_settings_raise_a_value_error_naming_them(settings, match):
    def drawn(z, **kw):
        return sample(z, np.random.default_rng(0), **kw)

    for fn in (probabilities, drawn):
        with pytest.raises(ValueError, match=match):
            fn(Z4, **settings)


@pytest.mark.parametrize("z, match", [
    (np.array([1.0, np.nan, 0.0]),
     r"^logits must not hold NaN: 1 NaN entries in logits of shape \(3,\)$"),
    (np.array([1.0, np.inf]), r"^logits must not hold \+inf: 1 \+inf entries"),
    (np.array([[0.0, 1.0], [-np.inf, -np.inf]]), r"row \(1,\) .* is all -inf"),
    (np.where(np.isin(np.arange(6).reshape(2, 3, 1), [1, 5]), -np.inf,
              np.zeros((2, 3, 4))),
     r"^logits must have a finite entry in every row; row \(0, 1\) of logits of shape "
     r"\(2, 3, 4\) is all -inf$"),
    (np.zeros((3, 0)),
     r"^logits must have shape \(\.\.\., n_vocab\) with n_vocab >= 1, got shape "
     r"\(3, 0\)$"),
    (np.float64(1.0), r"got shape \(\)"),
    (np.array(["a", "b"]), "logits must be an array of real numbers, got dtype <U1"),
    (np.array([1 + 2j, 0j]), "real numbers, got dtype complex128"),
])
def test_bad_logits_raise_a_value_error(z, match):
    for fn in (probabilities, greedy, lambda z: sample(z, np.random.default_rng(0))):
        with pytest.raises(ValueError, match=match):
            fn(z)


@pytest.mark.parametrize("rng", [0, None, np.random.RandomState(0)])
def test_sample_needs_a_generator(rng):
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        sample(Z4, rng)


def test_integer_and_float32_logits_give_float64_probabilities():
    assert probabilities(np.array([1, 2, 3])).dtype == np.float64
    P32 = probabilities(Z4.astype(np.float32))
    assert P32.dtype == np.float64
    assert_allclose(P32, [0.1, 0.2, 0.3, 0.4], rtol=1e-6)


def test_the_logits_are_left_untouched():
    z = logits(12)
    before = z.copy()
    probabilities(z, temperature=0.5, top_k=3, top_p=0.5)
    sample(z, np.random.default_rng(0), top_k=2)
    assert_array_equal(z, before)


# --- generate -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    config = ModelConfig(n_vocab=11, T_max=6, D=8, heads=2, layers=2, ratio=2)
    return config, init_model(config, seed=3, std=0.5)


def test_generate_keeps_the_prompt_and_adds_n_new_tokens(model):
    config, params = model
    prompt = np.array([3, 1, 4])
    out = generate(params, prompt, 5, config=config, rng=np.random.default_rng(0))
    assert out.shape == (8,) and out.dtype == np.int64
    assert_array_equal(out[:3], prompt)
    assert np.all((0 <= out) & (out < config.n_vocab))
    batch = np.array([[3, 1], [5, 9], [2, 6]])
    out = generate(params, batch, 4, config=config, rng=np.random.default_rng(0))
    assert out.shape == (3, 6)
    assert_array_equal(out[:, :2], batch)
    assert_array_equal(generate(params, prompt, 0, config=config,
                                rng=np.random.default_rng(0)), prompt)


def test_generate_samples_each_step_from_the_last_position_of_the_window(model):
    config, params = model
    prompt = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    out = generate(params, prompt, 4, config=config, rng=np.random.default_rng(7),
                   temperature=0.9, top_k=5)
    rng, ids = np.random.default_rng(7), prompt
    for _ in range(4):  # the loop written out, with the window of the last T_max tokens
        logits, _ = model_forward(params, ids[:, -config.T_max:], config=config)
        new = sample(logits[:, -1], rng, temperature=0.9, top_k=5)
        ids = np.concatenate([ids, new[:, None]], axis=1)
    assert_array_equal(out, ids)


def test_generate_crops_a_prompt_longer_than_the_window(model):
    config, params = model
    long = np.random.default_rng(1).integers(0, config.n_vocab, size=15)  # > T_max = 6
    out = generate(params, long, 5, config=config, rng=np.random.default_rng(2))
    tail = generate(params, long[-config.T_max:], 5, config=config,
                    rng=np.random.default_rng(2))
    assert out.shape == (20,)
    assert_array_equal(out[:15], long)
    assert_array_equal(out[15:], tail[config.T_max:])  # only the window matters


def test_generate_is_deterministic_given_the_seed_and_greedy_at_temperature_zero(model):
    config, params = model
    prompt = np.array([[2, 7], [7, 2]])

    def run(seed, **kw):
        return generate(params, prompt, 12, config=config,
                        rng=np.random.default_rng(seed), **kw)

    assert_array_equal(run(0), run(0))
    assert not np.array_equal(run(0), run(1))
    assert_array_equal(run(0, temperature=0), run(1, temperature=0))
    ids = prompt
    for _ in range(12):
        logits, _ = model_forward(params, ids[:, -config.T_max:], config=config)
        ids = np.concatenate([ids, greedy(logits[:, -1])[:, None]], axis=1)
    assert_array_equal(run(0, temperature=0), ids)


@pytest.mark.parametrize("prompt, n_new, kw, match", [
    (np.array([], dtype=int), 2, {}, r"^prompt must be token ids of shape \(t,\) or "
                                     r"\(batch, t\) with t >= 1, got shape \(0,\)$"),
    (np.zeros((1, 2, 3), dtype=int), 2, {}, r"got shape \(1, 2, 3\)"),
    (np.array([1, 11]), 2, {}, "prompt out of range for a vocabulary of 11 tokens"),
    (np.array([1.0, 2.0]), 2, {}, "prompt must be integers, got dtype float64"),
    (np.array([1, 2]), -1, {}, "n_new=-1"),
    (np.array([1, 2]), 2, {"temperature": -1.0}, "temperature must be"),
    (np.array([1, 2]), 2, {"top_p": 0}, "top_p must be"),
    (np.array([1, 2]), 2, {"rng": 3}, "rng must be a numpy.random.Generator"),
    (np.array([1, 2]), 2, {"config": "small"}, "config must be a ModelConfig, got str"),
])
def test_generate_rejects_bad_input(model, prompt, n_new, kw, match):
    config, params = model
    kw = {"config": config, "rng": np.random.default_rng(0), **kw}
    with pytest.raises(ValueError, match=match):
        generate(params, prompt, n_new, **kw)


# --- the edges found by mutation testing ----------------------------------------------


class Uniforms(np.random.Generator):
    """A Generator whose ``random`` returns one given uniform for every row."""

    u = 0.0

    def random(self, size=None, dtype=np.float64, out=None):
        return np.full(size, self.u)


def uniforms(u):
    rng = Uniforms(np.random.PCG64(0))
    rng.u = u
    return rng


def test_draw_at_the_extreme_uniforms_picks_the_first_i_with_f_i_above_u():
    # rng.random returns multiples of 2^-53 in [0, 1): 0 and 1 - 2^-53 can both occur
    P = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    assert draw(P, uniforms(0.0)) == 1  # F_0 = 0 is not > 0: id 0 has probability 0
    assert draw(P, uniforms(0.5)) == 3  # F_1 = 0.5 is not > 0.5
    # a row summing to 1 - 5e-10 (accepted) is divided by its sum: F_last = 1 > u
    short = np.array([0.25, 0.75 - 5e-10, 0.0])
    assert draw(short, uniforms(1.0 - 2.0 ** -53)) == 1


def test_draw_checks_the_row_sums_at_the_values_given():
    # three float32 thirds sum to 1 + 3e-8 (float32 arithmetic would round it to 1)
    third = np.float32(1 / 3)
    assert abs(3 * float(third) - 1.0) > 1e-9
    with pytest.raises(ValueError, match=r"P must hold probabilities"):
        draw(np.full(3, third), np.random.default_rng(0))


def test_ties_go_to_the_lowest_ids_in_a_large_vocabulary():
    # large tied groups: an unstable sort (numpy's default) would order them arbitrarily
    z = np.zeros(1000)
    z[::3] = 1.0  # 334 tied maxima
    assert_array_equal(np.flatnonzero(probabilities(z, top_k=50)), np.arange(0, 150, 3))
    q = softmax(z)[0]  # the probability of each maximum
    kept = np.flatnonzero(probabilities(z, top_p=49.5 * q))
    assert_array_equal(kept, np.arange(0, 150, 3))


def test_top_p_stops_at_a_sum_equal_to_p_minus_the_tolerance():
    p = 0.5 + TOP_P_TOLERANCE
    assert p - TOP_P_TOLERANCE == 0.5  # the cut lands exactly on the second sum
    assert_array_equal(probabilities(np.zeros(4), top_p=p), [0.5, 0.5, 0, 0])


def test_a_bad_rng_is_named_by_its_type():
    with pytest.raises(ValueError, match=r"default_rng\(seed\)\), got int$"):
        sample(Z4, 0)


def test_generate_defaults_to_temperature_one_and_passes_top_p_on(model):
    config, params = model
    prompt = np.array([[2, 7], [7, 2]])

    def run(**kw):
        return generate(params, prompt, 12, config=config,
                        rng=np.random.default_rng(0), **kw)

    assert_array_equal(run(), run(temperature=1.0))
    # a tiny top_p keeps only the most probable token: greedy decoding
    assert_array_equal(run(top_p=1e-9), run(temperature=0))
    assert not np.array_equal(run(), run(temperature=0))


@pytest.mark.parametrize("kw, match", [
    ({"top_k": 0}, r"^top_k must be None or an integer in \[1, inf\), got 0$"),
    ({"top_p": 0.0}, r"^top_p must be None or a finite number in \(0, 1\], got 0.0$"),
])
def test_generate_checks_the_settings_even_when_nothing_is_generated(model, kw, match):
    config, params = model
    with pytest.raises(ValueError, match=match):
        generate(params, np.array([1, 2]), 0, config=config,
                 rng=np.random.default_rng(0), **kw)
