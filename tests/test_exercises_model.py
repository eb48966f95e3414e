"""The model-backward checker of Chapter 6: right answers pass, typical wrong ones are
named."""

import pytest

from attncourse.kit.exercises.model import (MODEL_BACKWARD_PROPERTIES,
                                            check_model_backward)
from attncourse.kit.failed import CheckFailed
from attncourse.layers.block import block_backward
from attncourse.layers.embedding import embedding_backward
from attncourse.layers.layernorm import layernorm_backward
from attncourse.layers.linear import linear_backward
from attncourse.layers.positions import positions_backward
from attncourse.model import model_backward


def composed(params, saved, dZ, *, fault=None):
    tied = saved["tied"]
    U = {"W": params["embed"]["E"].T} if tied else params["unembed"]
    d_unembed, dH = linear_backward(U, saved["unembed"], dZ)
    d_ln_f, dX = layernorm_backward(params["ln_f"], saved["ln_f"], dH)
    L = len(params["blocks"])
    d_blocks = [None] * L
    order = range(L) if fault == "blocks forward" else reversed(range(L))
    for i in order:
        j = L - 1 - i if fault == "wrong stash" else i
        stash = saved["blocks"][j]
        d_blocks[i], dX = block_backward(params["blocks"][i], stash, dX)
    d_pos, dX = positions_backward(params["pos"], saved["pos"], dX)
    d_embed, _ = embedding_backward(params["embed"], saved["embed"], dX)
    grads = {"embed": d_embed, "pos": d_pos, "blocks": d_blocks, "ln_f": d_ln_f}
    if tied:
        dU_T = d_unembed["W"].T
        dE = {"lookup only": d_embed["E"], "unembedding only": dU_T}
        grads["embed"] = {"E": dE.get(fault, d_embed["E"] + dU_T)}
    else:
        grads["unembed"] = d_unembed
    return grads


def test_the_composition_and_the_package_pass():
    assert check_model_backward(composed) == MODEL_BACKWARD_PROPERTIES
    assert check_model_backward(model_backward) == MODEL_BACKWARD_PROPERTIES


@pytest.mark.parametrize("fault, prop, fix", [
    ("lookup only", "the tied table: both uses, added", "add the unembedding's"),
    ("unembedding only", "the tied table: both uses, added", "add the lookup's"),
    ("wrong stash", "every block, in reverse order", "reversed order"),
    ("blocks forward", "every block, in reverse order", "reversed order"),
])
def test_typical_mistakes_are_named(fault, prop, fix):
    with pytest.raises(CheckFailed) as caught:
        check_model_backward(lambda p, s, dZ: composed(p, s, dZ, fault=fault))
    assert caught.value.property == prop and fix in caught.value.fix


def test_a_tied_model_with_an_unembed_gradient_is_refused():
    def with_unembed(params, saved, dZ):
        grads = composed(params, saved, dZ)
        if saved["tied"]:
            grads["unembed"] = {"W": grads["embed"]["E"].T}
        return grads
    with pytest.raises(CheckFailed) as caught:
        check_model_backward(with_unembed)
    assert caught.value.property == "the nesting of params"
    assert "fold dU^T into embed.E" in caught.value.fix


def test_skipping_the_final_norm_is_named():
    def no_final_norm(params, saved, dZ):
        grads = composed(params, saved, dZ)
        grads["ln_f"] = {k: 0 * v for k, v in grads["ln_f"].items()}
        return grads
    with pytest.raises(CheckFailed) as caught:
        check_model_backward(no_final_norm)
    assert caught.value.property == "the unembedding and the final norm"


def test_an_unfinished_stub_is_reported(capsys):
    def my_model_backward(params, saved, dZ):
        raise NotImplementedError("your code here")
    assert check_model_backward(my_model_backward) is None
    assert "Exercise not done yet: my_model_backward" in capsys.readouterr().out
