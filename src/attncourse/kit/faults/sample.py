"""Planted mistakes in :mod:`attncourse.sample`, with their registry.

Each fault is a sampler pair ``(probabilities, sample)`` with the signatures of
:func:`attncourse.sample.probabilities` and :func:`attncourse.sample.sample`: the
distribution the wrong sampler draws from, and the wrong sampler itself. The exact
checks compare the first with formulas worked out by hand on hand-made logits; the
draws check compares many draws of the second with the same formulas by
:func:`~attncourse.kit.sampling.assert_draws_match` (false-alarm rate ``1e-6``,
fixed in advance, and enough draws that each fault's shift exceeds twice the bound).
:data:`FAULTS` says which of :data:`CHECKS` catch each one and which are blind to it;
:data:`CORRECT` holds the package pair every check must pass.

>>> z = np.log([1.0, 2.0, 3.0, 4.0])
>>> temperature_after_softmax(z, temperature=0.5)  # T has no effect: softmax(z)
array([0.1, 0.2, 0.3, 0.4])
>>> probabilities(z, temperature=0.5) * 30         # the right one: softmax(z / T)
array([ 1.,  4.,  9., 16.])
"""

import numpy as np

from ...sample import draw, probabilities, sample
from ...softmax import softmax
from ..exercises import check_top_k
from ..sampling import assert_draws_match
from ..failed import CheckFailed
from ._registry import Check, Fault, learner_checker, require_close

__all__ = [
    "FAULTS",
    "CHECKS",
    "CORRECT",
    "BUILDING_BLOCKS",
    "temperature_after_softmax",
    "sample_temperature_after_softmax",
    "top_k_not_renormalised",
    "sample_top_k_not_renormalised",
    "top_p_off_by_one",
    "sample_top_p_off_by_one",
    "probabilities_from_logits",
    "sample_from_logits",
]


def _cut(p, top_k, top_p):
    """The package's top-k and top-p cuts applied to the distribution ``p``."""
    with np.errstate(divide="ignore"):  # log 0 = -inf: probability 0 stays 0
        return probabilities(np.log(p), top_k=top_k, top_p=top_p)


def temperature_after_softmax(logits, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: the temperature divides the probabilities, not the logits.

    ``softmax(z) / T``, renormalised, is ``softmax(z)`` again: the ``T`` cancels, so for
    every ``T > 0`` it draws from the untempered softmax: no sharpening below 1, no
    flattening above 1. Right at ``T = 1`` (and at ``T = 0``, which stays greedy);
    the cuts are the package's.

    >>> temperature_after_softmax(np.log([1.0, 3.0]), temperature=2.0)
    array([0.25, 0.75])
    """
    if temperature == 0:
        return probabilities(logits, temperature=0, top_k=top_k, top_p=top_p)
    p = softmax(np.asarray(logits, dtype=np.float64)) / temperature
    return _cut(p / p.sum(axis=-1, keepdims=True), top_k, top_p)


def sample_temperature_after_softmax(logits, rng, *, temperature=1.0, top_k=None,
                                     top_p=None):
    """FAULT: draws from :func:`temperature_after_softmax` by the package's inverse CDF.

    >>> sample_temperature_after_softmax(np.zeros((1, 3)), np.random.default_rng(0))
    array([1])
    """
    return draw(temperature_after_softmax(logits, temperature=temperature, top_k=top_k,
                                          top_p=top_p), rng)


def top_k_not_renormalised(logits, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: the cut tokens are zeroed, the kept ones are not renormalised.

    Each kept token keeps its probability ``softmax(z / T)_i``, so a row sums to the
    kept mass (less than 1 whenever a token with probability > 0 is cut).

    >>> top_k_not_renormalised(np.log([1.0, 2.0, 3.0, 4.0]), top_k=2)
    array([0. , 0. , 0.3, 0.4])
    """
    p = probabilities(logits, temperature=temperature)
    kept = probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p) > 0
    return np.where(kept, p, 0.0)


def sample_top_k_not_renormalised(logits, rng, *, temperature=1.0, top_k=None,
                                  top_p=None):
    """FAULT: inverse CDF on :func:`top_k_not_renormalised`, clipped to the last id.

    A uniform ``u`` at or beyond the kept mass runs past the end of the cumulative sum
    and is clipped to the last token id, ``n_vocab - 1``: that token (usually one the
    cut removed) gets all the missing mass.

    >>> z = np.log([[4.0, 3.0, 2.0, 1.0]])
    >>> sample_top_k_not_renormalised(z, np.random.default_rng(0), top_k=1)  # u = 0.64
    array([3])
    """
    P = top_k_not_renormalised(logits, temperature=temperature, top_k=top_k,
                               top_p=top_p)
    F = np.cumsum(P, axis=-1)
    u = rng.random(P.shape[:-1])
    token = np.sum(F <= np.asarray(u)[..., None], axis=-1)
    return np.minimum(token, P.shape[-1] - 1).astype(np.int64)


def top_p_off_by_one(logits, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: the top-p cut drops the token that crosses ``p``.

    Removes every token whose cumulative probability *including itself* exceeds ``p``
    (the mask not shifted by one), keeping the most probable always: it keeps the
    largest prefix with sum ``<= p`` instead of the smallest with sum ``>= p``, one
    token too few unless the sum lands on ``p`` exactly.

    >>> z = np.log([1.0, 2.0, 3.0, 4.0])
    >>> top_p_off_by_one(z, top_p=0.6), probabilities(z, top_p=0.6) * 7
    (array([0., 0., 0., 1.]), array([0., 0., 3., 4.]))
    """
    p = probabilities(logits, temperature=temperature, top_k=top_k)
    if top_p is None:
        return p
    order = np.argsort(-p, axis=-1, kind="stable")
    cumulative = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    keep_sorted = cumulative <= top_p
    keep_sorted[..., 0] = True
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def sample_top_p_off_by_one(logits, rng, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: draws from :func:`top_p_off_by_one` by the package's inverse CDF.

    >>> z = np.log([[1.0, 2.0, 3.0, 4.0]])
    >>> sample_top_p_off_by_one(z, np.random.default_rng(0), top_p=0.6)
    array([3])
    """
    return draw(top_p_off_by_one(logits, temperature=temperature, top_k=top_k,
                                 top_p=top_p), rng)


def probabilities_from_logits(logits, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: logits used as unnormalised probabilities: ``max(z / T, 0)``, normalised.

    Negative logits get probability 0 and the others weights proportional to their
    value, not to ``exp``; the temperature cancels (a scale). A row with no positive
    logit falls back to its argmax. ``T = 0`` stays greedy; the cuts are the package's.

    >>> probabilities_from_logits(np.array([-1.0, 1.0, 3.0]))
    array([0.  , 0.25, 0.75])
    """
    if temperature == 0:
        return probabilities(logits, temperature=0, top_k=top_k, top_p=top_p)
    z = np.asarray(logits, dtype=np.float64)
    w = np.maximum(z / temperature, 0.0)
    total = w.sum(axis=-1, keepdims=True)
    argmax = np.eye(z.shape[-1])[np.argmax(z, axis=-1)]
    p = np.where(total > 0, w / np.where(total > 0, total, 1.0), argmax)
    return _cut(p, top_k, top_p)


def sample_from_logits(logits, rng, *, temperature=1.0, top_k=None, top_p=None):
    """FAULT: draws from :func:`probabilities_from_logits` by the package's inverse CDF.

    >>> sample_from_logits(np.array([[-1.0, 0.0, 2.0]]), np.random.default_rng(0))
    array([2])
    """
    return draw(probabilities_from_logits(logits, temperature=temperature, top_k=top_k,
                                          top_p=top_p), rng)


# --- the registry ---------------------------------------------------------------------

Z4 = np.log([1.0, 2.0, 3.0, 4.0])
"""``softmax(Z4) = [0.1, 0.2, 0.3, 0.4]``, and ``softmax(Z4 / T)`` is proportional to
``[1, 2, 3, 4] ** (1 / T)``."""

Z_TIES = np.log([2.0, 1.0, 4.0, 2.0, 2.0])
"""``softmax = [2, 1, 4, 2, 2] / 11``: three tokens tie at the second place."""

Z_COMBINED = 2.0 * np.log([1.0, 2.0, 3.0, 4.0, 6.0])
"""At ``T = 2``: ``[1, 2, 3, 4, 6] / 16``; top-3 keeps ``[3, 4, 6] / 13``; top-p 0.7
then keeps ``6/13`` and ``4/13`` (sum ``10/13 >= 0.7``): ``[0, 0, 0, 0.4, 0.6]``."""

CASES = (
    ("T = 1", Z4, {}, [0.1, 0.2, 0.3, 0.4]),
    ("T = 1/2", Z4, {"temperature": 0.5}, np.array([1.0, 4.0, 9.0, 16.0]) / 30),
    ("T = 2", Z4, {"temperature": 2.0}, np.sqrt([1.0, 2.0, 3.0, 4.0])
     / np.sqrt([1.0, 2.0, 3.0, 4.0]).sum()),
    ("T = 0, a tie", np.array([1.0, 3.0, 3.0, 0.0]), {"temperature": 0.0},
     [0.0, 1.0, 0.0, 0.0]),
    ("top-k 1", Z_TIES, {"top_k": 1}, [0.0, 0.0, 1.0, 0.0, 0.0]),
    ("top-k 2, a tie", Z_TIES, {"top_k": 2}, np.array([2.0, 0, 4, 0, 0]) / 6),
    ("top-k 4, a tie", Z_TIES, {"top_k": 4}, np.array([2.0, 0, 4, 2, 2]) / 10),
    ("top-k 9 > n_vocab", Z_TIES, {"top_k": 9}, np.array([2.0, 1, 4, 2, 2]) / 11),
    ("top-p 0.3", Z4, {"top_p": 0.3}, [0.0, 0.0, 0.0, 1.0]),
    ("top-p 0.6", Z4, {"top_p": 0.6}, np.array([0.0, 0, 3, 4]) / 7),
    ("top-p 0.7, reached exactly", Z4, {"top_p": 0.7}, np.array([0.0, 0, 3, 4]) / 7),
    ("top-p 0.95", Z4, {"top_p": 0.95}, [0.1, 0.2, 0.3, 0.4]),
    ("T = 2, top-k 3, top-p 0.7", Z_COMBINED,
     {"temperature": 2.0, "top_k": 3, "top_p": 0.7}, [0.0, 0.0, 0.0, 0.4, 0.6]),
)
"""(name, logits, settings, the distribution worked out by hand)."""

DRAWN = ("T = 1", "T = 1/2", "top-k 2, a tie", "top-p 0.6",
         "T = 2, top-k 3, top-p 0.7")
"""The cases the draws check samples: each fault shifts one of them by >= 0.1."""

N_DRAWS = 50_000
"""Draws per case: ``eps = frequency_bound(50_000, 5, 1e-6) = 0.0127``, so any shift
above ``2 eps = 0.025`` is caught with probability >= ``1 - 1e-6``."""

ALPHA = 1e-6
"""The false-alarm rate of the draws check, fixed before drawing."""


def _exact(check, names):
    """The exact check ``check`` of the cases ``names``: each distribution to 1e-12."""
    def run(pair):
        probabilities_fn, _ = pair
        for name, z, settings, expected in CASES:
            if name in names:
                require_close(check, f"the distribution for {name}",
                              probabilities_fn(z, **settings), expected)
    return run


def _batch(pair):
    """Random logits with -inf entries, under every setting: >= 0, rows sum to one."""
    probabilities_fn, _ = pair
    rng = np.random.default_rng(21)
    z = 3.0 * rng.normal(size=(2, 3, 9))
    z[0, 1, [2, 5]] = -np.inf
    for settings in ({}, {"temperature": 0.7}, {"top_k": 3}, {"top_p": 0.5},
                     {"temperature": 1.5, "top_k": 5, "top_p": 0.8}):
        P = np.asarray(probabilities_fn(z, **settings), dtype=np.float64)
        require_close("rows sum to one", f"the row sums for {settings}",
                      P.sum(axis=-1), np.ones(z.shape[:-1]))
        if not np.all(P >= 0):
            raise CheckFailed("rows sum to one",
                              f"a probability below 0 for {settings}",
                              "take the softmax of the tempered logits")


def _draws(pair):
    """``N_DRAWS`` draws for each case of ``DRAWN`` against the hand-made answer."""
    _, sample_fn = pair
    for seed, (name, z, settings, expected) in enumerate(
            case for case in CASES if case[0] in DRAWN):
        rows = np.broadcast_to(z, (N_DRAWS, z.size))
        ids = sample_fn(rows, np.random.default_rng(seed), **settings)
        assert_draws_match(ids, np.asarray(expected), alpha=ALPHA)


def _learner(pair):
    """The learner's top-k checker on ``probabilities(logits, top_k=k)``."""
    probabilities_fn, _ = pair
    learner_checker("learner checker (top-k)", check_top_k,
                    lambda logits, k: probabilities_fn(logits, top_k=k))


ROLE = "sampler pair"

EXACT = {
    "exact: T = 1": ("T = 1",),
    "exact: T": ("T = 1/2", "T = 2", "T = 0, a tie"),
    "exact: top-k": ("top-k 1", "top-k 2, a tie", "top-k 4, a tie",
                     "top-k 9 > n_vocab"),
    "exact: top-p": ("top-p 0.3", "top-p 0.6", "top-p 0.7, reached exactly",
                     "top-p 0.95"),
    "exact: combined": ("T = 2, top-k 3, top-p 0.7",),
}
"""Exact check -> the cases of ``CASES`` it compares, within 1e-12."""

CHECKS = {c.name: c for c in tuple(
    Check(name, ROLE, _exact(name, cases)) for name, cases in EXACT.items()) + (
    Check("rows sum to one", ROLE, _batch),
    Check("draws match (alpha 1e-6)", ROLE, _draws),
    Check("learner checker (top-k)", ROLE, _learner),
)}
"""Check name -> :class:`~attncourse.kit.faults.Check`."""

FAULTS = (
    Fault("temperature_after_softmax",
          "softmax(z)/T renormalised = softmax(z): T > 0 has no effect",
          (temperature_after_softmax, sample_temperature_after_softmax), ROLE,
          caught_by=("exact: T", "exact: combined", "draws match (alpha 1e-6)"),
          blind=("exact: T = 1", "exact: top-k", "exact: top-p", "rows sum to one",
                 "learner checker (top-k)")),
    Fault("top_k_not_renormalised",
          "cut tokens zeroed, kept ones not renormalised: rows sum to < 1",
          (top_k_not_renormalised, sample_top_k_not_renormalised), ROLE,
          caught_by=("exact: top-k", "exact: top-p", "exact: combined",
                     "rows sum to one", "draws match (alpha 1e-6)",
                     "learner checker (top-k)"),
          blind=("exact: T = 1", "exact: T")),
    Fault("top_p_off_by_one",
          "top-p drops the token crossing p: sum <= p kept, not >= p",
          (top_p_off_by_one, sample_top_p_off_by_one), ROLE,
          caught_by=("exact: top-p", "exact: combined", "draws match (alpha 1e-6)"),
          blind=("exact: T = 1", "exact: T", "exact: top-k", "rows sum to one",
                 "learner checker (top-k)")),
    Fault("sample_from_logits",
          "max(z/T, 0) normalised used as the distribution, not softmax",
          (probabilities_from_logits, sample_from_logits), ROLE,
          caught_by=("exact: T = 1", "exact: T", "exact: top-k", "exact: top-p",
                     "exact: combined", "draws match (alpha 1e-6)",
                     "learner checker (top-k)"),
          blind=("rows sum to one",)),
)
"""The planted mistakes: the checks that catch each one, and those blind to it."""

CORRECT = {ROLE: (probabilities, sample)}
"""Role -> the package pair: every check must pass it."""

BUILDING_BLOCKS = {}
"""Public functions that are not faults themselves -> the fault they are part of."""
