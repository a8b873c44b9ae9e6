"""Realise a derivation as a German sentence, its English translation and their gold word alignment.

Every word is created together with its translation: a *link group* ties German words to the English
words they translate (``einen ↔ a``, ``genießen ↔ are enjoying``, ``im ↔ in the``, ``im Freien ↔
outdoors``). Word order then differs freely between the languages (verb-second, verb-final, separable
particles, participles at the end), and the alignment is read off at the very end: German token i and
English token j are aligned when they share a group.

The derivation (what the sampler chooses) is plain data: noun phrases (``NP``), a ``Clause`` with a verb,
its complements and an optional place, and a ``Sentence`` that combines clauses.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from helpers.corpus.lexicon import Adjective, Noun, Place, Slot, TimeAdverbial, Verb
from helpers.corpus.morphology import (
    adjective_form,
    contract,
    definite_article,
    ein_word,
    english_indefinite,
)

Token = tuple[str, tuple[int, ...]]  # a word and the link groups it belongs to

_group_ids = itertools.count()  # only compared for equality within one sentence


def _new_group() -> int:
    return next(_group_ids)


@dataclass
class Phrase:
    """German and English tokens of one constituent, each token with its link groups."""

    de: list[Token] = field(default_factory=list)
    en: list[Token] = field(default_factory=list)

    def __add__(self, other: Phrase) -> Phrase:
        return Phrase(self.de + other.de, self.en + other.en)


def pair(de: str, en: str, group: int | None = None) -> Phrase:
    """German words ``de`` translating English words ``en`` as one block (either side may be empty)."""
    g = _new_group() if group is None else group
    return Phrase([(w, (g,)) for w in de.split()], [(w, (g,)) for w in en.split()])


def join(*phrases: Phrase) -> Phrase:
    out = Phrase()
    for p in phrases:
        out = out + p
    return out


# ---------------------------------------------------------------------------------------------------
# Noun phrases
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Who a possessive refers to: German stem (*sein*/*ihr*) and English word (his/her/their)."""

    de: str
    en: str


OWNER_BY_SEX = {"m": Owner("sein", "his"), "f": Owner("ihr", "her"), "pl": Owner("ihr", "their")}
PRONOUN = {"m": ("er", "he"), "f": ("sie", "she"), "pl": ("sie", "they")}


@dataclass(frozen=True)
class NP:
    """A noun phrase. ``det``: ``indef``, ``def``, ``poss`` (with ``owner``), ``num`` (with ``number``)
    or ``bare`` (no article: mass nouns in the singular, other nouns in the plural)."""

    noun: Noun
    det: str
    plural: bool = False
    adj: Adjective | None = None
    owner: Owner | None = None
    number: tuple[str, str] | None = None

    @property
    def grammatical_plural(self) -> bool:
        return self.plural or self.noun.gender == "pl"

    @property
    def sex(self) -> str | None:
        """Key into OWNER_BY_SEX / PRONOUN for a possessive or pronoun referring to this phrase."""
        return "pl" if self.plural else self.noun.sex


def realise_np(np: NP, case: str) -> Phrase:
    """German and English for ``np`` in ``case``, with article, adjective and noun each linked."""
    gender = "pl" if np.grammatical_plural else np.noun.gender
    if np.det == "def":
        det_de, declension = definite_article(gender, case), "weak"  # type: ignore[arg-type]
    elif np.det == "indef":
        det_de, declension = ein_word("ein", gender, case), "mixed"  # type: ignore[arg-type]
    elif np.det == "poss":
        if np.owner is None:
            raise ValueError(f"possessive noun phrase for {np.noun.de} has no owner")
        det_de, declension = ein_word(np.owner.de, gender, case), "mixed"  # type: ignore[arg-type]
    elif np.det == "num":
        if np.number is None:
            raise ValueError(f"numbered noun phrase for {np.noun.de} has no number")
        det_de, declension = np.number[0], "strong"
    elif np.det == "bare":
        det_de, declension = "", "strong"
    else:
        raise ValueError(f"det must be indef, def, poss, num or bare, got {np.det!r}")

    noun_de = np.noun.german(np.plural, case)
    noun_en = np.noun.english(np.plural)
    adj_en = np.adj.english(np.noun) if np.adj else ""
    if np.det == "def":
        det_en = "the"
    elif np.det == "indef":
        det_en = english_indefinite((adj_en or noun_en).split()[0])
    elif np.det == "poss":
        det_en = np.owner.en  # type: ignore[union-attr]
    elif np.det == "num":
        det_en = np.number[1]  # type: ignore[index]
    else:
        det_en = ""

    phrase = Phrase()
    if det_de or det_en:
        phrase += pair(det_de, det_en)
    if np.adj:
        phrase += pair(adjective_form(np.adj.stem, gender, case, declension), adj_en)  # type: ignore[arg-type]
    if np.det == "bare" and np.noun.en_article:  # "spielt Gitarre" -> "is playing the guitar"
        noun_en = f"{np.noun.en_article} {noun_en}"
    return phrase + pair(noun_de, noun_en)


def realise_pp(de_prep: str, en_prep: str, np: NP, case: str, prep_group: int | None = None) -> Phrase:
    """A prepositional phrase; *in dem* becomes *im* (one German token linked to *in* and *the*).

    ``prep_group``: link the preposition to this group (the verb's) instead of a new one; used when
    English has no preposition of its own (*klettert auf einen Baum → is climbing a tree*).
    """
    g_prep = _new_group() if prep_group is None else prep_group
    inner = realise_np(np, case)
    prep_en_tokens = [(w, (g_prep,)) for w in en_prep.split()]
    if np.det == "def" and inner.de:
        article, article_groups = inner.de[0]
        merged = contract(de_prep, article)
        if merged is not None:
            return Phrase([(merged, (g_prep, *article_groups))] + inner.de[1:], prep_en_tokens + inner.en)
    return Phrase([(de_prep, (g_prep,))] + inner.de, prep_en_tokens + inner.en)


# ---------------------------------------------------------------------------------------------------
# Places and adverbials
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlaceChoice:
    place: Place
    adj: Adjective | None = None


def realise_place(choice: PlaceChoice) -> Phrase:
    place = choice.place
    if place.fixed:
        return join(*(pair(de, en) for de, en in place.fixed))
    assert place.noun is not None
    np = NP(place.noun, place.det, adj=choice.adj)
    return realise_pp(place.de_prep, place.en_prep, np, place.case)


def realise_time(adverbial: TimeAdverbial) -> Phrase:
    return join(*(pair(de, en) for de, en in adverbial.pieces))


# ---------------------------------------------------------------------------------------------------
# Clauses
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """One or two coordinated noun phrases, or a pronoun (``pronoun``: key into PRONOUN)."""

    conjuncts: tuple[NP, ...] = ()
    pronoun: str | None = None

    @property
    def plural(self) -> bool:
        if self.pronoun is not None:
            return self.pronoun == "pl"
        return len(self.conjuncts) > 1 or self.conjuncts[0].grammatical_plural

    @property
    def sex(self) -> str | None:
        """For possessives referring to the subject: m, f, pl or None (no possessive possible)."""
        if self.pronoun is not None:
            return self.pronoun
        if len(self.conjuncts) > 1:
            return "pl"
        return self.conjuncts[0].sex


def realise_subject(subject: Subject) -> Phrase:
    if subject.pronoun is not None:
        de, en = PRONOUN[subject.pronoun]
        return pair(de, en)
    parts = [realise_np(subject.conjuncts[0], "nom")]
    for np in subject.conjuncts[1:]:
        parts += [pair("und", "and"), realise_np(np, "nom")]
    return join(*parts)


@dataclass(frozen=True)
class Clause:
    """A subject, a verb, one noun phrase per verb slot, an optional place and a tense."""

    subject: Subject
    verb: Verb
    objects: tuple[NP, ...] = ()
    place: PlaceChoice | None = None
    tense: str = "present"  # or "perfect"


@dataclass
class _ClauseParts:
    """A clause cut into the pieces that German and English order differently."""

    subject: Phrase
    finite_de: list[Token]  # present: the finite verb; perfect: the auxiliary
    right_de: list[Token]  # the right bracket: particle or participle
    middle_de: list[Token]  # complements, place, fixed pieces, in German order
    verb_en: list[Token]  # is/are + -ing form, or has/have + participle
    rest_en: list[Token]  # complements, fixed pieces, place in English order
    particle_joins: bool  # a subordinate clause writes particle + verb as one word


def _clause_parts(clause: Clause, *, front_place: bool = False) -> _ClauseParts:
    verb = clause.verb
    plural = clause.subject.plural
    g_verb = _new_group()
    if clause.tense == "perfect":
        if not verb.perfect:
            raise ValueError(f"verb {verb.key} is not used in the perfect")
        g_aux = _new_group()
        aux = {"haben": ("hat", "haben"), "sein": ("ist", "sind")}[verb.aux][plural]
        finite_de = [(aux, (g_aux,))]
        right_de = [(w, (g_verb,)) for w in verb.participle.split()]
        verb_en = [("have" if plural else "has", (g_aux,))] + [(w, (g_verb,)) for w in verb.en_pp.split()]
    else:
        finite_de = [(verb.de3pl if plural else verb.de3sg, (g_verb,))]
        right_de = [(w, (g_verb,)) for w in verb.particle.split()]
        verb_en = [("are" if plural else "is", (g_verb,))] + [(w, (g_verb,)) for w in verb.en_ing.split()]

    before, after, en_objects, en_to = Phrase(), Phrase(), Phrase(), Phrase()
    for slot, np in zip(verb.slots, clause.objects, strict=True):
        phrase = _realise_slot(slot, np, g_verb)
        if slot.after_place:
            after += phrase
        else:
            before += phrase
        if slot.en_to:  # "liest seiner Tochter ein Buch vor" -> "is reading a book to his daughter"
            first_groups = phrase.en[0][1]
            en_to += Phrase([], [("to", first_groups)] + phrase.en)
        else:
            en_objects += Phrase([], phrase.en)

    fixed = Phrase()
    for de, en in verb.fixed:
        fixed += pair(de, en, group=g_verb if not en else None)

    place = realise_place(clause.place) if clause.place and not front_place else Phrase()
    middle_de = before.de + place.de + after.de + fixed.de
    rest_en = fixed.en + en_objects.en + en_to.en + place.en
    return _ClauseParts(
        realise_subject(clause.subject),
        finite_de,
        right_de,
        middle_de,
        verb_en,
        rest_en,
        particle_joins=bool(verb.particle) and not verb.particle_apart,
    )


def _realise_slot(slot: Slot, np: NP, verb_group: int) -> Phrase:
    if slot.de_prep:
        return realise_pp(slot.de_prep, slot.en_prep, np, slot.case, prep_group=None if slot.en_prep else verb_group)
    return realise_np(np, slot.case)


def main_clause(clause: Clause, front: Phrase | None = None, *, front_place: bool = False) -> Phrase:
    """Verb-second: ``[front] finite subject ...`` or ``subject finite ...``; English keeps SVO.

    ``front``: an adverbial placed first (German inverts subject and verb; English adds a comma).
    ``front_place``: the clause's own place is the fronted adverbial.
    """
    if front_place:
        if clause.place is None:
            raise ValueError("front_place needs a clause with a place")
        front = realise_place(clause.place)
    parts = _clause_parts(clause, front_place=front_place)
    if front is not None:
        de = front.de + parts.finite_de + parts.subject.de + parts.middle_de + parts.right_de
        en = _with_comma(front.en) + parts.subject.en + parts.verb_en + parts.rest_en
    else:
        de = parts.subject.de + parts.finite_de + parts.middle_de + parts.right_de
        en = parts.subject.en + parts.verb_en + parts.rest_en
    return Phrase(de, en)


def subordinate_clause(clause: Clause, conjunction: tuple[str, str]) -> Phrase:
    """Verb-final: ``weil sein Hund einen Ball fängt`` / ``..., weil er in den Bus einsteigt``."""
    parts = _clause_parts(clause)
    g = _new_group()
    if clause.tense == "perfect":
        verb_cluster = parts.right_de + parts.finite_de  # "... geworfen hat"
    elif parts.right_de and parts.particle_joins:  # "einsteigt": particle and verb written as one word
        ((particle, groups),) = parts.right_de
        finite, _ = parts.finite_de[0]
        verb_cluster = [(particle + finite, groups)]
    else:
        verb_cluster = parts.right_de + parts.finite_de  # "spazieren geht" or plain "fängt"
    de = [(conjunction[0], (g,))] + parts.subject.de + parts.middle_de + verb_cluster
    en = [(conjunction[1], (g,))] + parts.subject.en + parts.verb_en + parts.rest_en
    return Phrase(de, en)


def _with_comma(tokens: list[Token]) -> list[Token]:
    word, groups = tokens[-1]
    return tokens[:-1] + [(word + ",", groups)]


# ---------------------------------------------------------------------------------------------------
# Sentences
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SentencePair:
    """One line of the corpus: German, English, gold alignment and what the derivation used."""

    de: str
    en: str
    alignment: tuple[tuple[int, int], ...]  # (German token index, English token index), sorted
    features: frozenset[tuple[str, str, str]]  # combinations for the unseen split: ("adj", A, N), ("subj", N, V)
    phenomena: frozenset[str]

    @property
    def alignment_text(self) -> str:
        return " ".join(f"{i}-{j}" for i, j in self.alignment)


def finish(phrase: Phrase, features: frozenset, phenomena: frozenset) -> SentencePair:
    """Capitalise, add the final full stop to the last word, and read off the alignment."""
    de, en = _sentence_case(phrase.de), _sentence_case(phrase.en)
    links = sorted({(i, j) for i, (_, gi) in enumerate(de) for j, (_, gj) in enumerate(en) if set(gi) & set(gj)})
    return SentencePair(" ".join(w for w, _ in de), " ".join(w for w, _ in en), tuple(links), features, phenomena)


def _sentence_case(tokens: list[Token]) -> list[Token]:
    first, groups = tokens[0]
    out = [(first[:1].upper() + first[1:], groups)] + tokens[1:]
    last, last_groups = out[-1]
    out[-1] = (last + ".", last_groups)
    return out
