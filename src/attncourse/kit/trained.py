"""The course's trained models: the recipe of each, so every chapter can train it again.

Chapter 7 trains two models from a seed; Chapters 8 and 10 use them again. Each later
chapter gets them from the same recipe rather than from a file shipped with the course:
training is deterministic on a given machine, so the chapter gets the same model Chapter
7 showed, and no stored checkpoint can go stale or depend on the machine's arithmetic
(the last bits of a float32 matrix product depend on the BLAS library and its thread
count). :func:`trained_model` trains a recipe once per machine: it keeps the result in
the folder ``$ATTNCOURSE_MODELS`` names (unset: the user's cache, :func:`user_models`)
under a key of everything those bits depend on, and a later call with the same key reads
them back.

- ``"recall"``: the associative-recall model (:class:`attncourse.text.RecallTask`);
- ``"chars"``: a character model of the course corpus
  (:func:`attncourse.text.make_corpus`);
- ``"shakespeare_chars"``, ``"shakespeare_bpe"``: Chapter 11's models of Tiny
  Shakespeare, on characters and on byte-pair tokens (:func:`shakespeare_split`).

Training runs in float32 (faster, and enough for training); checks run in float64.

>>> sorted(RECIPES)
['chars', 'recall', 'shakespeare_bpe', 'shakespeare_chars']
"""

import ast
import contextlib
import hashlib
import inspect
import json
import os
import pathlib
import platform
import sys
import tempfile
import threading
from dataclasses import dataclass, field

import numpy as np

from ..model import ModelConfig, init_model, load_model, model_forward, save_model
from ..text import (RecallTask, build_vocab, encode, make_corpus, recall_batch,
                   recall_batches, window_batches)
from ..train import as_dtype, train

__all__ = ["Recipe", "RECIPES", "recall_task", "corpus_split", "held_out_sentences",
           "train_recipe",
           "trained_model", "model_key", "training_modules", "MODELS_ENV",
           "user_models", "recall_accuracy", "mean_loss", "held_out_recall"]


@dataclass(frozen=True)
class Recipe:
    """How a model is trained: its config, the data's seed, the optimiser's settings."""

    config: ModelConfig
    steps: int
    batch_size: int
    lr: float
    warmup: int
    seed: int = 0
    betas: tuple = (0.9, 0.98)
    weight_decay: float = 0.01
    clip: float = 1.0
    data: dict = field(default_factory=dict)


RECALL_TASK = RecallTask(n_keys=8, n_values=8, n_pairs=5)
CORPUS_SENTENCES = 400
HELD_OUT = 0.1  # the last tenth of the corpus is never trained on

RECIPES = {
    "recall": Recipe(
        config=ModelConfig(n_vocab=RECALL_TASK.n_vocab, T_max=RECALL_TASK.T, D=32,
                           heads=2, layers=2, ratio=2),
        steps=400, batch_size=64, lr=5e-3, warmup=30, seed=1),
    "chars": Recipe(
        config=None, steps=400, batch_size=32, lr=3e-3, warmup=20, seed=2,
        data={"T": 32}),
}


def recall_task():
    """The recall task the ``"recall"`` model is trained on."""
    return RECALL_TASK


def held_out_sentences():
    """Return ``train_text, sentences``: the first nine tenths of the corpus's
    characters, and the whole sentences after them that never occur in that text.

    The sentence cut at the boundary is dropped, and so is every later sentence that
    the training text holds word for word (a small grammar repeats itself), and every
    repeat: what is held out was never seen.

    >>> train_text, sentences = held_out_sentences()
    >>> any(sentence in train_text for sentence in sentences)
    False
    """
    text = make_corpus(CORPUS_SENTENCES, seed=0)
    cut = int(round(len(text) * (1 - HELD_OUT)))
    train_text, rest = text[:cut], text[cut:]
    after = rest[rest.index(". ") + 2:]  # drop the sentence the cut goes through
    sentences = []
    for sentence in (s.strip() + "." for s in after.split(".") if s.strip()):
        if sentence not in train_text and sentence not in sentences:
            sentences.append(sentence)
    return train_text, sentences


def corpus_split():
    """Return ``vocab, train_ids, held_out_ids`` of the course corpus: the first nine
    tenths of its characters, and the unseen sentences after them
    (:func:`held_out_sentences`).

    >>> vocab, train_ids, held_out = corpus_split()
    >>> len(train_ids) > 8 * len(held_out) > 0
    True
    """
    text = make_corpus(CORPUS_SENTENCES, seed=0)
    vocab = build_vocab(text)
    train_text, sentences = held_out_sentences()
    return vocab, encode(train_text, vocab), encode(" ".join(sentences), vocab)


def _chars_config():
    vocab, _, _ = corpus_split()
    return ModelConfig(n_vocab=len(vocab), T_max=RECIPES["chars"].data["T"], D=32,
                       heads=2, layers=2, ratio=2)


def _config(name):
    recipe = RECIPES[name]
    return recipe.config if recipe.config is not None else _chars_config()


def _batches(name):
    if name in _DATA:  # recipes appended below with their own data
        return _DATA[name]()
    recipe = RECIPES[name]
    if name == "recall":
        return recall_batches(RECALL_TASK, recipe.batch_size, recipe.seed)
    _, train_ids, _ = corpus_split()
    return window_batches(train_ids, recipe.data["T"], recipe.batch_size, recipe.seed)


def train_recipe(name, *, evaluate=None, every=None, lines=5, **changes):
    """Train the model ``name`` from its recipe; return ``params, config, history``.

    ``changes`` override recipe fields for an experiment (e.g. ``lr=3e-3``). The same
    call on the same machine returns the same model, bit for bit.
    """
    if name not in RECIPES:
        raise ValueError(f"no recipe {name!r}; the recipes are {sorted(RECIPES)}")
    recipe = RECIPES[name]
    explicit = "warmup" in changes
    settings = {key: changes.pop(key, getattr(recipe, key))
                for key in ("steps", "lr", "warmup", "betas", "weight_decay", "clip")}
    if not explicit:  # a shorter run warms up for at most its length
        settings["warmup"] = min(settings["warmup"], settings["steps"])
    if changes:
        raise ValueError(f"unknown recipe fields {sorted(changes)}")
    config = _config(name)
    params = as_dtype(init_model(config, seed=recipe.seed), np.float32)
    params, history = train(params, _batches(name), config=config, evaluate=evaluate,
                            every=every, lines=lines, **settings)
    return params, config, history


# The recipe's own code, and the core modules train_recipe calls into: what a model's
# bits depend on in this package (model_key hashes them and nothing else of it).
_RECIPE_CODE = (held_out_sentences, corpus_split, _chars_config, _config, _batches,
                train_recipe)
_TRAINING_ROOTS = ("model.py", "text.py", "train.py")
_CORE = pathlib.Path(__file__).resolve().parents[1]
_PARSING = threading.Lock()


def training_modules(core=None):
    """The core modules on the training path, relative to the package's folder:
    ``_TRAINING_ROOTS`` and every module they import, transitively (read with ast).

    >>> "optim.py" in training_modules() and "kvcache.py" not in training_modules()
    True
    """
    core = _CORE if core is None else pathlib.Path(core)
    found, todo = set(), [core / name for name in _TRAINING_ROOTS]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        with _PARSING:  # ast.parse in two threads at once fails on CPython 3.11.7
            tree = ast.parse(path.read_bytes())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:  # the core's own
                parts = node.module.split(".") if node.module else []
                base = path.parents[node.level - 1].joinpath(*parts)
                candidates = [base.with_suffix(".py"),  # from .x import name
                              *(base / f"{alias.name}.py" for alias in node.names)]
                todo += [c for c in candidates if c.is_file() and c not in found]
    return sorted(path.relative_to(core).as_posix() for path in found)


MODELS_ENV = "ATTNCOURSE_MODELS"
"""The environment variable that names the folder :func:`trained_model` keeps
models in (unset: :func:`user_models`; empty: keep none, train every time)."""


def user_models():
    """The folder a learner's models are kept in when ``$ATTNCOURSE_MODELS`` is unset:
    ``attncourse/models`` in the user's cache (``$XDG_CACHE_HOME``, else
    ``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(cache) / "attncourse" / "models"

_HISTORY = ("step", "loss", "lr", "grad_norm", "seconds", "cpu_seconds")
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpu_model(cpuinfo="/proc/cpuinfo"):
    """The processor's model name (from Linux's ``cpuinfo``, else the platform's)."""
    try:
        with open(cpuinfo, encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def model_key(name):
    """A hex digest of everything the bits of ``train_recipe(name)`` depend on.

    The recipe (its settings and its code), the source of the core modules on the
    training path (:func:`training_modules`), the versions of Python and numpy, numpy's
    BLAS library, the BLAS thread settings and the processor: a change to any of them
    gives another key. The rest of the package (the kit, the core modules training
    does not import) is left out: editing it keeps the models.

    >>> model_key("chars") == model_key("chars") != model_key("recall")
    True
    """
    if name not in RECIPES:
        raise ValueError(f"no recipe {name!r}; the recipes are {sorted(RECIPES)}")
    digest = hashlib.sha256()
    for module in training_modules():
        digest.update(module.encode() + b"\0" + (_CORE / module).read_bytes() + b"\0")
    for function in _RECIPE_CODE:
        digest.update(inspect.getsource(function).encode() + b"\0")
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"].get("blas")
    except (TypeError, KeyError):  # numpy before 1.26 prints its config only
        blas = None
    facts = [name, repr(RECIPES[name]), repr(RECALL_TASK), CORPUS_SENTENCES, HELD_OUT,
             sys.version, np.__version__, repr(blas),
             platform.machine(), _cpu_model(),
             *(f"{v}={os.environ.get(v)}" for v in _BLAS_THREADS)]
    digest.update(json.dumps(facts).encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path):
    """Hold an exclusive lock on ``path`` (where the platform has ``fcntl``), so that
    two processes asking for the same model train it once."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; each process may train, the bits agree
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(stem, name):
    try:
        params, config = load_model(f"{stem}.npz")
        with np.load(f"{stem}-history.npz", allow_pickle=False) as stored:
            history = {k: stored[k] for k in _HISTORY}
    except (OSError, ValueError, KeyError):  # missing, partial or foreign: train again
        return None
    if config != _config(name):
        return None
    history.update(seconds=float(history["seconds"]),
                   cpu_seconds=float(history["cpu_seconds"]), eval=[])
    return params, config, history


def _write(path, write):
    """Call ``write(temporary)`` on a new file ``*.tmp`` beside ``path``, then move it
    to ``path``: a reader sees the whole file or none, and a failed write leaves
    nothing."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _save_history(path, history):
    with open(path, "wb") as file:
        np.savez(file, **{k: np.asarray(history[k]) for k in _HISTORY})


def trained_model(name, *, folder=None):
    """Return ``params, config, history`` of ``train_recipe(name, lines=0)``, trained
    once per machine.

    ``folder`` (by default the one ``$ATTNCOURSE_MODELS`` names, or
    :func:`user_models` when it is unset; ``""``: train every time) keeps each model
    under :func:`model_key`. A model kept there with the current
    key is read back instead of trained: the same bits, and the history of the run
    that trained it (its ``"seconds"`` included). Anything else found there is
    ignored, and the model trained again.
    """
    if folder is None:
        folder = os.environ.get(MODELS_ENV, user_models())
    if not folder:
        return train_recipe(name, lines=0)
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{name}-{model_key(name)[:16]}"
    with _locked(f"{stem}.lock"):
        found = _read(stem, name)
        if found is not None:
            return found
        params, config, history = train_recipe(name, lines=0)
        _write(pathlib.Path(f"{stem}-history.npz"),
               lambda path: _save_history(path, history))
        _write(pathlib.Path(f"{stem}.npz"),
               lambda path: save_model(path, params, config))
    return params, config, history


def recall_accuracy(params, config, ids, answers):
    """The fraction of sequences whose answer is the model's most likely next token."""
    logits, _ = model_forward(params, ids, config=config)
    return float(np.mean(logits[:, -1].argmax(axis=-1) == answers))


def mean_loss(params, config, ids, T=None, stride=None):
    """The mean next-token cross-entropy of the model on the 1-D ``ids``, window by
    window."""
    from ..loss import cross_entropy
    T = config.T_max if T is None else T
    n = (len(ids) - 1) // T
    x = np.asarray(ids[:n * T]).reshape(n, T)
    y = np.asarray(ids[1:n * T + 1]).reshape(n, T)
    logits, _ = model_forward(params, x, config=config)
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def held_out_recall(n=2000, seed=12345):
    """``ids, answers`` of ``n`` recall sequences never seen in training (another
    seed)."""
    ids, targets, _ = recall_batch(RECALL_TASK, n, np.random.default_rng([seed]))
    return ids, targets[:, -1]


# --- Chapter 11: Tiny Shakespeare -----------------------------------------------------
# Two models of the same shape on nanoGPT's split (the first 90 % of the characters),
# one reading characters, one reading byte-pair tokens; the same steps, batch and
# window, so the same processor time.

from .. import bpe as _bpe  # noqa: E402  (this section's own import)

SHAKESPEARE_SHA256 = _bpe.SHA256
SHAKESPEARE_MERGES = 256
"""The byte-pair merges of the ``"shakespeare_bpe"`` model (vocabulary 256 + 256)."""


def shakespeare_split(kind="chars"):
    """Return ``tokenizer, train_ids, held_out_ids`` of Tiny Shakespeare on nanoGPT's
    split: for ``kind="chars"`` the tokenizer is the sorted characters of the whole
    text (65), for ``"bpe"`` the :data:`SHAKESPEARE_MERGES` merges learnt on the
    training part alone.

    >>> vocab, train_ids, held_out = shakespeare_split()
    >>> len(vocab), len(train_ids), len(held_out)
    (65, 1003854, 111540)
    """
    text = _bpe.shakespeare()
    train_text, held_out_text = _bpe.split_text(text)
    if kind == "chars":
        vocab = build_vocab(text)
        return vocab, encode(train_text, vocab), encode(held_out_text, vocab)
    if kind == "bpe":
        merges = _bpe.train_bpe(train_text, SHAKESPEARE_MERGES)
        return (merges, _bpe.encode(train_text, merges),
                _bpe.encode(held_out_text, merges))
    raise ValueError(f"kind must be 'chars' or 'bpe', got {kind!r}")


def _shakespeare_batches(kind):
    recipe = RECIPES[f"shakespeare_{kind}"]
    _, train_ids, _ = shakespeare_split(kind)
    return window_batches(train_ids, recipe.data["T"], recipe.batch_size, recipe.seed)


def _shakespeare_config(n_vocab):
    return ModelConfig(n_vocab=n_vocab, T_max=64, D=64, heads=4, layers=2, ratio=4)


RECIPES["shakespeare_chars"] = Recipe(
    config=_shakespeare_config(65), steps=500, batch_size=16, lr=3e-3, warmup=50,
    seed=11, betas=(0.9, 0.99), weight_decay=0.1,
    data={"T": 64, "kind": "chars", "corpus": SHAKESPEARE_SHA256})
RECIPES["shakespeare_bpe"] = Recipe(
    config=_shakespeare_config(256 + SHAKESPEARE_MERGES), steps=500, batch_size=16,
    lr=3e-3, warmup=50, seed=11, betas=(0.9, 0.99), weight_decay=0.1,
    data={"T": 64, "kind": "bpe", "merges": SHAKESPEARE_MERGES,
          "corpus": SHAKESPEARE_SHA256})
_DATA = {"shakespeare_chars": lambda: _shakespeare_batches("chars"),
         "shakespeare_bpe": lambda: _shakespeare_batches("bpe")}


# The tokenizer's module and the corpus's digest (in the recipes' data) decide these
# models' ids: the key covers them too (the corpus is checked against the digest when
# it is read).
_RECIPE_CODE = _RECIPE_CODE + (shakespeare_split, _shakespeare_batches,
                               _shakespeare_config)
_TRAINING_ROOTS = _TRAINING_ROOTS + ("bpe.py",)
