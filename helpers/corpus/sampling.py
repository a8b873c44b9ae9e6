"""Sample derivations that make sense: who can do what to what, where, with which modifiers.

``sample_sentence(rng)`` draws one sentence pair. Every choice goes through ``rng`` (a seeded
``random.Random``) over lists in a fixed order, so the same seed always gives the same corpus.
A draw that cannot be completed (no fitting object, no fitting place) raises ``Retry`` and the caller
draws again.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from helpers.corpus import grammar as G
from helpers.corpus.lexicon import (
    ADJECTIVES,
    NOUNS,
    NUMBERS,
    PLACES,
    TIME_ADVERBIALS,
    VERBS,
    Adjective,
    Noun,
    Place,
    Slot,
    Verb,
)


class Retry(Exception):
    """This draw led nowhere (e.g. no object fits); draw again."""


NOUN_LIST: tuple[Noun, ...] = tuple(NOUNS.values())
ADJECTIVE_LIST: tuple[Adjective, ...] = tuple(ADJECTIVES.values())

#: Nouns a person can have with *sein/ihr*.
OWNABLE = frozenset(["kin", "parent", "baby", "pet", "horse", "clothing", "bag", "vehicle", "toy", "ball", "picture", "room", "chore2", "kite", "readable"])


def labels(noun: Noun) -> frozenset[str]:
    return noun.tags | {noun.de}


def matches(noun: Noun, tags: frozenset[str], excludes: frozenset[str] = frozenset()) -> bool:
    return bool(tags & labels(noun)) and not (excludes & labels(noun))


@functools.cache
def fitting_adjectives(noun: Noun) -> tuple[Adjective, ...]:
    return tuple(a for a in ADJECTIVE_LIST if a.fits(noun))


@functools.cache
def slot_nouns(slot: Slot) -> tuple[Noun, ...]:
    """Nouns whose tags fit ``slot`` (before determiners, owners and places are considered)."""
    return tuple(n for n in NOUN_LIST if matches(n, slot.tags) and "place" not in n.tags)


# ---------------------------------------------------------------------------------------------------
# Possession: who can say "sein/ihr X"
# ---------------------------------------------------------------------------------------------------


def can_own(owner: Sequence[Noun], possessed: Noun) -> bool:
    """Whether every owner noun can naturally have ``possessed`` (*ihr Sohn*, *sein Hund*)."""
    if not (possessed.tags & OWNABLE):
        return False
    for noun in owner:
        if "person" not in noun.tags or noun.has("baby") or noun.de == possessed.de:
            return False
        if (possessed.has("kin") and possessed.has("child")) or possessed.has("baby"):
            if not noun.has("adult") or noun.has("group", "young"):
                return False  # sons, daughters, babies belong to adults
        if possessed.has("parent", "sibling") and not noun.has("child"):
            return False  # mothers, fathers, brothers, sisters: of children here
        if possessed.has("grandparent") and noun.has("old"):
            return False
        if possessed.has("friend") and noun.has("group"):
            return False
        if possessed.has("chore2", "toy") and not noun.has("child"):
            return False  # homework, dolls and balls belong to children
        if possessed.has("forfemale") and not noun.has("female", "girl"):
            return False
    return True


# ---------------------------------------------------------------------------------------------------
# Noun phrases
# ---------------------------------------------------------------------------------------------------


def det_options(noun: Noun, dets: Sequence[str], owner_nouns: Sequence[Noun] | None) -> list[str]:
    """The determiners of ``dets`` that ``noun`` can take (``poss`` needs owners who can have it)."""
    mass = noun.has("mass")
    countable = not mass or noun.has("countsg")
    out = []
    for det in dets:
        if noun.has("kin") and det != "poss":
            continue
        if noun.has("definite_only") and det != "def":
            continue
        if noun.has("needs_adj") and det not in ("indef", "def"):
            continue
        if det == "bare" and not (mass or noun.de_pl):
            continue
        if det in ("indef", "def") and not countable:
            continue
        if det == "poss" and not (owner_nouns and can_own(owner_nouns, noun)):
            continue
        if det in ("num", "defpl") and (mass or not noun.de_pl or noun.has("definite_only", "needs_adj")):
            continue
        out.append(det)
    return out


def make_np(
    rng: random.Random,
    noun: Noun,
    det: str,
    *,
    owner: G.Owner | None = None,
    adj_p: float = 0.35,
    plural: bool | None = None,
) -> G.NP:
    """Choose number, numeral and adjective for ``noun`` with determiner ``det``."""
    if det == "defpl":  # "mit den Kindern": the definite article in the plural
        det, plural = "def", True
    if det == "num":
        plural = True
    elif det == "bare":
        plural = not (noun.has("mass") or noun.en_article)  # "spielt Gitarre": one instrument
    elif plural is None or not noun.de_pl or noun.has("mass"):
        plural = False
    adjectives = fitting_adjectives(noun)
    adj = None
    if adjectives and (noun.has("needs_adj") or rng.random() < adj_p):
        adj = rng.choice(adjectives)
    if noun.has("needs_adj") and adj is None:
        raise Retry
    number = rng.choice(NUMBERS) if det == "num" else None
    return G.NP(noun, det, plural=plural, adj=adj, owner=owner if det == "poss" else None, number=number)


_SUBJECT_DETS = ("indef",) * 6 + ("def", "def", "defpl", "num", "num", "bare")


@functools.cache
def subject_nouns(verb: Verb) -> tuple[Noun, ...]:
    return tuple(
        n
        for n in NOUN_LIST
        if matches(n, verb.subject, verb.subject_excludes)
        and not n.has("kin", "thing", "place")
        and "unused" not in n.tags
        and n.de_pl is not None
    )


def sample_subject_np(rng: random.Random, verb: Verb, exclude: Sequence[str] = ()) -> G.NP:
    nouns = [n for n in subject_nouns(verb) if n.de not in exclude]
    if not nouns:
        raise Retry
    noun = rng.choices(nouns, [5 if n.has("common") else 1 for n in nouns])[0]
    det = rng.choice(_SUBJECT_DETS)
    if det == "bare" and not noun.has("animal", "child"):
        det = "num"  # "Männer spielen ..." is fine, but numbers read more like captions
    if "sg" in verb.roles and det in ("num", "bare", "defpl"):
        det = "indef"  # one person scores a goal
    return make_np(rng, noun, det)


# ---------------------------------------------------------------------------------------------------
# Objects and places
# ---------------------------------------------------------------------------------------------------


def sample_object(
    rng: random.Random, slot: Slot, subject: G.Subject, subject_nouns_: Sequence[Noun], exclude: Sequence[str]
) -> G.NP:
    owner = G.OWNER_BY_SEX.get(subject.sex or "")
    owner_nouns = subject_nouns_ if owner is not None else None
    dets = slot.dets
    plural_subject = subject.plural and slot.distributive
    options: list[tuple[Noun, str]] = []
    for noun in slot_nouns(slot):
        if noun.de in exclude or noun.has("group"):  # couples and families are subjects only
            continue
        if noun.has("forfemale") and not all(n.has("female", "girl") for n in subject_nouns_):
            continue
        for det in det_options(noun, dets, owner_nouns):
            if plural_subject and det not in ("bare", "poss", "defpl"):
                continue  # "Zwei Männer tragen Hüte", not "... tragen einen Hut"
            options.append((noun, det))
    if subject.plural:
        # "Drei Köchinnen ... ihrer Tochter" reads oddly: in this corpus relatives belong to one person
        options = [(n, d) for n, d in options if not (d == "poss" and n.has("kin", "parent", "baby"))]
    if plural_subject and not options:
        for noun in NOUN_LIST:
            if matches(noun, slot.tags) and noun.de not in exclude and noun.de_pl and not noun.has("mass"):
                options.append((noun, "bare"))
    if not options:
        raise Retry
    noun, det = rng.choice(options)
    plural = plural_subject and det == "poss" and bool(noun.de_pl) and not noun.has("mass")
    if det == "bare" and plural_subject and noun.has("mass") and not noun.has("drink", "fodder", "music"):
        raise Retry
    return make_np(rng, noun, det, owner=owner, plural=plural, adj_p=0.3)


def place_fits(place: Place, allowed: frozenset[str], nouns: Sequence[Noun]) -> bool:
    if not (place.tags & allowed):
        return False
    if place.noun is not None and any(n.de == place.noun.de for n in nouns):
        return False
    return all(not n.where or (n.where & place.tags) for n in nouns)


def sample_place(
    rng: random.Random, verb: Verb, nouns: Sequence[Noun], kind: str | None = None
) -> G.PlaceChoice | None:
    """A place (``loc``) or a direction/goal (``dir``/``goal``) that fits the verb and every noun."""
    options: list[Place] = []
    if kind in (None, "loc") and verb.places:
        options += [p for p in PLACES["loc"] if place_fits(p, verb.places, nouns)]
    if kind in (None, "dir") and verb.dirs:
        options += [p for p in PLACES["dir"] + PLACES["goal"] if place_fits(p, verb.dirs, nouns)]
    if not options:
        return None
    return G.PlaceChoice(rng.choice(options))


# ---------------------------------------------------------------------------------------------------
# Clauses and sentences
# ---------------------------------------------------------------------------------------------------


def features_of(clause: G.Clause) -> set[tuple[str, str, str]]:
    """The combinations a clause uses: adjective+noun and subject noun+verb."""
    out: set[tuple[str, str, str]] = set()
    nps = list(clause.subject.conjuncts) + list(clause.objects)
    for np in nps:
        if np.adj is not None:
            out.add(("adj", np.adj.key, np.noun.de))
    for np in clause.subject.conjuncts:
        out.add(("subj", np.noun.de, clause.verb.key.split("_")[0]))
    return out


def complete_clause(
    rng: random.Random, subject: G.Subject, verb: Verb, tense: str, place_p: float = 0.6, need_place: bool = False
) -> G.Clause:
    """Add objects and perhaps a place to ``subject`` + ``verb``."""
    nouns = [np.noun for np in subject.conjuncts]  # empty for a pronoun subject
    objects: list[G.NP] = []
    used = [n.de for n in nouns]
    for slot in verb.slots:
        np = sample_object(rng, slot, subject, nouns, used)
        objects.append(np)
        used.append(np.noun.de)
    all_nouns = nouns + [np.noun for np in objects]
    place = None
    need_place = need_place or "needplace" in verb.roles
    if need_place or rng.random() < place_p:
        kind = "dir" if verb.dirs and rng.random() < 0.5 else None  # directions are fewer than places
        place = sample_place(rng, verb, all_nouns, kind) or sample_place(rng, verb, all_nouns)
        if need_place and place is None:
            raise Retry
    return G.Clause(subject, verb, tuple(objects), place, tense)


def pick_verb(rng: random.Random, role: str | None = None, tense: str = "present") -> Verb:
    return rng.choice(_verbs_for(role, tense))


@functools.cache
def _verbs_for(role: str | None, tense: str) -> tuple[Verb, ...]:
    return tuple(
        v
        for v in VERBS
        if (role in v.roles if role else "matrixonly" not in v.roles) and (tense != "perfect" or v.perfect)
    )


def simple_clause(rng: random.Random, tense: str = "present", *, need_place: bool = False) -> G.Clause:
    verb = pick_verb(rng, tense=tense)
    subject = G.Subject((sample_subject_np(rng, verb),))
    return complete_clause(rng, subject, verb, tense, need_place=need_place)


def coordinated_subject(rng: random.Random, verb: Verb) -> G.Subject:
    """*Ein Mann und eine Frau* or *eine Mutter und ihr kleiner Sohn*: two different nouns."""
    if "sg" in verb.roles:
        raise Retry
    first = sample_subject_np(rng, verb)
    if first.noun.has("group"):
        raise Retry
    first = G.NP(first.noun, first.det if first.det in ("indef", "def") else "indef", adj=first.adj)
    owner = G.OWNER_BY_SEX.get(first.sex or "")
    possessed = [
        n
        for n in NOUN_LIST
        if matches(n, verb.subject, verb.subject_excludes)
        and n.has("person", "pet", "horse")
        and owner is not None
        and can_own([first.noun], n)
    ]
    if possessed and rng.random() < 0.5:
        second = make_np(rng, rng.choice(possessed), "poss", owner=owner, adj_p=0.3)
    else:
        second = sample_subject_np(rng, verb, exclude=[first.noun.de])
        if second.noun.has("group"):
            raise Retry
        second = G.NP(second.noun, first.det if first.det in ("indef", "def") else "indef", adj=second.adj)
    return G.Subject((first, second))


def possessed_subject(rng: random.Random, owner_subject: G.Subject, verb: Verb) -> G.Subject:
    """A subordinate clause's subject that belongs to the main subject: *ihr Sohn*, *sein Hund*."""
    owner = G.OWNER_BY_SEX.get(owner_subject.sex or "")
    if owner is None:
        raise Retry
    owners = [np.noun for np in owner_subject.conjuncts]
    nouns = [
        n
        for n in NOUN_LIST
        if matches(n, verb.subject, verb.subject_excludes) and n.has("person", "pet", "horse") and can_own(owners, n)
    ]
    if not nouns:
        raise Retry
    noun = rng.choice(nouns)
    return G.Subject((make_np(rng, noun, "poss", owner=owner, adj_p=0.2),))


def person_subject(rng: random.Random, verb: Verb) -> G.Subject:
    np = sample_subject_np(rng, verb)
    if not np.noun.has("person") or np.noun.has("baby") or np.plural:
        raise Retry  # one person: "Ein Vater jubelt, weil sein Sohn ..."
    return G.Subject((np,))


PATTERN_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("simple", 30),
    ("front_place", 12),
    ("front_time", 8),
    ("perfect", 13),
    ("coordinated", 12),
    ("while", 12),
    ("because", 10),
)


def sample_sentence(rng: random.Random) -> G.SentencePair:
    """Draw one sentence pair (retrying internally until a draw succeeds)."""
    names = [name for name, _ in PATTERN_WEIGHTS]
    weights = [w for _, w in PATTERN_WEIGHTS]
    for _ in range(1000):
        pattern = rng.choices(names, weights)[0]
        try:
            return _PATTERNS[pattern](rng)
        except Retry:
            continue
    raise RuntimeError("could not draw a sentence in 1000 tries; the lexicon's restrictions are too tight")


def _finish(phrase: G.Phrase, clauses: Sequence[G.Clause], phenomena: set[str]) -> G.SentencePair:
    features: set[tuple[str, str, str]] = set()
    for clause in clauses:
        features |= features_of(clause)
        phenomena |= _clause_phenomena(clause)
    pair = G.finish(phrase, frozenset(features), frozenset(phenomena))
    n_de, n_en = len(pair.de.split()), len(pair.en.split())
    if not (4 <= n_de <= 20 and 4 <= n_en <= 22):
        raise Retry
    return pair


def _clause_phenomena(clause: G.Clause) -> set[str]:
    out = set()
    if clause.tense == "perfect":
        out.add(f"perfect_{clause.verb.aux}")
    if clause.verb.particle and not clause.verb.particle_apart:
        out.add("separable")
    if len(clause.subject.conjuncts) > 1:
        out.add("coordinated_subject")
    if any(np.det == "poss" for np in clause.subject.conjuncts + clause.objects):
        out.add("possessive")
    if any(slot.case == "dat" for slot in clause.verb.slots):
        out.add("dative_object")
    if clause.place and clause.place.place.fixed:
        out.add("idiom_place")
    return out


def _simple(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng)
    return _finish(G.main_clause(clause), [clause], {"simple"})


def _front_place(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng, need_place=True)
    if clause.place.place.case != "dat" or "goal" in clause.place.place.tags or clause.place.place.fixed:
        raise Retry  # directions stay after the verb
    return _finish(G.main_clause(clause, front_place=True), [clause], {"fronted_place"})


def _front_time(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng)
    options = [
        t
        for t in TIME_ADVERBIALS
        if not t.subject_tags or all(np.noun.tags & t.subject_tags for np in clause.subject.conjuncts)
    ]
    adverbial = rng.choice(options)
    return _finish(G.main_clause(clause, front=G.realise_time(adverbial)), [clause], {"fronted_time"})


def _perfect(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng, tense="perfect")
    if not clause.verb.slots and not clause.verb.fixed and clause.place is None:
        raise Retry  # "Ein Junge hat gespielt." says too little
    return _finish(G.main_clause(clause), [clause], set())


def _coordinated(rng: random.Random) -> G.SentencePair:
    tense = "perfect" if rng.random() < 0.2 else "present"
    verb = pick_verb(rng, tense=tense)
    subject = coordinated_subject(rng, verb)
    clause = complete_clause(rng, subject, verb, tense)
    return _finish(G.main_clause(clause), [clause], set())


def _while(rng: random.Random) -> G.SentencePair:
    """*Eine Mutter schaut zu, während ihr Sohn Fußball spielt.* / *Ein Mann pfeift, während er ...*"""
    if rng.random() < 0.35:  # same person: "..., während er in den Bus einsteigt"
        main_verb = pick_verb(rng, "manner")
        main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.0)
        sex = main.subject.sex
        if sex is None:
            raise Retry
        sub_verb = pick_verb(rng, "while")
        if "manner" in sub_verb.roles:
            raise Retry
        sub_subject = G.Subject(pronoun=sex)
        sub = complete_clause(rng, sub_subject, sub_verb, "present")
        # the pronoun stands for the main subject: its nouns constrain places and possessives
        sub = _recheck_pronoun_clause(sub, main)
    else:
        main_verb = pick_verb(rng, "calm")
        main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.4)
        sub_verb = pick_verb(rng, "while")
        sub = complete_clause(rng, possessed_subject(rng, main.subject, sub_verb), sub_verb, "present")
        if main.place and sub.place:
            raise Retry
    phrase = _comma_join(G.main_clause(main), G.subordinate_clause(sub, ("während", "while")))
    return _finish(phrase, [main, sub], {"subordinate_while"})


def _because(rng: random.Random) -> G.SentencePair:
    """*Ein Vater jubelt, weil sein Sohn ein Tor schießt.* / *..., weil er ein Tor geschossen hat.*"""
    main_verb = pick_verb(rng, "react")
    main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.0)
    pronoun = rng.random() < 0.3
    tense = "perfect" if pronoun or rng.random() < 0.35 else "present"  # "..., weil er ein Tor geschossen hat"
    sub_verb = pick_verb(rng, "show", tense=tense)
    if tense == "perfect" and not sub_verb.slots and not sub_verb.fixed and not sub_verb.dirs:
        raise Retry  # "weil seine Tochter geschaukelt hat" says too little
    if pronoun:
        if main.subject.sex is None:
            raise Retry
        sub = complete_clause(rng, G.Subject(pronoun=main.subject.sex), sub_verb, tense)
        sub = _recheck_pronoun_clause(sub, main)
    else:
        sub = complete_clause(rng, possessed_subject(rng, main.subject, sub_verb), sub_verb, tense)
    phrase = _comma_join(G.main_clause(main), G.subordinate_clause(sub, ("weil", "because")))
    return _finish(phrase, [main, sub], {"subordinate_because"})


def _recheck_pronoun_clause(sub: G.Clause, main: G.Clause) -> G.Clause:
    """A pronoun subject is the main subject: it must fit the verb, and possessives must fit it."""
    nouns = [np.noun for np in main.subject.conjuncts]
    if not all(matches(n, sub.verb.subject, sub.verb.subject_excludes) for n in nouns):
        raise Retry
    for np in sub.objects:
        if np.det == "poss" and not can_own(nouns, np.noun):
            raise Retry
        if np.noun.de in [n.de for n in nouns]:
            raise Retry
    if sub.place and not place_fits(sub.place.place, sub.place.place.tags, nouns):
        raise Retry
    return sub


def _comma_join(main: G.Phrase, sub: G.Phrase) -> G.Phrase:
    word, groups = main.de[-1]
    return G.Phrase(main.de[:-1] + [(word + ",", groups)] + sub.de, main.en + sub.en)


_PATTERNS = {
    "simple": _simple,
    "front_place": _front_place,
    "front_time": _front_time,
    "perfect": _perfect,
    "coordinated": _coordinated,
    "while": _while,
    "because": _because,
}


def running_example() -> G.SentencePair:
    """*Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien.*, built by the grammar."""
    mother = G.NP(NOUNS["Mutter"], "indef")
    son = G.NP(NOUNS["Sohn"], "poss", adj=ADJECTIVES["klein"], owner=G.OWNER_BY_SEX["f"])
    verb = next(v for v in VERBS if v.key == "genießen")
    day = G.NP(NOUNS["Tag"], "indef", adj=ADJECTIVES["schön"])
    outdoors = next(p for p in PLACES["loc"] if p.fixed and p.fixed[0][0] == "im Freien")
    clause = G.Clause(G.Subject((mother, son)), verb, (day,), G.PlaceChoice(outdoors))
    return _finish(G.main_clause(clause), [clause], {"running_example"})
