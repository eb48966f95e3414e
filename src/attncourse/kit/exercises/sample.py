"""Checkers of Chapter 8's exercises on sampling: top-k and top-p (nucleus)."""

import numpy as np

from ...sample import probabilities
from ..failed import CheckFailed
from ._base import _array, _call, reports_unfinished

__all__ = ["TOP_K_PROPERTIES", "check_top_k", "TOP_P_PROPERTIES", "check_top_p"]


# --- Chapter 8: top-k sampling --------------------------------------------------------

TOP_K_PROPERTIES = (
    "returns probabilities",
    "input untouched",
    "keeps exactly k",
    "the k most probable",
    "renormalised",
    "in proportion to the softmax",
    "ties: the lowest token id",
)


def _top_k_result(fn, logits, k):
    """Call ``fn(logits, k)`` on a copy; check the shape and that the copy is kept."""
    given = logits.copy()
    P = _array(
        _call(fn, "returns probabilities", given, k),
        "returns probabilities",
        dtype=np.float64,
    )
    if P.shape != logits.shape or not np.all(np.isfinite(P)):
        raise CheckFailed(
            "returns probabilities",
            f"for logits of shape {logits.shape} and k={k} it "
            f"returned shape {P.shape}"
            + ("" if P.shape != logits.shape else " with NaN or inf"),
            "return one probability per token, along the last axis",
        )
    if not np.array_equal(given, logits):
        raise CheckFailed(
            "input untouched",
            f"fn changed the logits it was given (k={k})",
            "work on a copy (np.where, or logits.copy())",
        )
    return P


def _in_token_order(P, expected, what):
    """Name a result left in sorted order (the kept probabilities, largest first, not
    moved back to their tokens) under "returns probabilities", before any property
    of the kept set is blamed."""
    ranked = -np.sort(-expected, axis=-1)  # each row's probabilities, largest first
    wrong = ~np.all(np.isclose(P, expected, rtol=1e-12, atol=1e-12), axis=-1)
    as_ranked = np.all(np.isclose(P, ranked, rtol=1e-12, atol=1e-12), axis=-1)
    if np.any(wrong & as_ranked):
        row = int(np.argmax(wrong & as_ranked))
        raise CheckFailed(
            "returns probabilities",
            f"{what}: row {row} holds the right probabilities in sorted order, "
            f"largest first, not at their tokens: token "
            f"{int(np.argmax(expected[row]))} is the most probable, its "
            f"probability sits at position 0",
            "P[..., i] is the probability of token i: put the kept probabilities "
            "back at their tokens (np.put_along_axis(P, order, kept, axis=-1))",
        )


@reports_unfinished
def check_top_k(fn):
    """Check a learner's ``fn(logits, k) -> P``: softmax, keep the top k, renormalise.

    ``logits`` is ``(rows, n_vocab)``; ``P`` must have its shape: in each row exactly
    ``min(k, n_vocab)`` tokens kept, the ``k`` with the largest logits (ties at the
    ``k``-th place: the lowest token ids), their softmax probabilities renormalised to
    sum to one, the other tokens 0, and the logits left unchanged. Compared with
    :func:`attncourse.sample.probabilities` ``(logits, top_k=k)`` within ``1e-12``.
    Returns the names of the properties checked.

    >>> from attncourse.sample import probabilities
    >>> check_top_k(lambda logits, k: probabilities(logits, top_k=k))[:3]
    ('returns probabilities', 'input untouched', 'keeps exactly k')
    >>> check_top_k(lambda logits, k: np.zeros_like(logits))
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: keeps exactly k: k=1: row 0 keeps 0 tokens \
(likely fix: zero all but the k largest logits' tokens, keep exactly k)
    """
    n_vocab = 7
    logits = 2.0 * np.random.default_rng(8).normal(size=(3, n_vocab))  # distinct values
    for k in (1, 3, 6, n_vocab, 10):
        P = _top_k_result(fn, logits, k)
        expected = probabilities(logits, top_k=k)
        _in_token_order(P, expected, f"k={k}")
        kept = P != 0
        counts = kept.sum(axis=-1)
        want = min(k, n_vocab)
        if np.any(counts != want):
            row = int(np.argmax(counts != want))
            raise CheckFailed(
                "keeps exactly k",
                f"k={k}: row {row} keeps {counts[row]} tokens",
                "zero all but the k largest logits' tokens, keep exactly k",
            )
        if np.any(kept != (expected > 0)):
            row = int(np.argmax(np.any(kept != (expected > 0), axis=-1)))
            raise CheckFailed(
                "the k most probable",
                f"k={k}: row {row} keeps tokens "
                f"{np.flatnonzero(kept[row]).tolist()}, the largest "
                f"logits are at {np.flatnonzero(expected[row]).tolist()}",
                "rank by the logits, largest first (np.argsort(-z))",
            )
        sums = P.sum(axis=-1)
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-12):
            raise CheckFailed(
                "renormalised",
                f"k={k}: rows sum to {sums.round(6)}",
                "divide the kept probabilities by their sum",
            )
        if not np.allclose(P, expected, rtol=1e-12, atol=1e-12):
            raise CheckFailed(
                "in proportion to the softmax",
                f"k={k}: the kept probabilities differ by up to "
                f"{np.abs(P - expected).max():.2e}",
                "take the softmax of the logits, then zero and renormalise (or softmax "
                "over the kept logits only)",
            )
    tied = np.array([[1.0, 3.0, 2.0, 3.0, 2.0, 2.0, 0.5]])
    P = _top_k_result(fn, tied, 3)
    kept = np.flatnonzero(P[0]).tolist()
    if kept != [1, 2, 3] or not np.allclose(
        P, probabilities(tied, top_k=3), rtol=1e-12, atol=1e-12
    ):
        raise CheckFailed(
            "ties: the lowest token id",
            f"logits {tied[0].tolist()} with k=3 keep tokens {kept}, "
            f"expected [1, 2, 3]: 3.0 twice, then the lowest id of "
            f"the tied 2.0s",
            "rank with a stable sort, "
            "np.argsort(-z, kind='stable'), and keep exactly the first k",
        )
    _random_ties(fn)
    return TOP_K_PROPERTIES


def _random_ties(fn):
    """Seeded rows of logits drawn from four integer levels, so that most rows tie at
    the k-th place: the kept set must be the package's (ties: the lowest token ids),
    which ``np.argpartition`` (no order among equals) breaks in many rows."""
    levels = np.random.default_rng(18).integers(0, 4, size=(200, 9)).astype(float)
    for k in (2, 4, 7):
        P = _top_k_result(fn, levels, k)
        expected = probabilities(levels, top_k=k)
        wrong = np.any((P != 0) != (expected > 0), axis=-1)
        if np.any(wrong):
            row = int(np.argmax(wrong))
            raise CheckFailed(
                "ties: the lowest token id",
                f"k={k}: in {int(wrong.sum())} of {len(levels)} random rows with "
                f"tied logits the kept tokens break the rule; row {row}, logits "
                f"{levels[row].astype(int).tolist()}, keeps "
                f"{np.flatnonzero(P[row]).tolist()}, expected "
                f"{np.flatnonzero(expected[row]).tolist()} (at a tie for the k-th "
                f"place the lowest ids are kept)",
                "rank with a stable sort, np.argsort(-z, kind='stable'), and keep "
                "its first k (np.argpartition leaves tied tokens in any order)",
            )
        if not np.allclose(P, expected, rtol=1e-12, atol=1e-12):
            raise CheckFailed(
                "in proportion to the softmax",
                f"k={k}, random rows with tied logits: the kept probabilities "
                f"differ by up to {np.abs(P - expected).max():.2e}",
                "take the softmax of the logits, then zero and renormalise",
            )


# --- Chapter 8: top-p (nucleus) sampling ----------------------------------------------

TOP_P_PROPERTIES = (
    "returns probabilities",
    "input untouched",
    "most probable always kept",
    "smallest prefix reaching p",
    "renormalised",
    "in proportion to the softmax",
    "ties: the lowest token id",
)


def _top_p_result(fn, logits, p):
    """Call ``fn(logits, p)`` on a copy; check the shape and that the copy is kept."""
    given = logits.copy()
    P = _array(
        _call(fn, "returns probabilities", given, p),
        "returns probabilities",
        dtype=np.float64,
    )
    if P.shape != logits.shape:
        raise CheckFailed(
            "returns probabilities",
            f"for logits of shape {logits.shape} and p={p} it returned shape {P.shape}",
            "return one probability per token, along the last axis",
        )
    if not np.array_equal(given, logits):
        raise CheckFailed(
            "input untouched",
            f"fn changed the logits it was given (p={p})",
            "work on a copy (np.where, or logits.copy())",
        )
    return P


def _top_p_kept(fn, logits, p):
    """The learner's result for ``(logits, p)``, its first four properties checked."""
    P = _top_p_result(fn, logits, p)
    _in_token_order(P, probabilities(logits, top_p=p), f"p={p}")
    top = np.argmax(logits, axis=-1)
    at_top = np.take_along_axis(P, top[:, None], axis=-1)[:, 0]
    if not np.all(at_top > 0):  # NaN fails too: nothing kept, then 0 / 0
        row = int(np.argmax(~(at_top > 0)))
        nan = (
            " (the row holds NaN, as when nothing is kept and 0 is divided by 0)"
            if np.any(np.isnan(P[row]))
            else ""
        )
        raise CheckFailed(
            "most probable always kept",
            f"p={p}: row {row} gives its most probable token "
            f"{int(top[row])} probability {at_top[row]:.3g}{nan}",
            "keep the tokens ranked before the one whose running sum "
            "reaches p, and that one too: the first is always kept",
        )
    if not np.all(np.isfinite(P)):
        raise CheckFailed(
            "returns probabilities",
            f"p={p}: the result holds NaN or inf",
            "divide by the sum of the kept probabilities, > 0",
        )
    return P


def _describe_cut(kept, expected, logits_row, p):
    """Say how the kept set differs from the smallest prefix reaching ``p``."""
    softmax_row = probabilities(logits_row)
    mass, want = float(softmax_row[kept].sum()), int(expected.sum())
    # the package's ranking: the kept set of top-k with k = the number kept
    prefix = probabilities(logits_row, top_k=int(kept.sum())) > 0
    if not np.array_equal(kept, prefix):
        return (
            f"keeps tokens {np.flatnonzero(kept).tolist()}, which are not the "
            f"{int(kept.sum())} most probable",
            "rank by probability, largest first (np.argsort(-p, kind='stable'))",
        )
    if kept.sum() < want:
        n = int(kept.sum())
        return (
            f"keeps {n} token{'s' * (n != 1)} whose probabilities sum to "
            f"{mass:.4f} < p: the token that crosses p was dropped, {want} are "
            f"needed",
            "keep the token whose running sum reaches p: n_keep = 1 + "
            "(number of running sums < p)",
        )
    return (
        f"keeps {int(kept.sum())} tokens, but the {want} most probable "
        f"already sum to >= p",
        "stop at the first running sum that reaches p (>= p)",
    )


@reports_unfinished
def check_top_p(fn):
    """Check a learner's ``fn(logits, p) -> P``: softmax, keep the nucleus, renormalise.

    ``logits`` is ``(rows, n_vocab)`` and ``0 < p <= 1``. ``P`` must have its shape: in
    each row, with the softmax probabilities ranked largest first (ties: the lowest
    token id first), the **smallest prefix whose sum reaches p** (``>= p``) is kept,
    so the most probable token is always kept; the kept probabilities are
    renormalised to sum to one, the other tokens are 0, and the logits are left
    unchanged. Compared with :func:`attncourse.sample.probabilities`
    ``(logits, top_p=p)`` within ``1e-12``; one case reaches ``p`` exactly (``0.4 +
    0.3 = 0.7``: two tokens kept) and one has a tie at the cut. Returns the names of
    the properties checked.

    >>> from attncourse.sample import probabilities
    >>> check_top_p(lambda logits, p: probabilities(logits, top_p=p))[-1]
    'ties: the lowest token id'
    >>> check_top_p(lambda logits, p: np.zeros_like(logits))
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: most probable always kept: p=0.001: row 0 \
gives its most probable token 4 probability 0 (likely fix: keep the tokens ranked \
before the one whose running sum reaches p, and that one too: the first is always kept)
    """
    logits = 2.0 * np.random.default_rng(9).normal(size=(3, 7))  # distinct values
    exact = np.log([[1.0, 2.0, 3.0, 4.0]])  # softmax: [0.1, 0.2, 0.3, 0.4]
    cases = [(logits, p) for p in (0.001, 0.3, 0.5, 0.8, 0.95, 1.0)] + [(exact, 0.7)]
    for z, p in cases:
        P = _top_p_kept(fn, z, p)
        expected = probabilities(z, top_p=p)
        for row in range(z.shape[0]):
            kept = P[row] != 0
            if not np.array_equal(kept, expected[row] > 0):
                detail, fix = _describe_cut(kept, expected[row] > 0, z[row], p)
                raise CheckFailed(
                    "smallest prefix reaching p", f"p={p}: row {row} {detail}", fix
                )
        sums = P.sum(axis=-1)
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-12):
            raise CheckFailed(
                "renormalised",
                f"p={p}: rows sum to {sums.round(6)}",
                "divide the kept probabilities by their sum",
            )
        if not np.allclose(P, expected, rtol=1e-12, atol=1e-12):
            raise CheckFailed(
                "in proportion to the softmax",
                f"p={p}: the kept probabilities differ by up to "
                f"{np.abs(P - expected).max():.2e}",
                "take the softmax of the logits, then zero the others and renormalise",
            )
    tied = np.log([[2.0, 1.0, 4.0, 2.0, 2.0]])  # softmax: [2, 1, 4, 2, 2] / 11
    P = _top_p_kept(fn, tied, 0.5)
    kept = np.flatnonzero(P[0]).tolist()
    if kept != [0, 2] or not np.allclose(
        P, probabilities(tied, top_p=0.5), rtol=1e-12, atol=1e-12
    ):
        raise CheckFailed(
            "ties: the lowest token id",
            f"probabilities [2, 1, 4, 2, 2] / 11 with p=0.5 keep tokens "
            f"{kept}, expected [0, 2]: 4/11, then the lowest id of the "
            f"tied 2/11s",
            "rank with a stable sort, np.argsort(-p, "
            "kind='stable'), not np.argsort(p)[::-1]",
        )
    return TOP_P_PROPERTIES
