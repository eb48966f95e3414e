"""sympy helpers for Chapter 3: elementwise definitions, exact examples, moment algebra.

The elementwise builders (:func:`product`, :func:`scores`, :func:`softmax_rows`,
:func:`weighted_sum`, :func:`pairing`) write every entry as an explicit sum over its
indices, the way the chapter defines them, so that a gradient taken entry by entry with
:func:`gradient` is an independent witness for the matrix formulas. This module imports
sympy; ``import attncourse`` does not import it.

>>> Q, K = matrix("Q", 2, 3), matrix("K", 4, 3)
>>> S = scores(Q, K)
>>> S.shape
(2, 4)
>>> vanishes(S - Q * K.T / sp.sqrt(3))
True
"""

import numpy as np
import sympy as sp

__all__ = [
    "matrix",
    "gradient",
    "vanishes",
    "product",
    "scores",
    "softmax_rows",
    "masked_softmax_rows",
    "weighted_sum",
    "pairing",
    "head_objective",
    "multihead_output",
    "quotient_rule_paths",
    "softmax_jacobian_general",
    "expectation",
    "moment_symbol",
    "example1",
    "example2",
    "to_float",
    "to_exact",
    "gradient_at",
    "layernorm_statistics",
    "layernorm_rows",
    "layernorm_partials_general",
    "GELU_CUBIC",
    "gelu_expression",
]


def matrix(name, rows, cols):
    """Return a ``rows x cols`` sympy Matrix of real symbols ``name_ij`` (1-based
    indices).

    >>> matrix("W", 2, 3)
    Matrix([
    [W_11, W_12, W_13],
    [W_21, W_22, W_23]])
    >>> matrix("W", 0, 3)
    Traceback (most recent call last):
    ...
    ValueError: matrix W needs positive sizes, got 0 x 3
    """
    if rows < 1 or cols < 1:
        raise ValueError(f"matrix {name} needs positive sizes, got {rows} x {cols}")
    sep = "" if max(rows, cols) < 10 else ","
    return sp.Matrix(
        rows, cols, lambda i, j: sp.Symbol(f"{name}_{i + 1}{sep}{j + 1}", real=True)
    )


def gradient_at(J_of, M, name):
    """Return ``dJ/dM`` at the value ``M``: ``J_of`` builds ``J`` from a free symbolic
    matrix.

    ``J_of(F)`` is called with a fresh matrix ``F = matrix(name, *M.shape)`` (every
    other input already at its value); sympy differentiates entry by entry, then ``F``
    is set to ``M``.

    >>> gradient_at(lambda F: (F[0, 0] * F[0, 1]) ** 2, sp.Matrix([[1, 2]]), "x")
    Matrix([[8, 4]])
    """
    F = matrix(name, M.rows, M.cols)
    at_M = {F[i, j]: M[i, j] for i in range(M.rows) for j in range(M.cols)}
    return gradient(J_of(F), F).xreplace(at_M).applyfunc(sp.simplify)


def gradient(J, M):
    """Return the matrix ``[dJ/dM_ij]`` of the shape of ``M``, one partial derivative
    per entry.

    >>> x = matrix("x", 1, 2)
    >>> gradient(x[0, 0] ** 2 * x[0, 1], x)
    Matrix([[2*x_11*x_12, x_11**2]])
    """
    return sp.Matrix(M.rows, M.cols, lambda i, j: sp.diff(J, M[i, j]))


def _is_zero(expr):
    expr = sp.sympify(expr)
    if expr == 0:
        return True
    # Fast, sound path: a rational function of fresh symbols standing for the
    # exponentials that cancels to zero is zero whatever values the exponentials take.
    exps = sorted(expr.atoms(sp.exp), key=sp.default_sort_key)
    if exps:
        fresh = {e: sp.Dummy(positive=True) for e in exps}
        if sp.cancel(sp.together(expr.xreplace(fresh))) == 0:
            return True
    expr = sp.cancel(sp.together(sp.expand(expr)))
    return expr == 0 or sp.simplify(expr) == 0


def vanishes(M):
    """Return True if every entry of ``M`` (a Matrix or an expression) simplifies to
    zero.

    >>> s = sp.Symbol("s")
    >>> vanishes(sp.Matrix([sp.exp(s) / (1 + sp.exp(s)) - 1 / (1 + sp.exp(-s))]))
    True
    >>> vanishes(sp.Matrix([s]))
    False
    """
    if isinstance(M, sp.MatrixBase):
        return all(_is_zero(e) for e in M)
    return _is_zero(M)


def _require(cond, message):
    if not cond:
        raise ValueError(message)


def product(X, W):
    """Return ``Y`` with ``Y_ij = sum_m X_im W_mj``, written out as explicit sums.

    >>> product(matrix("X", 2, 3), matrix("W", 2, 2))
    Traceback (most recent call last):
    ...
    ValueError: product needs X columns == W rows, got X (2, 3) and W (2, 2)
    """
    _require(
        X.cols == W.rows,
        f"product needs X columns == W rows, got X {X.shape} and W {W.shape}",
    )
    return sp.Matrix(
        X.rows, W.cols, lambda i, j: sp.Add(*[X[i, m] * W[m, j] for m in range(X.cols)])
    )


def scores(Q, K):
    """Return ``S`` with ``S_ij = sum_a Q_ia K_ja / sqrt(d)``, ``d`` the number of
    columns.

    >>> scores(matrix("Q", 1, 2), matrix("K", 1, 2))
    Matrix([[sqrt(2)*(K_11*Q_11 + K_12*Q_12)/2]])
    """
    _require(
        Q.cols == K.cols,
        f"scores needs Q and K with the same width d, got Q {Q.shape} and K {K.shape}",
    )
    d = Q.cols
    return sp.Matrix(
        Q.rows,
        K.rows,
        lambda i, j: sp.Add(*[Q[i, a] * K[j, a] for a in range(d)]) / sp.sqrt(d),
    )


def softmax_rows(S):
    """Return ``A`` with ``A_ij = exp(S_ij) / sum_k exp(S_ik)`` (each row normalised
    over its keys).

    >>> softmax_rows(sp.Matrix([[sp.log(3), 0]]))
    Matrix([[3/4, 1/4]])
    """
    Z = [sp.Add(*[sp.exp(S[i, k]) for k in range(S.cols)]) for i in range(S.rows)]
    return sp.Matrix(S.rows, S.cols, lambda i, j: sp.exp(S[i, j]) / Z[i])


def masked_softmax_rows(S, visible):
    """Return the masked softmax ``A`` of the scores ``S``, row by row.

    ``A_ij = exp(S_ij) / sum_k exp(S_ik)`` over the visible ``k`` of row ``i``. Hidden
    scores are left out of the sum, not replaced by a large negative number, so a hidden
    weight is the number 0 whatever its score; a row with nothing visible is all 0.
    ``visible`` is a boolean array (or Matrix) of the shape of ``S``.

    >>> S = sp.Matrix([[sp.log(3), 0, 7], [1, 2, 3]])
    >>> masked_softmax_rows(S, np.array([[True, True, False], [False, False, False]]))
    Matrix([
    [3/4, 1/4, 0],
    [  0,   0, 0]])
    """
    visible = np.asarray(visible, dtype=bool)
    _require(
        visible.shape == S.shape,
        f"visible must have the shape of S {S.shape}, got {visible.shape}",
    )
    Z = [
        sp.Add(*[sp.exp(S[i, k]) for k in range(S.cols) if visible[i, k]])
        for i in range(S.rows)
    ]

    def entry(i, j):
        return sp.exp(S[i, j]) / Z[i] if visible[i, j] else sp.S.Zero

    return sp.Matrix(S.rows, S.cols, entry)


def weighted_sum(A, V):
    """Return ``O`` with ``O_il = sum_j A_ij V_jl``.

    >>> weighted_sum(sp.Matrix([[sp.Rational(3, 4), sp.Rational(1, 4)]]), sp.diag(2, 4))
    Matrix([[3/2, 1]])
    """
    _require(
        A.cols == V.rows,
        f"weighted_sum needs one row of V per column of A, got A {A.shape} and V "
        f"{V.shape}",
    )
    return sp.Matrix(
        A.rows, V.cols, lambda i, l: sp.Add(*[A[i, j] * V[j, l] for j in range(A.cols)])
    )


def pairing(M, N):
    """Return ``sum_ij M_ij N_ij``: the probe ``J = <G, O>`` when ``M = G`` and
    ``N = O``.

    >>> half = sp.Rational(1, 2)
    >>> pairing(sp.Matrix([[1, 0], [0, 2]]), sp.Matrix([[3 * half, 1], [half, 3]]))
    15/2
    """
    _require(
        M.shape == N.shape, f"pairing needs equal shapes, got {M.shape} and {N.shape}"
    )
    return sp.Add(*[M[i, j] * N[i, j] for i in range(M.rows) for j in range(M.cols)])


def head_objective(X, W_Q, W_K, W_V, G):
    """Return ``J = <G, O>`` of one head, built from the elementwise definitions only.

    >>> ex = example1()
    >>> sp.nsimplify(head_objective(ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"], ex["G"]))
    15/2
    """
    Q, K, V = product(X, W_Q), product(X, W_K), product(X, W_V)
    return pairing(G, weighted_sum(softmax_rows(scores(Q, K)), V))


def multihead_output(params, X, *, heads, visible):
    """Return multi-head attention ``Y = [O^(0) ... O^(H-1)] W_O`` under a mask.

    ``O^(h) = A^(h) V^(h)``, with ``A^(h)`` the softmax of head ``h``'s scores over
    the entries marked in ``visible``. ``params`` holds ``W_Q, W_K (D, H d)``,
    ``W_V (D, H r)`` and ``W_O (H r, n)``; head ``h`` takes its own block of columns
    (``h d : (h+1) d``, ``h r : (h+1) r``) by explicit slices, and every step is an
    elementwise definition (:func:`product`, :func:`scores`,
    :func:`masked_softmax_rows`, :func:`weighted_sum`), so it is an independent
    witness for :func:`attncourse.layers.multihead.multihead_forward`.

    >>> from attncourse.layers.multihead import multihead_forward
    >>> rng = np.random.default_rng(0)
    >>> shapes = {"W_Q": (3, 4), "W_K": (3, 4), "W_V": (3, 2), "W_O": (2, 3)}
    >>> params = {n: rng.integers(-4, 5, size=s) / 4 for n, s in shapes.items()}
    >>> X = rng.integers(-4, 5, size=(2, 3)) / 4
    >>> causal = np.tril(np.ones((2, 2), dtype=bool))
    >>> exact = {n: to_exact(W) for n, W in params.items()}
    >>> Y = multihead_output(exact, to_exact(X), heads=2, visible=causal)
    >>> Y_numpy, _ = multihead_forward(params, X, heads=2)
    >>> bool(np.allclose(to_float(Y), Y_numpy, rtol=1e-14, atol=0))
    True
    """
    W_Q, W_K, W_V, W_O = (params[n] for n in ("W_Q", "W_K", "W_V", "W_O"))
    _require(
        W_Q.cols % heads == 0 and W_V.cols % heads == 0,
        f"W_Q {W_Q.shape} and W_V {W_V.shape} must split into {heads} heads",
    )
    d, r = W_Q.cols // heads, W_V.cols // heads
    outputs = []
    for h in range(heads):
        Q = product(X, W_Q[:, h * d : (h + 1) * d])  # (T, D) x (D, d) -> (T, d)
        K = product(X, W_K[:, h * d : (h + 1) * d])  # (T, D) x (D, d) -> (T, d)
        V = product(X, W_V[:, h * r : (h + 1) * r])  # (T, D) x (D, r) -> (T, r)
        A = masked_softmax_rows(scores(Q, K), visible)  # (T, T)
        outputs.append(weighted_sum(A, V))  # (T, T) x (T, r) -> (T, r)
    return product(sp.Matrix.hstack(*outputs), W_O)  # (T, H r) x (H r, n) -> (T, n)


def quotient_rule_paths(n):
    """Split the softmax derivative ``d a_j / d s_k`` by the quotient rule, for ``n``
    scores.

    With ``a_j = N_j / Z``, ``N_j = exp(s_j)``, ``Z = sum_k exp(s_k)``, returns
    ``(s, a, numerator, denominator)``: ``numerator[j, k] = (dN_j/ds_k) / Z`` and
    ``denominator[j, k] = -N_j (dZ/ds_k) / Z**2``.

    >>> s, a, num, den = quotient_rule_paths(3)
    >>> vanishes(num - sp.diag(*a)), vanishes(den + a * a.T)
    (True, True)
    """
    _require(n >= 1, f"quotient_rule_paths needs n >= 1, got {n}")
    s = sp.Matrix(n, 1, lambda j, _: sp.Symbol(f"s_{j + 1}", real=True))
    N = s.applyfunc(sp.exp)
    Z = sp.Add(*N)
    a = N / Z
    numerator = sp.Matrix(n, n, lambda j, k: sp.diff(N[j], s[k]) / Z)
    denominator = sp.Matrix(n, n, lambda j, k: -N[j] * sp.diff(Z, s[k]) / Z**2)
    return s, a, numerator, denominator


def softmax_jacobian_general():
    """Return the softmax Jacobian entry for a symbolic length ``n``, and its row sum.

    Returns a dict with the symbols ``s`` (IndexedBase), ``j, k, n``, the two
    quotient-rule paths ``numerator`` (``delta_jk exp(s_j)/Z``) and ``denominator``
    (``-exp(s_j) exp(s_k)/Z**2``), the full derivative ``entry`` computed directly, and
    ``row_sum = sum_k entry``, all for ``1 <= j, k <= n``.

    >>> g = softmax_jacobian_general()
    >>> paths = g["entry"] - g["numerator"] - g["denominator"]
    >>> sp.simplify(paths), sp.simplify(g["row_sum"])
    (0, 0)
    """
    s = sp.IndexedBase("s")
    j, k, m = sp.symbols("j k m", integer=True, positive=True)
    n = sp.Symbol("n", integer=True, positive=True)
    Z = sp.Sum(sp.exp(s[m]), (m, 1, n))
    N_j = sp.exp(s[j])
    numerator = sp.diff(N_j, s[k]) / Z
    # d/ds_k of the sum, for k <= n
    dZ = sp.refine(sp.diff(Z, s[k]).doit(), sp.Q.le(k, n))
    denominator = -N_j * dZ / Z**2
    entry = sp.refine(sp.diff(N_j / Z, s[k]).doit(), sp.Q.le(k, n))
    row_sum = sp.refine(sp.Sum(entry.subs(k, m), (m, 1, n)).doit(), sp.Q.le(j, n))
    return {
        "s": s,
        "j": j,
        "k": k,
        "n": n,
        "Z": Z,
        "numerator": numerator,
        "denominator": denominator,
        "entry": entry,
        "row_sum": row_sum,
    }


# an undefined function: E(q**2) stands for an unspecified moment
MOMENT = sp.Function("E")


def moment_symbol(var, power):
    """Return ``E(var**power)``, an unspecified moment (an undefined sympy function
    applied to ``var**power``).

    >>> moment_symbol(sp.Symbol("q"), 2)
    E(q**2)
    """
    return MOMENT(var**power)


def expectation(expr, variables, moment=moment_symbol):
    """Return ``E[expr]`` for a polynomial in mutually independent random ``variables``.

    Independence makes the expectation of a monomial the product of the moments of its
    factors: ``E[x**p y**q] = E[x**p] E[y**q]``. ``moment(var, power)`` supplies each
    moment; by default an unspecified ``E(var**power)``, so the result assumes nothing
    about the distributions beyond independence.

    >>> q, k = sp.symbols("q k")
    >>> expectation(q * k, [q, k])
    E(k)*E(q)
    >>> expectation((q * k) ** 2, [q, k])
    E(k**2)*E(q**2)
    """
    variables = list(variables)
    poly = sp.Poly(sp.expand(expr), *variables)
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        term = coeff
        for var, p in zip(variables, powers):
            if p:
                term *= moment(var, p)
        total += term
    return total


def example1():
    """Return Example 1 exactly: ``X = I``, ``W_Q = aI`` with ``a = sqrt(2) ln 3``,
    ``W_K = I``, ``W_V = diag(2, 4)``, ``G = diag(1, 2)``.

    >>> example1()["W_Q"]
    Matrix([
    [sqrt(2)*log(3),              0],
    [             0, sqrt(2)*log(3)]])
    """
    a = sp.sqrt(2) * sp.log(3)
    I = sp.eye(2)
    return {"X": I, "W_Q": a * I, "W_K": I, "W_V": sp.diag(2, 4), "G": sp.diag(1, 2)}


def example2():
    """Return Example 2 exactly: Example 1 with ``W_K`` all ones, so both key rows are
    ``[1, 1]``.

    >>> ex = example2()
    >>> softmax_rows(scores(product(ex["X"], ex["W_Q"]), product(ex["X"], ex["W_K"])))
    Matrix([
    [1/2, 1/2],
    [1/2, 1/2]])
    """
    ex = example1()
    ex["W_K"] = sp.ones(2, 2)
    return ex


def to_float(M):
    """Return a sympy Matrix (or number) as a float64 numpy array.

    >>> to_float(sp.Matrix([[sp.Rational(1, 4), sp.log(3)]])).round(4)
    array([[0.25  , 1.0986]])
    """
    if isinstance(M, sp.MatrixBase):
        return np.array(M.evalf(30).tolist(), dtype=np.float64)
    return np.float64(sp.N(M, 30))


def to_exact(M):
    """Return a float array (or number) as a sympy Matrix of exact rationals: each float
    is a binary fraction.

    Use it on values that are exact in float64 (quarters, eighths) to hand sympy the
    very numbers numpy computes with.

    >>> to_exact(np.array([[0.25, -1.5]]))
    Matrix([[1/4, -3/2]])
    >>> to_exact(0.375)
    3/8
    """
    M = np.asarray(M, dtype=np.float64)
    if M.ndim == 0:
        return sp.Rational(float(M))
    if M.ndim == 1:
        M = M[:, None]
    if M.ndim != 2:
        raise ValueError(
            f"to_exact takes a scalar, a vector or a matrix, got shape {M.shape}"
        )
    return sp.Matrix(M.shape[0], M.shape[1], lambda i, j: sp.Rational(float(M[i, j])))


# --- Chapter 5: LayerNorm and GELU ----------------------------------------------------


def layernorm_statistics(x):
    """Return ``(mu, var)`` of the row ``x`` (a 1 x n Matrix): mean and biased variance.

    Both are explicit sums over the ``n`` entries; the variance divides by ``n``.

    >>> mu, var = layernorm_statistics(sp.Matrix([[1, 2, 6]]))
    >>> mu, var
    (3, 14/3)
    """
    _require(x.rows == 1, f"layernorm_statistics takes one row, got shape {x.shape}")
    n = x.cols
    mu = sp.Add(*x) / n
    var = sp.Add(*[(x_a - mu) ** 2 for x_a in x]) / n
    return mu, var


def layernorm_rows(X, gamma, beta, eps):
    """Return ``Y`` with ``Y_ia = gamma_a (X_ia - mu_i) / sqrt(var_i + eps) + beta_a``.

    ``mu_i`` and ``var_i`` are :func:`layernorm_statistics` of row ``i`` of ``X``;
    ``gamma`` and ``beta`` are 1 x D Matrices (or sequences of D entries).

    >>> x = matrix("x", 1, 3)
    >>> c = sp.Symbol("c", real=True)
    >>> Y = layernorm_rows(x, [1, 1, 1], [0, 0, 0], sp.Symbol("epsilon", positive=True))
    >>> vanishes(layernorm_rows(x + c * sp.ones(1, 3), [1, 1, 1], [0, 0, 0],
    ...                         sp.Symbol("epsilon", positive=True)) - Y)  # a shift
    True
    """
    gamma, beta = list(gamma), list(beta)
    _require(
        len(gamma) == X.cols and len(beta) == X.cols,
        f"gamma and beta need {X.cols} entries, got {len(gamma)} and {len(beta)}",
    )
    rows = []
    for i in range(X.rows):
        mu, var = layernorm_statistics(X[i, :])
        s = sp.sqrt(var + eps)
        rows.append([gamma[a] * (X[i, a] - mu) / s + beta[a] for a in range(X.cols)])
    return sp.Matrix(rows)


def _split_sums(expr):
    """Distribute each ``Sum`` over its terms; pull out factors free of its index."""

    def split(s):
        ((k, lo, hi),) = s.limits
        terms = []
        for term in sp.Add.make_args(sp.expand(s.function)):
            free, dependent = term.as_independent(k, as_Add=False)
            summed = hi - lo + 1 if dependent == 1 else sp.Sum(dependent, (k, lo, hi))
            terms.append(free * summed)
        return sp.Add(*terms)

    previous = None
    while previous != expr:
        previous = expr
        expr = sp.expand(expr.replace(lambda e: isinstance(e, sp.Sum), split))
    return expr


def layernorm_partials_general():
    """Return the derivatives of a row's mean and variance for a symbolic length ``n``.

    With ``x`` an IndexedBase, ``mu = sum_k x_k / n`` and
    ``var = sum_k (x_k - mu)^2 / n`` (biased), sympy differentiates both with respect
    to ``x_j`` (``1 <= j <= n``). Returns a dict with ``x, j, n, mu, var`` and the
    derivatives ``dmu``, ``dvar``, their sums distributed term by term.

    >>> p = layernorm_partials_general()
    >>> p["dmu"], sp.simplify(p["dvar"] - 2 * (p["x"][p["j"]] - p["mu"]) / p["n"])
    (1/n, 0)
    """
    x = sp.IndexedBase("x", real=True)
    j, k = sp.symbols("j k", integer=True, positive=True)
    n = sp.Symbol("n", integer=True, positive=True)
    mu = sp.Sum(x[k], (k, 1, n)) / n
    var = sp.Sum((x[k] - mu) ** 2, (k, 1, n)) / n

    def d_dx_j(expr):  # d/dx_j for 1 <= j <= n
        return _split_sums(sp.refine(sp.diff(expr, x[j]).doit(), sp.Q.le(j, n)))

    return {
        "x": x,
        "j": j,
        "n": n,
        "mu": mu,
        "var": var,
        "dmu": d_dx_j(mu),
        "dvar": d_dx_j(var),
    }


GELU_CUBIC = sp.Rational(44715, 10**6)  # the tanh form's coefficient of x^3


def gelu_expression(x, *, approximate=False, cubic=GELU_CUBIC):
    """Return GELU of the sympy expression ``x``: ``x Phi(x)``, or the tanh form.

    ``Phi(x) = (1 + erf(x / sqrt 2)) / 2``; the tanh form is
    ``x/2 (1 + tanh(sqrt(2/pi) (x + cubic x^3)))``, ``cubic = 0.044715`` as a rational.

    >>> x = sp.Symbol("x", real=True)
    >>> gelu_expression(x)
    x*(erf(sqrt(2)*x/2) + 1)/2
    >>> sp.limit(gelu_expression(x, approximate=True) / x, x, 0)
    1/2
    """
    if approximate:
        u = sp.sqrt(2 / sp.pi) * (x + cubic * x**3)
        return x * (1 + sp.tanh(u)) / 2
    return x * (1 + sp.erf(x / sp.sqrt(2))) / 2


# --- Chapter 9: the online softmax ----------------------------------------------------


def online_state(s, V, m):
    """Return the state ``(m, l, o)`` of a partial row, rescaled to the shift ``m``.

    ``s`` holds the scores of the keys read, ``V`` (one row per key) their values:
    ``l = sum_j exp(s_j - m)``, ``o = sum_j exp(s_j - m) V_j`` (a ``1 x r`` Matrix). Any
    ``m`` gives the same weights; the running maximum is the one that cannot overflow.

    >>> s1, s2, m = sp.symbols("s1 s2 m", real=True)
    >>> online_state([s1, s2], sp.Matrix([[1], [2]]), m)[1]
    exp(-m + s1) + exp(-m + s2)
    """
    s = list(s)
    _require(
        len(s) == V.rows,
        f"online_state needs one row of V per score, got {len(s)} "
        f"scores and V {V.shape}",
    )
    w = [sp.exp(x - m) for x in s]
    o = sp.Matrix(
        1, V.cols, lambda _, c: sp.Add(*[w[j] * V[j, c] for j in range(len(s))])
    )
    return m, sp.Add(*w), o


def merge_online(a, b, m, *, rescale_old=True):
    """Return the merge of two states ``a = (m_a, l_a, o_a)``, ``b`` at the new shift
    ``m``: ``l = e^(m_a - m) l_a + e^(m_b - m) l_b``, and likewise ``o``. With
    ``rescale_old=False``, ``o_a`` is added unscaled (the planted mistake of Chapter 9).

    >>> m_a, m_b, m, l_a, l_b = sp.symbols("m_a m_b m l_a l_b", real=True)
    >>> z = sp.zeros(1, 1)
    >>> merge_online((m_a, l_a, z), (m_b, l_b, z), m)[1]
    l_a*exp(-m + m_a) + l_b*exp(-m + m_b)
    """
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    alpha, beta = sp.exp(m_a - m), sp.exp(m_b - m)
    o = (alpha if rescale_old else 1) * o_a + beta * o_b
    return m, alpha * l_a + beta * l_b, o


def rowsum_product(M, N):
    """Return the column ``r`` with ``r_i = sum_j M_ij N_ij``, written out entry by
    entry.

    >>> rowsum_product(sp.Matrix([[1, 2], [3, 4]]), sp.Matrix([[1, 0], [0, 2]]))
    Matrix([
    [1],
    [8]])
    """
    _require(
        M.shape == N.shape,
        f"rowsum_product needs equal shapes, got {M.shape} and {N.shape}",
    )
    return sp.Matrix(
        M.rows, 1, lambda i, _: sp.Add(*[M[i, j] * N[i, j] for j in range(M.cols)])
    )


__all__ += ["online_state", "merge_online", "rowsum_product"]
