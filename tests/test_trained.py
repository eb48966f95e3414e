"""Tests of attncourse.kit.trained: the recipes of the course's trained models."""

import pathlib

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from attncourse.kit import trained
from attncourse.params import flatten_params


def test_the_corpus_split_holds_out_unseen_sentences_of_the_last_tenth():
    from attncourse.text import decode, make_corpus
    vocab, train_ids, held_out = trained.corpus_split()
    text = make_corpus(trained.CORPUS_SENTENCES, seed=0)
    cut = int(round(len(text) * (1 - trained.HELD_OUT)))
    assert decode(train_ids, vocab) == text[:cut]
    sentences = decode(held_out, vocab).split(". ")
    assert all(s.rstrip(".") + "." in text[cut:] for s in sentences)
    assert not any(s.rstrip(".") + "." in text[:cut] for s in sentences)
    assert len(set(sentences)) == len(sentences) > 20
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
                                         r"'recall', 'shakespeare_bpe', "
                                         r"'shakespeare_chars'\]"):
        trained.train_recipe("gpt")
    with pytest.raises(ValueError, match=r"unknown recipe fields \['batch'\]"):
        trained.train_recipe("chars", batch=3)


# --- trained_model: a recipe trained once per machine ---------------------------------


class Asked(list):
    """The recipes the stub was asked to train, and the ``lines`` of each call."""

    def __init__(self):
        super().__init__()
        self.lines = []


@pytest.fixture
def stub_training(monkeypatch):
    """Replace the training of a recipe by init_model (float32, a made-up history);
    returns the list of the recipes it was asked to train."""
    from attncourse.model import init_model
    from attncourse.train import as_dtype
    asked = Asked()

    def train_recipe(name, lines=5):
        asked.append(name)
        asked.lines.append(lines)
        config = trained._config(name)
        history = {"step": np.arange(1, 4), "loss": np.array([3.0, 2.5, 2.25]),
                   "lr": np.full(3, 1e-3), "grad_norm": np.ones(3), "seconds": 1.5,
                   "cpu_seconds": 1.25, "eval": []}
        return (as_dtype(init_model(config, seed=len(asked)), np.float32), config,
                history)

    monkeypatch.setattr(trained, "train_recipe", train_recipe)
    return asked


def assert_same_model(a, b):
    assert a[1] == b[1]
    flat_a, flat_b = flatten_params(a[0]), flatten_params(b[0])
    assert flat_a.keys() == flat_b.keys()
    for name, x in flat_a.items():
        assert flat_b[name].dtype == x.dtype == np.float32
        assert_array_equal(flat_b[name], x)
    for key in ("step", "loss", "lr", "grad_norm"):
        assert_array_equal(b[2][key], a[2][key])
    assert (b[2]["seconds"], b[2]["cpu_seconds"]) == (
        a[2]["seconds"], a[2]["cpu_seconds"])


def test_a_model_is_trained_once_and_read_back_bit_for_bit(stub_training, tmp_path):
    first = trained.trained_model("recall", folder=tmp_path)
    again = trained.trained_model("recall", folder=tmp_path)
    assert stub_training == ["recall"]
    assert_same_model(first, again)
    assert again[2]["eval"] == []
    key = trained.model_key("recall")[:16]
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [
        f"recall-{key}-history.npz", f"recall-{key}.npz"]
    trained.trained_model("chars", folder=tmp_path)
    assert stub_training == ["recall", "chars"]


def test_the_folder_comes_from_the_environment_else_the_users_cache(
        stub_training, tmp_path, monkeypatch):
    monkeypatch.setenv(trained.MODELS_ENV, str(tmp_path / "models"))
    trained.trained_model("recall")
    trained.trained_model("recall")
    assert stub_training == ["recall"] and (tmp_path / "models").is_dir()
    # unset: the user's cache, once per machine
    monkeypatch.delenv(trained.MODELS_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert trained.user_models() == tmp_path / "cache" / "attncourse" / "models"
    trained.trained_model("recall")
    trained.trained_model("recall")
    assert stub_training == ["recall"] * 2
    assert list(trained.user_models().glob("recall-*.npz"))
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert trained.user_models() == tmp_path / "home/.cache/attncourse/models"
    # empty: keep nothing, train every time
    monkeypatch.setenv(trained.MODELS_ENV, "")
    trained.trained_model("recall")
    trained.trained_model("recall")
    assert stub_training == ["recall"] * 4


def test_what_the_bits_depend_on_changes_the_key(stub_training, tmp_path, monkeypatch):
    import dataclasses
    before = trained.model_key("recall")
    trained.trained_model("recall", folder=tmp_path)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert trained.model_key("recall") != before
    trained.trained_model("recall", folder=tmp_path)
    assert stub_training == ["recall", "recall"]
    monkeypatch.undo()
    assert trained.model_key("recall") == before
    recipe = trained.RECIPES["recall"]
    monkeypatch.setitem(trained.RECIPES, "recall", dataclasses.replace(recipe, lr=1e-3))
    assert trained.model_key("recall") != before
    monkeypatch.undo()
    monkeypatch.setattr(trained, "RECALL_TASK", trained.RecallTask(8, 8, 4))
    assert trained.model_key("recall") != before
    monkeypatch.undo()
    code = trained._RECIPE_CODE  # the recipe's code: another function, another key
    monkeypatch.setattr(trained, "_RECIPE_CODE", (*code[:-1], trained.mean_loss))
    assert trained.model_key("recall") != before
    monkeypatch.undo()
    assert trained.model_key("recall") == before
    with pytest.raises(ValueError, match="no recipe 'gpt'"):
        trained.model_key("gpt")


@pytest.fixture
def core_copy(tmp_path, monkeypatch):
    """A copy of the package's source that model_key reads instead of the package."""
    import shutil
    copy = tmp_path / "attncourse"
    shutil.copytree(trained._CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(trained, "_CORE", copy)
    return copy


def test_the_key_covers_the_training_path_and_nothing_else(core_copy):
    before = trained.model_key("chars")
    for name in ("kit/faults/attention.py", "kit/exercises/optim.py", "kit/cost.py",
                 "kvcache.py", "sample.py", "tiled.py", "__init__.py", "README.md"):
        with open(core_copy / name, "a") as file:  # a comment, or a docstring edited
            file.write("\n# edited\n")
        assert trained.model_key("chars") == before, name
    # fault controls: a module on the training path, directly or through an import
    for name in ("optim.py", "layers/gelu.py"):
        original = (core_copy / name).read_bytes()
        (core_copy / name).write_bytes(original + b"\n# edited\n")
        assert trained.model_key("chars") != before, name
        (core_copy / name).write_bytes(original)
        assert trained.model_key("chars") == before


def test_the_training_path_is_the_import_closure_of_the_modules_training_calls():
    assert trained.training_modules() == [
        "_validate.py", "bpe.py", "layers/attention.py", "layers/block.py",
        "layers/embedding.py",
        "layers/gelu.py", "layers/head.py", "layers/layernorm.py", "layers/linear.py",
        "layers/mlp.py", "layers/multihead.py", "layers/positions.py", "loss.py",
        "model.py", "optim.py", "params.py", "softmax.py", "text.py", "train.py"]


def test_the_import_closure_follows_every_form_of_relative_import(tmp_path):
    # a planted core: model.py imports a sibling, a subpackage's module, a module
    # named in "from . import", and (inside a function) one level up from a layer
    core = tmp_path / "core"
    (core / "layers").mkdir(parents=True)
    sources = {"model.py": "from .loss import f\nfrom .layers.dense import g\n"
                           "from . import params\n",
               "text.py": "", "train.py": "import numpy\n", "loss.py": "", "bpe.py": "",
               "params.py": "", "unused.py": "",
               "layers/dense.py": "def g():\n    from .._check import h\n",
               "_check.py": "import os\n"}
    for name, source in sources.items():
        (core / name).write_text(source)
    assert trained.training_modules(core) == [
        "_check.py", "bpe.py", "layers/dense.py", "loss.py", "model.py", "params.py",
        "text.py",
        "train.py"]


def test_every_core_module_that_runs_in_training_is_on_the_training_path(monkeypatch):
    import sys
    called = set()  # the files of every Python function called (sorted out below)

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code.co_filename)

    # the same code on a fiftieth of Tiny Shakespeare (under the profiler, the whole
    # text's byte-pair training and encoding take half a minute)
    excerpt = trained._bpe.shakespeare()[:22_000]
    monkeypatch.setattr(trained._bpe, "shakespeare", lambda: excerpt)
    sys.setprofile(profile)
    try:
        for name in trained.RECIPES:
            trained.train_recipe(name, steps=2, lines=0)
    finally:
        sys.setprofile(None)
    paths = [pathlib.Path(name) for name in called]
    ran = {path.relative_to(trained._CORE).as_posix() for path in paths
           if path.is_relative_to(trained._CORE)}
    core = {name for name in ran if not name.startswith("kit/")}
    assert {"optim.py", "train.py", "layers/attention.py"} <= core
    assert core <= set(trained.training_modules())
    # fault control: a closure from model.py alone misses what training runs
    monkeypatch.setattr(trained, "_TRAINING_ROOTS", ("model.py",))
    assert not core <= set(trained.training_modules())


@pytest.mark.parametrize("damage", ["model", "history", "config"])
def test_a_damaged_or_foreign_file_is_trained_again(stub_training, tmp_path, damage):
    trained.trained_model("recall", folder=tmp_path)
    stem = tmp_path / f"recall-{trained.model_key('recall')[:16]}"
    if damage == "model":
        pathlib.Path(f"{stem}.npz").write_bytes(b"not a zip file")
    elif damage == "history":
        pathlib.Path(f"{stem}-history.npz").unlink()
    else:  # a model of another config under this key
        from attncourse.model import init_model, save_model
        other = trained._config("chars")
        save_model(f"{stem}.npz", init_model(other), other)
    rebuilt = trained.trained_model("recall", folder=tmp_path)
    assert stub_training == ["recall", "recall"]
    assert_same_model(rebuilt, trained.trained_model("recall", folder=tmp_path))
    assert stub_training == ["recall", "recall"]
    assert not list(tmp_path.glob("*.tmp"))


def test_two_callers_at_once_train_once(monkeypatch, tmp_path):
    import threading
    import time
    asked, real = [], trained.train_recipe

    def slow(name, lines=5):
        asked.append(name)
        time.sleep(0.3)
        return real(name, steps=1, lines=lines)

    monkeypatch.setattr(trained, "train_recipe", slow)
    results = [None, None]

    def call(i):
        results[i] = trained.trained_model("recall", folder=tmp_path)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert asked == ["recall"]
    assert_same_model(*results)


def test_the_model_key_covers_the_processor_and_the_blas_library(monkeypatch, tmp_path):
    before = trained.model_key("chars")
    monkeypatch.setattr(trained, "_cpu_model", lambda: "another processor")
    assert trained.model_key("chars") != before
    monkeypatch.undo()
    config = np.show_config(mode="dicts")
    other = {**config, "Build Dependencies": {**config["Build Dependencies"],
                                              "blas": {"name": "another blas"}}}
    monkeypatch.setattr(np, "show_config", lambda mode: other)
    assert trained.model_key("chars") != before

    def printing_only(mode):  # numpy before 1.26 has no mode="dicts"
        raise TypeError(mode)

    monkeypatch.setattr(np, "show_config", printing_only)
    assert trained.model_key("chars") == trained.model_key("chars") != before


def test_the_processor_is_named_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: Example\n"
                       "model name\t: Example CPU 9000: rev. 2 @ 3.00GHz\n"
                       "flags\t: fpu\n")
    assert trained._cpu_model(cpuinfo) == "Example CPU 9000: rev. 2 @ 3.00GHz"
    import platform
    assert trained._cpu_model(tmp_path / "missing") == platform.processor()
    cpuinfo.write_text("processor\t: 0\n")
    assert trained._cpu_model(cpuinfo) == platform.processor()


def test_a_write_goes_through_a_temporary_file_beside_the_target(tmp_path):
    seen = []

    def write(temporary):
        seen.append(pathlib.Path(temporary))
        pathlib.Path(temporary).write_text("whole")

    trained._write(tmp_path / "model.npz", write)
    assert seen[0].parent == tmp_path and seen[0].name.endswith(".tmp")
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]

    def fails(temporary):
        pathlib.Path(temporary).write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        trained._write(tmp_path / "other.npz", fails)
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]


def test_a_kept_model_is_trained_silently_into_a_new_folder(stub_training, tmp_path):
    folder = tmp_path / "not" / "yet"
    model = trained.trained_model("recall", folder=folder)
    assert folder.is_dir() and stub_training.lines == [0]
    assert type(model[2]["seconds"]) is float and type(model[2]["cpu_seconds"]) is float
    read = trained.trained_model("recall", folder=folder)
    assert type(read[2]["seconds"]) is float and type(read[2]["cpu_seconds"]) is float
    trained.trained_model("recall", folder="")  # no folder: trained, silently too
    assert stub_training.lines == [0, 0]


def test_a_pickled_history_is_refused(stub_training, tmp_path):
    trained.trained_model("recall", folder=tmp_path)
    stem = tmp_path / f"recall-{trained.model_key('recall')[:16]}"
    arrays = {k: np.array([1.0, "x"], dtype=object) for k in trained._HISTORY}
    with open(f"{stem}-history.npz", "wb") as file:
        np.savez(file, **arrays)
    trained.trained_model("recall", folder=tmp_path)
    assert stub_training == ["recall", "recall"]


def test_the_corpus_and_the_chars_config_are_the_recipes():
    from attncourse.model import ModelConfig
    from attncourse.text import decode, make_corpus
    vocab, train_ids, held_out = trained.corpus_split()
    text = make_corpus(trained.CORPUS_SENTENCES, seed=0)
    assert decode(train_ids, vocab) == text[:len(train_ids)]
    assert trained._config("chars") == ModelConfig(n_vocab=len(vocab), T_max=32, D=32,
                                                   heads=2, layers=2, ratio=2)


def test_train_recipe_passes_its_settings_to_the_loop(monkeypatch, capsys):
    from attncourse.model import init_model
    from attncourse.train import as_dtype
    calls = []

    def train(params, batch, **settings):
        calls.append((params, settings))
        return params, {}

    monkeypatch.setattr(trained, "train", train)
    evaluate = object()
    trained.train_recipe("recall", evaluate=evaluate, every=7, steps=10, lines=3)
    params, settings = calls[-1]
    recipe = trained.RECIPES["recall"]
    want = init_model(recipe.config, seed=recipe.seed)
    for name, x in flatten_params(as_dtype(want, np.float32)).items():
        assert_array_equal(flatten_params(params)[name], x)
    assert settings["evaluate"] is evaluate and settings["every"] == 7
    assert (settings["lines"], settings["steps"], settings["warmup"]) == (3, 10, 10)
    trained.train_recipe("recall", steps=10, warmup=30)
    assert calls[-1][1]["warmup"] == 30 and calls[-1][1]["lines"] == 5
    trained.train_recipe("recall", steps=10, warmup=5)
    assert calls[-1][1]["warmup"] == 5


def test_mean_loss_reads_whole_windows_of_t_tokens():
    from attncourse.loss import cross_entropy
    from attncourse.model import model_forward
    params, config, _ = trained.train_recipe("chars", steps=1, lines=0)
    _, _, held_out = trained.corpus_split()
    for T, n in ((8, 3), (config.T_max, 2)):
        for ids in (held_out[:n * T + 1], held_out[:n * T + 3]):  # n windows and a rest
            logits, _ = model_forward(params, ids[:n * T].reshape(n, T), config=config)
            want = cross_entropy(logits.reshape(n * T, -1), ids[1:n * T + 1])
            got = trained.mean_loss(params, config, ids,
                                    T=None if T == config.T_max else T)
            assert got == want
    ids = held_out[:2 * 8]  # 16 tokens hold one whole window of 8 and its targets
    logits, _ = model_forward(params, ids[:8].reshape(1, 8), config=config)
    assert (trained.mean_loss(params, config, ids, T=8)
            == cross_entropy(logits[0], ids[1:9]))


def test_held_out_recall_is_its_own_seeded_draw():
    from attncourse.text import recall_batch
    ids, answers = trained.held_out_recall()
    want_ids, want_targets, _ = recall_batch(trained.recall_task(), 2000,
                                             np.random.default_rng([12345]))
    assert_array_equal(ids, want_ids)
    assert_array_equal(answers, want_targets[:, -1])  # the answer is the last target


def test_the_processor_of_this_machine_is_read_from_proc_cpuinfo():
    if not pathlib.Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo on this system")
    assert trained._cpu_model() == trained._cpu_model("/proc/cpuinfo")


# --- Chapter 11: Tiny Shakespeare -----------------------------------------------------


_SPLITS = {}  # kind -> trained.shakespeare_split(kind), for split_once


@pytest.fixture
def split_once(monkeypatch):
    """``trained.shakespeare_split`` computed once per kind for the tests that take this
    fixture, for the tests' calls and those of ``trained._batches`` alike (the byte-pair
    split trains 256 merges on a megabyte and encodes it); it is a function of the
    corpus, which these tests leave as it is."""
    real = trained.shakespeare_split

    def once(kind="chars"):
        if kind not in _SPLITS:
            _SPLITS[kind] = real(kind)
        return _SPLITS[kind]

    monkeypatch.setattr(trained, "shakespeare_split", once)


def test_the_shakespeare_recipes_read_nanogpts_split(split_once):
    from attncourse import bpe
    vocab, train_ids, held_out = trained.shakespeare_split("chars")
    train_text, held_out_text = bpe.split_text(bpe.shakespeare())
    assert trained.RECIPES["shakespeare_chars"].config.n_vocab == len(vocab) == 65
    assert (len(train_ids), len(held_out)) == (len(train_text), len(held_out_text))
    merges, train_bpe_ids, held_out_bpe = trained.shakespeare_split("bpe")
    assert len(merges) == trained.SHAKESPEARE_MERGES
    assert trained.RECIPES["shakespeare_bpe"].config.n_vocab == 256 + len(merges)
    assert bpe.decode(held_out_bpe, merges) == held_out_text
    assert merges == bpe.train_bpe(train_text, trained.SHAKESPEARE_MERGES)  # train only
    with pytest.raises(ValueError, match="kind must be 'chars' or 'bpe', got 'words'"):
        trained.shakespeare_split("words")


def test_a_shakespeare_batch_is_a_window_of_the_training_ids_and_its_shift(
        split_once):
    for kind in ("chars", "bpe"):
        recipe = trained.RECIPES[f"shakespeare_{kind}"]
        _, train_ids, _ = trained.shakespeare_split(kind)
        x, y, counted = trained._batches(f"shakespeare_{kind}")(3)
        assert x.shape == y.shape == (recipe.batch_size, recipe.data["T"])
        assert counted is None and x.max() < recipe.config.n_vocab
        text = train_ids.tolist()
        start = [i for i in range(len(text) - 64) if text[i:i + 8] == x[0, :8].tolist()]
        assert any(text[s + 1:s + 65] == y[0].tolist() for s in start)


def test_the_shakespeare_key_covers_the_tokenizer_and_the_corpus(monkeypatch):
    from attncourse import bpe
    assert "bpe.py" in trained.training_modules()  # its source is in every key
    import dataclasses
    recipe = trained.RECIPES["shakespeare_chars"]
    assert recipe.data["corpus"] == bpe.SHA256
    chars_key = trained.model_key("shakespeare_chars")
    monkeypatch.setitem(trained.RECIPES, "shakespeare_chars", dataclasses.replace(
        recipe, data={**recipe.data, "corpus": "0" * 64}))
    assert trained.model_key("shakespeare_chars") != chars_key
