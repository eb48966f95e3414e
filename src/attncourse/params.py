"""Parameters nested by layer, and their flat view.

A model's parameters nest by layer,
``{"embed": {"E": ...}, "blocks": [{"attn": {...}}, ...]}``, so that two blocks never
share a name. :func:`flatten_params` gives every array a dotted path
(``"blocks.0.attn.W_Q"``); :func:`unflatten_params` puts a flat dict back into the
nesting of a template. Gradients have the nesting of the parameters they belong to.

>>> import numpy as np
>>> params = {"embed": {"E": np.zeros((3, 2))},
...           "blocks": [{"attn": {"W_Q": np.ones((2, 2))}}]}
>>> flat = flatten_params(params)
>>> list(flat)
['embed.E', 'blocks.0.attn.W_Q']
>>> unflatten_params(flat, params)["blocks"][0]["attn"]["W_Q"].shape
(2, 2)
"""

__all__ = ["flatten_params", "unflatten_params"]


def flatten_params(params, prefix=""):
    """Return ``{dotted path: array}`` for a nesting of dicts and lists whose leaves are
    arrays."""
    if isinstance(params, dict):
        items = params.items()
    elif isinstance(params, (list, tuple)):
        items = enumerate(params)
    else:
        return {prefix: params}
    flat = {}
    for key, value in items:
        key = str(key)
        if "." in key:
            raise ValueError(f"parameter names may not contain '.', got {key!r} under "
                             f"{prefix or 'the root'!r}")
        flat.update(flatten_params(value, f"{prefix}.{key}" if prefix else key))
    return flat


def unflatten_params(flat, like):
    """Return the nesting of ``like`` with its leaves taken from ``flat`` (as made by
    :func:`flatten_params`).

    >>> unflatten_params({"W": 1.0}, {"W": 0.0, "b": 0.0})
    Traceback (most recent call last):
    ...
    ValueError: flat parameters lack ['b'] and have extra []
    """
    want = flatten_params(like)
    if set(flat) != set(want):
        raise ValueError(f"flat parameters lack {sorted(set(want) - set(flat))} and "
                         f"have extra {sorted(set(flat) - set(want))}")
    return _rebuild(flat, like, "")


def _rebuild(flat, like, prefix):
    path = lambda key: f"{prefix}.{key}" if prefix else str(key)
    if isinstance(like, dict):
        return {key: _rebuild(flat, value, path(key)) for key, value in like.items()}
    if isinstance(like, (list, tuple)):
        return type(like)(
            _rebuild(flat, value, path(i)) for i, value in enumerate(like)
        )
    return flat[prefix]
