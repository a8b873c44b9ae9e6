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

from course.corpus.lexicon import Adjective, Modal, Noun, Place, Slot, TimeAdverbial, Verb
from course.corpus.morphology import (
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
    """A noun phrase. ``det``: ``indef``, ``def``, ``poss`` (with ``owner``), ``num`` (with ``number``),
    ``bare`` (no article: mass nouns in the singular, other nouns in the plural), ``kein`` (negated:
    *keinen Hut* → *not ... a hat*, English ``not`` placed by the clause) or ``gen`` (definite, owned by
    ``possessor`` in the genitive: *den Hund des Nachbarn* → *the neighbor's dog*)."""

    noun: Noun
    det: str
    plural: bool = False
    adj: Adjective | None = None
    owner: Owner | None = None
    number: tuple[str, str] | None = None
    possessor: Noun | None = None

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
    elif np.det == "kein":
        det_de, declension = ein_word("kein", gender, case), "mixed"  # type: ignore[arg-type]
    elif np.det == "gen":
        if np.possessor is None or np.possessor.genitive is None:
            raise ValueError(f"genitive noun phrase for {np.noun.de} has no possessor with a genitive form")
        det_de, declension = definite_article(gender, case), "weak"  # type: ignore[arg-type]
    else:
        raise ValueError(f"det must be indef, def, poss, num, bare, kein or gen, got {np.det!r}")

    noun_de = np.noun.german(np.plural, case)
    noun_en = np.noun.english(np.plural)
    adj_en = np.adj.english(np.noun) if np.adj else ""
    idiom = np.noun.idiom(np.adj.key) if np.adj else None
    if idiom is not None:  # "heißen Kakao" -> "hot chocolate": heißen-hot, Kakao-chocolate
        adj_en, noun_en = idiom
    countable_singular = not np.grammatical_plural and (not np.noun.has("mass") or np.noun.has("countsg"))
    if np.det == "def":
        det_en = "the"
    elif np.det == "indef" or (np.det == "kein" and not np.noun.has("mass")):  # "keine Suppe" -> "not ... soup"
        det_en = english_indefinite((adj_en or noun_en).split()[0]) if countable_singular else ""
    elif np.det == "poss":
        det_en = np.owner.en  # type: ignore[union-attr]
    elif np.det == "num":
        det_en = np.number[1]  # type: ignore[index]
    else:
        det_en = ""

    phrase = Phrase()
    if np.det == "gen":
        # German: article + (adjective) + noun + des + owner; English: the + owner's + (adjective) + noun.
        # The head's article has no English word of its own: it is linked to the noun it belongs to.
        possessor = np.possessor
        assert possessor is not None and possessor.genitive is not None  # raised on above, with the reason
        owner = pair(definite_article(possessor.gender, "gen"), "the") + pair(possessor.genitive, possessor.en + "'s")  # type: ignore[arg-type]
        g_noun = _new_group()
        head = Phrase([(det_de, (g_noun,))], [])
        if np.adj:
            head += pair(adjective_form(np.adj.stem, gender, case, declension), adj_en)  # type: ignore[arg-type]
        noun = pair(noun_de, noun_en, group=g_noun)
        return Phrase(head.de + noun.de + owner.de, owner.en + head.en + noun.en)
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
            return Phrase([(merged, (g_prep, *article_groups)), *inner.de[1:]], prep_en_tokens + inner.en)
    return Phrase([(de_prep, (g_prep,)), *inner.de], prep_en_tokens + inner.en)


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
    """A subject, a verb, one noun phrase per verb slot, an optional place and a tense.

    ``tense``: ``present``, ``perfect`` (German *hat ... gespielt*; English simple past *played*) or
    ``modal`` (with ``modal``: *will ... spielen* → *wants to play*); ``negated``: *nicht* in a modal clause.
    """

    subject: Subject
    verb: Verb
    objects: tuple[NP, ...] = ()
    place: PlaceChoice | None = None
    tense: str = "present"
    modal: Modal | None = None
    negated: bool = False


@dataclass
class _ClauseParts:
    """A clause cut into the pieces that German and English order differently."""

    subject: Phrase
    finite_de: list[Token]  # present: the finite verb; perfect: the auxiliary; modal: the modal
    right_de: list[Token]  # the right bracket: particle, participle or infinitive
    middle_de: list[Token]  # complements, place, fixed pieces, in German order
    verb_en: list[Token]  # is/are (not) + -ing form, simple past, simple present, or modal + infinitive
    rest_en: list[Token]  # complements, fixed pieces, place in English order
    particle_joins: bool  # a subordinate clause writes particle + verb as one word
    verb_group: int  # the link group of the main verb (a dropped English subject links here)


#: How the English verb is written: ``progressive`` (*is playing*; the German perfect becomes the simple
#: past *played*), ``simple`` (*plays*: habits in *when* clauses) or ``gerund`` (*before/after playing*,
#: no English subject).
ENGLISH_FORMS = ("progressive", "simple", "gerund")


def _english_verb(clause: Clause, form: str, g_verb: int, g_aux: int, neg_group: int | None) -> list[Token]:
    verb, plural = clause.verb, clause.subject.plural
    if form not in ENGLISH_FORMS:
        raise ValueError(f"English form must be one of {ENGLISH_FORMS}, got {form!r}")
    if clause.tense == "modal":
        modal = clause.modal
        if modal is None:
            raise ValueError(f"modal clause with {verb.key} has no modal verb")
        words: list[Token] = []
        if clause.negated:
            text = modal.en_neg_pl if plural else modal.en_neg_sg
            if not text:
                raise ValueError(f"modal {modal.key} is not used with nicht")
            for item in text.split():
                word, role = item.split(":")
                groups = {"m": (g_aux,), "n": (neg_group,), "b": (g_aux, neg_group)}[role]
                words.append((word, groups))  # type: ignore[arg-type]
        else:
            words = [(w, (g_aux,)) for w in (modal.en_pl if plural else modal.en_sg).split()]
        return words + [(w, (g_verb,)) for w in verb.en_base.split()]
    if form == "gerund":
        return [(w, (g_verb,)) for w in verb.en_ing.split()]
    if clause.tense == "perfect":
        return [(w, (g_verb,)) for w in verb.en_past.split()]
    if form == "simple":
        return [(w, (g_verb,)) for w in verb.en_present(plural).split()]
    be: list[Token] = [("are" if plural else "is", (g_verb,))]
    if neg_group is not None:  # "trägt keinen Hut" -> "is not wearing a hat"
        be.append(("not", (neg_group,)))
    return be + [(w, (g_verb,)) for w in verb.en_ing.split()]


def _clause_parts(clause: Clause, *, front_place: bool = False, form: str = "progressive") -> _ClauseParts:
    verb = clause.verb
    plural = clause.subject.plural
    g_verb = _new_group()
    g_aux = _new_group()
    finite_de: list[Token]
    right_de: list[Token]
    if clause.tense == "perfect":
        if not verb.perfect:
            raise ValueError(f"verb {verb.key} is not used in the perfect")
        # The auxiliary shares the verb's link group: "hat ... getanzt" are both linked to "danced".
        aux = {"haben": ("hat", "haben"), "sein": ("ist", "sind")}[verb.aux][plural]
        finite_de = [(aux, (g_verb,))]
        right_de = [(w, (g_verb,)) for w in verb.participle.split()]
    elif clause.tense == "modal":
        if clause.modal is None:
            raise ValueError(f"modal clause with {verb.key} has no modal verb")
        finite_de = [(clause.modal.de3pl if plural else clause.modal.de3sg, (g_aux,))]
        right_de = [(w, (g_verb,)) for w in verb.de_infinitive]
    elif clause.tense == "present":
        finite_de = [(verb.de3pl if plural else verb.de3sg, (g_verb,))]
        right_de = [(w, (g_verb,)) for w in verb.particle.split()]
    else:
        raise ValueError(f"tense must be present, perfect or modal, got {clause.tense!r}")

    before, after, en_objects, en_to = Phrase(), Phrase(), Phrase(), Phrase()
    neg_group: int | None = None
    n_definite = 0  # leading definite/possessive objects: "nicht" follows them
    for slot, np in zip(verb.slots, clause.objects, strict=True):
        phrase = _realise_slot(slot, np, g_verb)
        if np.det == "kein":
            if slot.de_prep or clause.tense != "present":
                raise ValueError("kein negates a direct object of a present-tense clause only")
            neg_group = phrase.de[0][1][0]
        if slot.after_place or (np.det == "bare" and np.noun.has("instrument", "sport", "game")):
            after += phrase  # "hat im Park Fußball gespielt": a bare object stays next to its verb
        else:
            if len(before.de) == n_definite and np.det in ("def", "poss", "gen") and not slot.de_prep:
                n_definite += len(phrase.de)
            before += phrase
        if slot.en_to:  # "liest seiner Tochter ein Buch vor" -> "is reading a book to his daughter"
            first_groups = phrase.en[0][1]
            en_to += Phrase([], [("to", first_groups), *phrase.en])
        else:
            en_objects += Phrase([], phrase.en)
    nicht: list[Token] = []
    if clause.negated:
        if clause.tense != "modal":
            raise ValueError("nicht is only placed in modal clauses here")
        neg_group = _new_group()
        nicht = [("nicht", (neg_group,))]

    fixed = Phrase()
    for de, en in verb.fixed:
        fixed += pair(de, en, group=g_verb if not en else None)

    place = realise_place(clause.place) if clause.place and not front_place else Phrase()
    middle_de = before.de[:n_definite] + nicht + before.de[n_definite:] + place.de + after.de + fixed.de
    rest_en = fixed.en + en_objects.en + en_to.en + place.en
    return _ClauseParts(
        realise_subject(clause.subject),
        finite_de,
        right_de,
        middle_de,
        _english_verb(clause, form, g_verb, g_aux, neg_group),
        rest_en,
        particle_joins=clause.tense == "present" and bool(verb.particle) and not verb.particle_apart,
        verb_group=g_verb,
    )


def _realise_slot(slot: Slot, np: NP, verb_group: int) -> Phrase:
    if slot.de_prep:
        return realise_pp(slot.de_prep, slot.en_prep, np, slot.case, prep_group=None if slot.en_prep else verb_group)
    return realise_np(np, slot.case)


def main_clause(
    clause: Clause,
    front: Phrase | None = None,
    *,
    front_place: bool = False,
    relative: Phrase | None = None,
    form: str = "progressive",
) -> Phrase:
    """Verb-second: ``[front] finite subject ...`` or ``subject finite ...``; English keeps SVO.

    ``front``: an adverbial placed first (German inverts subject and verb; English adds a comma) or a
    subordinate clause placed first (``front`` ending in a comma already: no English comma is added).
    ``front_place``: the clause's own place is the fronted adverbial.
    ``relative``: a relative clause on the subject, between commas in German (*Ein Junge, der ..., spielt*).
    """
    if front_place:
        if clause.place is None:
            raise ValueError("front_place needs a clause with a place")
        front = realise_place(clause.place)
    parts = _clause_parts(clause, front_place=front_place, form=form)
    subject = parts.subject
    if relative is not None:
        if front is not None:
            raise ValueError("a relative clause on the subject needs the subject first")
        subject = Phrase(_with_comma(subject.de) + _with_comma(relative.de), subject.en + relative.en)
    if front is not None:
        de = front.de + parts.finite_de + subject.de + parts.middle_de + parts.right_de
        en = _with_comma(front.en) + subject.en + parts.verb_en + parts.rest_en
    else:
        de = subject.de + parts.finite_de + parts.middle_de + parts.right_de
        en = subject.en + parts.verb_en + parts.rest_en
    return Phrase(de, en)


def _verb_final(clause: Clause, parts: _ClauseParts) -> list[Token]:
    """The verb cluster at the end of a subordinate clause: *geworfen hat*, *einsteigt*, *spielen will*."""
    if parts.right_de and parts.particle_joins:  # "einsteigt": particle and verb written as one word
        ((particle, groups),) = parts.right_de
        finite, _ = parts.finite_de[0]
        return [(particle + finite, groups)]
    return parts.right_de + parts.finite_de  # "geworfen hat", "spazieren geht", "spielen will", "fängt"


def subordinate_clause(clause: Clause, conjunction: tuple[str, str], form: str = "progressive") -> Phrase:
    """Verb-final: ``weil sein Hund einen Ball fängt`` / ``..., weil er in den Bus einsteigt``.

    ``form="gerund"`` drops the English subject (*bevor er einsteigt* → *before getting on*); the German
    pronoun is then linked to the English verb, which carries its meaning.
    """
    parts = _clause_parts(clause, form=form)
    g = _new_group()
    subject = parts.subject
    if form == "gerund":
        if clause.subject.pronoun is None:
            raise ValueError("a gerund clause needs a pronoun subject (the main clause's subject)")
        subject = Phrase([(w, (parts.verb_group,)) for w, _ in subject.de], [])
    de = [(conjunction[0], (g,)), *subject.de, *parts.middle_de, *_verb_final(clause, parts)]
    en = [(conjunction[1], (g,)), *subject.en, *parts.verb_en, *parts.rest_en]
    return Phrase(de, en)


#: Relative pronouns in the nominative, by the antecedent's grammatical gender (or ``pl``).
RELATIVE_PRONOUN = {"m": "der", "f": "die", "n": "das", "pl": "die"}


def relative_clause(clause: Clause) -> Phrase:
    """*der einen Hut trägt* → *who is wearing a hat*: verb-final, the pronoun agreeing with the subject.

    ``clause.subject`` is the antecedent (one noun phrase); German takes its gender and number, English
    *who* for people and *that* for animals.
    """
    if clause.subject.pronoun is not None or len(clause.subject.conjuncts) != 1:
        raise ValueError("a relative clause needs one noun phrase as its antecedent")
    antecedent = clause.subject.conjuncts[0]
    parts = _clause_parts(clause)
    gender = "pl" if antecedent.grammatical_plural else antecedent.noun.gender
    pronoun = pair(RELATIVE_PRONOUN[gender], "who" if antecedent.noun.has("person") else "that")
    de = pronoun.de + parts.middle_de + _verb_final(clause, parts)
    en = pronoun.en + parts.verb_en + parts.rest_en
    return Phrase(de, en)


def _with_comma(tokens: list[Token]) -> list[Token]:
    word, groups = tokens[-1]
    return [*tokens[:-1], (word + ",", groups)]


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
    english_tokens_of: dict[int, list[int]] = {}  # alignment group -> English tokens in it
    for j, (_, gj) in enumerate(en):
        for group in gj:
            english_tokens_of.setdefault(group, []).append(j)
    # German token i and English token j are linked when they share a group
    links = sorted({(i, j) for i, (_, gi) in enumerate(de) for group in gi for j in english_tokens_of.get(group, ())})
    return SentencePair(" ".join(w for w, _ in de), " ".join(w for w, _ in en), tuple(links), features, phenomena)


def _sentence_case(tokens: list[Token]) -> list[Token]:
    first, groups = tokens[0]
    out = [(first[:1].upper() + first[1:], groups), *tokens[1:]]
    last, last_groups = out[-1]
    out[-1] = (last + ".", last_groups)
    return out
