"""German inflection tables (articles, possessives, adjective endings) and the English indefinite article.

A noun phrase's German form depends on three things: gender (``m``, ``f``, ``n``; plural is written
``pl``), case (``nom``, ``acc``, ``dat``, ``gen``) and what kind of word precedes the adjective. German grammar
books call the three adjective declensions:

* weak — after a definite article (*der kleine Hund*, *dem kleinen Hund*);
* mixed — after *ein*, *kein* or a possessive (*ein kleiner Hund*, *seinem kleinen Hund*);
* strong — with no article, or after a number (*zwei kleine Hunde*, *mit kleinen Hunden*).
"""

from __future__ import annotations

from typing import Literal

Gender = Literal["m", "f", "n", "pl"]
Case = Literal["nom", "acc", "dat", "gen"]
Declension = Literal["weak", "mixed", "strong"]

GENDERS: tuple[Gender, ...] = ("m", "f", "n", "pl")
CASES: tuple[Case, ...] = ("nom", "acc", "dat", "gen")

#: The definite article, by gender/number then case.
DEFINITE: dict[str, dict[str, str]] = {
    "m": {"nom": "der", "acc": "den", "dat": "dem", "gen": "des"},
    "f": {"nom": "die", "acc": "die", "dat": "der", "gen": "der"},
    "n": {"nom": "das", "acc": "das", "dat": "dem", "gen": "des"},
    "pl": {"nom": "die", "acc": "die", "dat": "den", "gen": "der"},
}

#: Endings of *ein* and of the possessives *sein*/*ihr* (which decline like *ein*, and also have a plural).
EIN_ENDING: dict[str, dict[str, str]] = {
    "m": {"nom": "", "acc": "en", "dat": "em", "gen": "es"},
    "f": {"nom": "e", "acc": "e", "dat": "er", "gen": "er"},
    "n": {"nom": "", "acc": "", "dat": "em", "gen": "es"},
    "pl": {"nom": "e", "acc": "e", "dat": "en", "gen": "er"},
}

#: Adjective endings for each declension, by gender/number then case.
ADJECTIVE_ENDING: dict[str, dict[str, dict[str, str]]] = {
    "weak": {
        "m": {"nom": "e", "acc": "en", "dat": "en", "gen": "en"},
        "f": {"nom": "e", "acc": "e", "dat": "en", "gen": "en"},
        "n": {"nom": "e", "acc": "e", "dat": "en", "gen": "en"},
        "pl": {"nom": "en", "acc": "en", "dat": "en", "gen": "en"},
    },
    "mixed": {
        "m": {"nom": "er", "acc": "en", "dat": "en", "gen": "en"},
        "f": {"nom": "e", "acc": "e", "dat": "en", "gen": "en"},
        "n": {"nom": "es", "acc": "es", "dat": "en", "gen": "en"},
        "pl": {"nom": "en", "acc": "en", "dat": "en", "gen": "en"},  # plural possessives (seine) take weak endings
    },
    "strong": {
        "m": {"nom": "er", "acc": "en", "dat": "em", "gen": "en"},
        "f": {"nom": "e", "acc": "e", "dat": "er", "gen": "er"},
        "n": {"nom": "es", "acc": "es", "dat": "em", "gen": "en"},
        "pl": {"nom": "e", "acc": "e", "dat": "en", "gen": "er"},
    },
}

#: Preposition + definite article pairs that German always contracts in neutral speech.
CONTRACTIONS: dict[tuple[str, str], str] = {
    ("in", "dem"): "im",
    ("an", "dem"): "am",
    ("in", "das"): "ins",
    ("zu", "dem"): "zum",
    ("zu", "der"): "zur",
    ("bei", "dem"): "beim",
    ("von", "dem"): "vom",
}


def _check(gender: str, case: str) -> None:
    if gender not in DEFINITE:
        raise ValueError(f"gender must be one of {GENDERS}, got {gender!r}")
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")


def definite_article(gender: Gender, case: Case) -> str:
    """*der/die/das/den/dem/...* for a noun of ``gender`` (``pl`` for plural) in ``case``."""
    _check(gender, case)
    return DEFINITE[gender][case]


def ein_word(stem: str, gender: Gender, case: Case) -> str:
    """``stem`` (*ein*, *sein*, *ihr*) with its ending: ``ein_word("sein", "m", "dat") == "seinem"``."""
    _check(gender, case)
    if gender == "pl" and stem == "ein":
        raise ValueError("the indefinite article 'ein' has no plural; use a number or no article")
    return stem + EIN_ENDING[gender][case]


def adjective_form(stem: str, gender: Gender, case: Case, declension: Declension) -> str:
    """The declined adjective: ``adjective_form("klein", "m", "nom", "mixed") == "kleiner"``."""
    _check(gender, case)
    if declension not in ADJECTIVE_ENDING:
        raise ValueError(f"declension must be weak, mixed or strong, got {declension!r}")
    return stem + ADJECTIVE_ENDING[declension][gender][case]


def contract(preposition: str, article: str) -> str | None:
    """The contracted form (*im*, *ins*, *zum*, ...) or None when the pair does not contract."""
    return CONTRACTIONS.get((preposition, article))


#: Words starting with a vowel letter but a consonant sound (and the reverse), for a/an.
_AN_EXCEPTIONS = {
    "hour": "an",
    "honest": "an",
    "uniform": "a",
    "university": "a",
    "unicycle": "a",
    "european": "a",
    "one": "a",
    "useful": "a",
}


def english_indefinite(next_word: str) -> str:
    """``"a"`` or ``"an"``, chosen by the sound that the following word starts with."""
    word = next_word.lower()
    if word in _AN_EXCEPTIONS:
        return _AN_EXCEPTIONS[word]
    return "an" if word[:1] in "aeiou" else "a"
