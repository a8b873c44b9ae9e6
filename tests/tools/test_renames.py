"""helpers.tools.renames: old field names of a config dataclass keep working, with a warning aimed at their user."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pytest

from helpers.tools.renames import accepting_old_names, renamed_fields


@accepting_old_names({"heads": "num_heads"})
@dataclass(frozen=True)
class Sizes:
    num_heads: int = 2
    embed_dim: int = 8


def test_the_old_keyword_warns_at_the_line_that_wrote_it_and_is_not_a_field():
    with pytest.warns(DeprecationWarning, match="Sizes field 'heads' is now 'num_heads'") as caught:
        sizes = Sizes(heads=4)
    assert caught[0].filename == __file__  # the caller's line, not the decorator's
    assert sizes == Sizes(num_heads=4) and asdict(sizes) == {"num_heads": 4, "embed_dim": 8}
    with pytest.warns(DeprecationWarning, match=r"Sizes\.heads is now \.num_heads") as caught:
        assert sizes.heads == 4
    assert caught[0].filename == __file__
    assert Sizes.RENAMED_FIELDS == {"heads": "num_heads"}


def test_both_names_at_once_and_a_rename_to_no_field_are_refused():
    with pytest.raises(TypeError, match="Sizes got both 'num_heads' and its old name 'heads'"):
        Sizes(heads=4, num_heads=4)
    with pytest.raises(TypeError, match=r"has no fields \['width'\]"):
        accepting_old_names({"w": "width"})(Sizes)


def test_a_dict_is_renamed_without_touching_the_input_and_unknown_names_pass_through():
    saved = {"heads": 3, "other": 1}
    with pytest.warns(DeprecationWarning):
        assert renamed_fields("Sizes", {"heads": "num_heads"}, saved) == {"num_heads": 3, "other": 1}
    assert saved == {"heads": 3, "other": 1}
