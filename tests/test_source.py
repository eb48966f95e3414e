"""kit.source: the package's own code, shown on the page."""

import pytest

import attncourse as ac
from attncourse.kit import source


def test_shows_the_function_from_its_file_without_its_docstring():
    text = source(ac.attention_forward).data
    assert text.startswith("```python\n# attncourse/layers/attention.py\n")
    assert "def attention_forward(Q, K, V, visible=None):" in text
    assert "O = A @ V" in text
    assert "Return ``O, saved``" not in text
    assert text.endswith("\n```")


def test_keeps_the_docstring_when_asked_and_joins_several():
    text = source(ac.softmax, ac.attention_backward, docstring=True).data
    assert "# attncourse/softmax.py" in text
    assert "# attncourse/layers/attention.py" in text
    assert "The formulas of Chapter 3" in text


@pytest.mark.parametrize("obj", [print, pytest.raises])
def test_refuses_what_is_not_the_package(obj):
    with pytest.raises(ValueError, match="not defined in attncourse"):
        source(obj)


def test_refuses_nothing():
    with pytest.raises(ValueError, match="at least one"):
        source()
