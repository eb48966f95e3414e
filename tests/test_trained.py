"""Tests of attncourse.trained: the recipes of the course's trained models."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from attncourse import trained
from attncourse.params import flatten_params


def test_the_corpus_split_holds_out_the_last_tenth():
    vocab, train_ids, held_out = trained.corpus_split()
    total = len(train_ids) + len(held_out)
    assert abs(len(held_out) - total / 10) <= 1
    assert train_ids.max() < len(vocab) and held_out.max() < len(vocab)


def test_a_recipe_is_deterministic_and_changes_apply():
    a = trained.train_recipe("chars", steps=3, lines=0)
    b = trained.train_recipe("chars", steps=3, lines=0)
    assert_array_equal(a[2]["loss"], b[2]["loss"])
    for name, x in flatten_params(a[0]).items():
        assert x.dtype == np.float32
        assert_array_equal(flatten_params(b[0])[name], x)
    c = trained.train_recipe("chars", steps=3, lr=1e-2, warmup=1, lines=0)
    assert c[2]["lr"][0] == 1e-2 and not np.array_equal(c[2]["loss"], a[2]["loss"])


def test_recall_accuracy_counts_the_answers():
    recipe = trained.RECIPES["recall"]
    params, config, _ = trained.train_recipe("recall", steps=2, lines=0)
    ids, answers = trained.held_out_recall(50)
    accuracy = trained.recall_accuracy(params, config, ids, answers)
    assert config == recipe.config and 0 <= accuracy <= 1
    from attncourse.model import model_forward
    logits, _ = model_forward(params, ids, config=config)
    assert accuracy == np.mean(logits[:, -1].argmax(-1) == answers)


def test_held_out_recall_is_not_the_training_data():
    ids, _ = trained.held_out_recall(200)
    recipe = trained.RECIPES["recall"]
    from attncourse.text import recall_batches
    batch = recall_batches(trained.recall_task(), recipe.batch_size, recipe.seed)
    seen = {tuple(row) for step in range(1, 21) for row in batch(step)[0]}
    overlap = sum(tuple(row) in seen for row in ids)
    assert overlap < 5  # chance collisions only: 8*7*6*5*4 * 8**5 * 5 sequences exist


def test_mean_loss_of_a_uniform_model_is_log_n_vocab():
    params, config, _ = trained.train_recipe("chars", steps=1, lines=0)
    flat = {k: np.zeros_like(v) for k, v in flatten_params(params).items()}
    from attncourse.params import unflatten_params
    zeros = unflatten_params(flat, params)
    _, _, held_out = trained.corpus_split()
    assert trained.mean_loss(zeros, config, held_out) == pytest.approx(
        np.log(config.n_vocab), rel=1e-6)


def test_unknown_recipes_and_fields_are_refused():
    with pytest.raises(ValueError, match=r"no recipe 'gpt'; the recipes are \['chars', "
                                         r"'recall'\]"):
        trained.train_recipe("gpt")
    with pytest.raises(ValueError, match=r"unknown recipe fields \['batch'\]"):
        trained.train_recipe("chars", batch=3)
