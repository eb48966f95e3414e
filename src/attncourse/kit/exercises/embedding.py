"""Checkers of Chapter 1's embedding exercises: one-hot rows, the lookup's backward."""

import numpy as np

from ...layers.embedding import embedding_backward, embedding_forward
from ..failed import CheckFailed
from ._base import _array, _call, _sign_flipped, reports_unfinished

__all__ = ["ONE_HOT_PROPERTIES", "check_one_hot", "check_embedding_backward"]


# --- Chapter 1: one-hot rows ----------------------------------------------------------

ONE_HOT_PROPERTIES = (
    "shape",
    "inputs unchanged",
    "a float array",
    "entries are 0 or 1",
    "one 1 per vector",
    "the 1 sits at the id",
    "rejects ids out of range",
)


@reports_unfinished
def check_one_hot(fn):
    """Check a learner's ``fn(ids, n_vocab)``; raise :class:`CheckFailed` naming the
    first property that fails.

    The result must have shape ``ids.shape + (n_vocab,)`` and a float dtype (an
    integer or boolean array is named), and ``ids`` must be left unchanged. Ids
    outside ``0 .. n_vocab - 1`` must raise ``ValueError``: a too large id, and a
    negative one, which numpy indexing would silently read from the end of the
    vocabulary. Returns the names of the properties checked.

    >>> from attncourse.layers.embedding import one_hot
    >>> check_one_hot(one_hot)
    ('shape', 'inputs unchanged', 'a float array', 'entries are 0 or 1',
     'one 1 per vector', 'the 1 sits at the id', 'rejects ids out of range')
    >>> def upper_bound_only(ids, n_vocab):
    ...     if np.any(np.asarray(ids) >= n_vocab):
    ...         raise ValueError("id too large")
    ...     return np.eye(n_vocab)[ids]
    >>> check_one_hot(upper_bound_only)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncourse.kit.failed.CheckFailed: rejects ids out of range: id -1 with
    n_vocab=6 raised no ValueError; ...
    """
    ids = np.array([[3, 0, 3], [1, 4, 2]])
    n_vocab = 6
    given = ids.copy()
    out = _array(_call(fn, "shape", given, n_vocab), "shape")
    if out.shape != (2, 3, 6):
        raise CheckFailed(
            "shape",
            f"expected ids.shape + (n_vocab,) = (2, 3, 6), got {out.shape}",
            "add a last axis of length n_vocab to the shape of ids",
        )
    if not np.array_equal(given, ids):
        raise CheckFailed(
            "inputs unchanged",
            "fn changed the ids it was given",
            "read ids, never write into them",
        )
    if not np.issubdtype(out.dtype, np.floating):
        raise CheckFailed(
            "a float array",
            f"the one-hot vectors have dtype {out.dtype}; the exercise asks for a "
            "float array (they multiply the float matrix E)",
            "build them as floats: (ids[..., None] == np.arange(n_vocab))"
            ".astype(np.float64)",
        )
    if not np.isin(out, (0.0, 1.0)).all():
        raise CheckFailed(
            "entries are 0 or 1",
            "found other values",
            "write 1.0 at the id and 0.0 everywhere else",
        )
    if not (out.sum(axis=-1) == 1).all():
        raise CheckFailed(
            "one 1 per vector",
            "some vector does not sum to 1",
            "put exactly one 1 in each vector, in the column of its id",
        )
    if not (out.argmax(axis=-1) == ids).all():
        raise CheckFailed(
            "the 1 sits at the id",
            "some 1 is in the wrong column",
            "vector i has its 1 in column ids[i]",
        )
    for bad, why in (
        (n_vocab, "is past the last token"),
        (-1, "would silently pick the last token through numpy's negative indexing"),
    ):
        try:
            fn(np.array([0, bad]), n_vocab)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as e:  # the wrong exception: an IndexError, say
            raise CheckFailed(
                "rejects ids out of range",
                f"id {bad} with n_vocab={n_vocab} raised {type(e).__name__}, not "
                "ValueError",
                "check 0 <= id < n_vocab first and raise ValueError",
            ) from e
        raise CheckFailed(
            "rejects ids out of range",
            f"id {bad} with n_vocab={n_vocab} raised no ValueError; it {why}",
            "raise ValueError unless 0 <= id < n_vocab for every id (negative ids "
            "included)",
        )
    return ONE_HOT_PROPERTIES


# --- Chapter 1: the backward pass of the lookup ---------------------------------------

def _package_dE(dX, ids, n_vocab):
    """The package's ``dE = onehot(ids)^T dX`` (:func:`embedding_backward`)."""
    params = {"E": np.zeros((n_vocab, dX.shape[-1]))}
    _, saved = embedding_forward(params, ids)
    return embedding_backward(params, saved, dX)[0]["E"]


def _unchanged(given, kept):
    """The learner's ``fn`` must leave the ``dX`` and ``ids`` it was given as found."""
    for name, x, y in zip(("dX", "ids"), given, kept):
        if not np.array_equal(x, y):
            raise CheckFailed(
                "inputs unchanged",
                f"fn changed the {name} it was given",
                "read dX and ids, never write into them (no dX += or dX *= ...)",
            )


@reports_unfinished
def check_embedding_backward(fn):
    """Check a learner's ``fn(dX, ids, n_vocab) -> dE``; raise :class:`CheckFailed`
    naming the failed property.

    ``dX`` and ``ids`` must be left unchanged. Returns the names of the properties
    checked.

    >>> def scatter_add(dX, ids, n_vocab):
    ...     dE = np.zeros((n_vocab, dX.shape[-1]))
    ...     np.add.at(dE, ids, dX)  # row ids[i] += dX[i], repeats included
    ...     return dE
    >>> check_embedding_backward(scatter_add)[-1]
    'batched ids: equals onehot(ids)^T dX'
    """
    rng = np.random.default_rng(12)
    n_vocab, D = 7, 3
    # token 4 occurs three times; tokens 0, 2, 3, 5 never
    ids = np.array([4, 1, 4, 6, 4])
    dX = rng.normal(size=(5, D))
    given = dX.copy(), ids.copy()
    dE = _array(_call(fn, "shape", *given, n_vocab), "shape")
    if dE.shape != (n_vocab, D):
        raise CheckFailed(
            "shape",
            f"expected (n_vocab, D) = {(n_vocab, D)}, got {dE.shape}",
            "dE has one row per token of the vocabulary and the width of dX",
        )
    _unchanged(given, (dX, ids))
    unused = [0, 2, 3, 5]
    want = _package_dE(dX, ids, n_vocab)  # onehot(ids)^T dX, (n_vocab, D)
    if not np.all(dE[unused] == 0):
        raise CheckFailed(
            "unused tokens get zero rows",
            f"rows {unused} should be exactly 0",
            "start from np.zeros((n_vocab, D)) and add only at the ids",
        )
    if _sign_flipped(dE, want):
        raise CheckFailed(
            "a token seen once gets its gradient row",
            "dE is the negative of onehot(ids)^T dX: off by a sign",
            "add dX to the rows, do not subtract it",
        )
    if not np.allclose(dE[1], dX[1], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "a token seen once gets its gradient row",
            "row 1 should equal dX[1]",
            "row ids[i] of dE receives dX[i]",
        )
    if not np.allclose(dE[4], dX[0] + dX[2] + dX[4], rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "repeated tokens add their gradients",
            "row 4 should be dX[0] + dX[2] + dX[4]",
            "overwriting (dE[ids] = dX) or dE[ids] += dX keeps only one occurrence: "
            "use np.add.at(dE, ids, dX) or onehot(ids)^T dX",
        )
    ids2 = np.array([[2, 0], [2, 2], [5, 0]])
    dX2 = rng.normal(size=(3, 2, D))
    given = dX2.copy(), ids2.copy()
    dE2 = _array(
        _call(fn, "batched ids: equals onehot(ids)^T dX", *given, n_vocab),
        "batched ids: equals onehot(ids)^T dX",
    )
    _unchanged(given, (dX2, ids2))
    want2 = _package_dE(dX2, ids2, n_vocab)  # summed over all 6 positions
    if dE2.shape != want2.shape or not np.allclose(dE2, want2, rtol=1e-12, atol=1e-12):
        raise CheckFailed(
            "batched ids: equals onehot(ids)^T dX",
            f"for ids of shape {ids2.shape} the result should sum over all 6 positions",
            "flatten ids to (N,) and dX to (N, D) before adding",
        )
    return (
        "shape",
        "inputs unchanged",
        "unused tokens get zero rows",
        "a token seen once gets its gradient row",
        "repeated tokens add their gradients",
        "batched ids: equals onehot(ids)^T dX",
    )
