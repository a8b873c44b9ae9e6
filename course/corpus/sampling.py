"""Sample derivations that make sense: who can do what to what, where, when, with which modifiers.

``sample_sentence(rng)`` draws one sentence pair. Every choice goes through ``rng`` (a seeded
``random.Random``) over lists in a fixed order, so the same seed always gives the same corpus.
A draw that cannot be completed (no fitting object, no fitting place) raises ``Retry`` and the caller
draws again.

Sense is made by rules at the point of choice, never by filtering finished sentences:

* selectional restrictions (lexicon tags): who can be the subject or object of a verb, where things are;
* possession (``can_own``): sons and daughters belong to adults who are not old, toys to children;
* one person, one activity at a time (``compatible``): no *whistling while singing*, no *sings while he
  sings a song*; a subordinate clause's subject is never an object of the main clause;
* tense: the German perfect is a finished activity, English says it in the simple past;
* idioms: *heißer Kakao* is hot chocolate, *den Hut aufsetzen*, *die Tür streichen*.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Sequence

from course.corpus import grammar as G
from course.corpus.lexicon import (
    ADJECTIVES,
    MODALS,
    NOUNS,
    NUMBERS,
    PLACES,
    REASONS,
    THAT_FRAMES,
    TIME_ADVERBIALS,
    VERBS,
    Adjective,
    Noun,
    Place,
    Reason,
    Slot,
    Verb,
)


class Retry(Exception):
    """This draw led nowhere (e.g. no object fits); draw again."""


NOUN_LIST: tuple[Noun, ...] = tuple(NOUNS.values())
ADJECTIVE_LIST: tuple[Adjective, ...] = tuple(ADJECTIVES.values())

#: Nouns a person can have with *sein/ihr*.
OWNABLE = frozenset(
    [
        "kin",
        "parent",
        "baby",
        "pet",
        "horse",
        "clothing",
        "bag",
        "vehicle",
        "toy",
        "ball",
        "picture",
        "room",
        "chore2",
        "kite",
        "readable",
    ]
)

#: Adjectives that make a person old or young, for possession (*ein älterer Mann* has no little son).
AGE_ADJECTIVES = {"alt": "old", "älter": "old", "jung": "young"}
#: Adjectives of a cheerful mood, never on the subject of a sad verb (*ein fröhliches Kind weint*).
HAPPY_ADJECTIVES = frozenset(["glücklich", "fröhlich"])

# One person does one thing at a time: verbs (by the part of the key before "_") that occupy the mouth,
# and verbs that leave a person unable to do anything else (asleep).
MOUTH = frozenset(
    ["pfeifen", "singen", "essen", "trinken", "telefonieren", "sprechen", "frühstücken", "erzählen", "vorlesen"]
)
MOUTH |= {"lachen", "schwimmen", "tauchen", "Picknick"}
ASLEEP = frozenset(["schlafen", "weinen", "Pause"])  # a break is doing nothing else
MEALS = frozenset(["essen", "trinken", "frühstücken"])

#: Verbs used after modals, by modal. Stative verbs (sitting, wearing, sleeping) take no modal here.
MODAL_VERBS: dict[str, frozenset[str]] = {
    "können": frozenset(["show"]),
    "wollen": frozenset(["show", "while"]),
    "möchten": frozenset(["show", "while"]),
    "müssen": frozenset(["chore"]),
}
#: Keys of chores (*muss den Rasen mähen*) and of what a child does not want to do (*will nicht schlafen*).
CHORES = frozenset(
    [
        "Hausaufgaben",
        "aufräumen",
        "putzen",
        "fegen",
        "mähen",
        "waschen",
        "abholen",
        "einkaufen",
        "warten_auf",
        "arbeiten",
        "arbeiten_an",
        "lernen",
        "reparieren",
        "gießen",
        "aufhängen",
        "streichen",
        "einsteigen",
        "aussteigen",
        "zubereiten",
        "kochen_tr",
    ]
)
NOT_WANTED = frozenset(
    ["schlafen", "Hausaufgaben", "aufräumen", "lernen", "aussteigen", "einsteigen", "gehen", "spazieren"]
)
STATIVE = frozenset(
    [
        "sitzen",
        "stehen",
        "warten",
        "warten_auf",
        "tragen",
        "halten",
        "schlafen",
        "weinen",
        "bellen",
        "grasen",
        "lachen",
        "lächeln",
        "jubeln",
        "klatschen",
        "zuschauen",
        "zuschauen_dat",
        "sitzen_auf",
        "beobachten",
        "telefonieren",
    ]
)


def base(verb: Verb) -> str:
    """The verb without its frame: ``singen_Lied`` → ``singen``."""
    return verb.key.split("_")[0]


def compatible(first: Verb, second: Verb, *, simultaneous: bool = True) -> bool:
    """Whether one person can do ``first`` and ``second`` (at the same time, or one after the other)."""
    a, b = base(first), base(second)
    if a == b:
        return False  # "singt, während er ein Lied singt" says one thing twice
    if a in MEALS and b in MEALS:
        return False
    if not simultaneous:
        return True
    if a in ASLEEP or b in ASLEEP:
        return False
    return not (a in MOUTH and b in MOUTH)


@functools.cache
def labels(noun: Noun) -> frozenset[str]:
    return noun.tags | {noun.de}


def matches(noun: Noun, tags: frozenset[str], excludes: frozenset[str] = frozenset()) -> bool:
    noun_labels = labels(noun)
    return not tags.isdisjoint(noun_labels) and excludes.isdisjoint(noun_labels)


@functools.cache
def fitting_adjectives(noun: Noun) -> tuple[Adjective, ...]:
    return tuple(a for a in ADJECTIVE_LIST if a.fits(noun))


@functools.cache
def slot_nouns(slot: Slot) -> tuple[Noun, ...]:
    """Nouns whose tags fit ``slot`` (before determiners, owners and places are considered)."""
    return tuple(n for n in NOUN_LIST if matches(n, slot.tags, slot.excludes) and "place" not in n.tags)


def as_described(np: G.NP) -> Noun:
    """The noun with the age its adjective gives it: *ein älterer Mann* counts as old."""
    age = AGE_ADJECTIVES.get(np.adj.key) if np.adj else None
    return dataclasses.replace(np.noun, tags=np.noun.tags | {age}) if age else np.noun


def described_nouns(subject: G.Subject) -> list[Noun]:
    return [as_described(np) for np in subject.conjuncts]


def semantically_plural(subject: G.Subject) -> bool:
    """Two or more people or animals: a plural, two conjuncts, or a couple or family."""
    return subject.plural or any(np.noun.has("group") for np in subject.conjuncts)


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
        young_kin = (possessed.has("kin") and possessed.has("child")) or possessed.has("baby")
        if young_kin and (not noun.has("adult") or noun.has("group", "young", "old")):
            return False  # sons, daughters, babies belong to adults who are neither young nor old
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


#: Nouns with a genitive form, who can own things in *den Hund des Nachbarn*.
GENITIVE_OWNERS: tuple[Noun, ...] = tuple(n for n in NOUN_LIST if n.genitive)
#: What a genitive owner may have: animals and things, not relatives (*der Sohn des Mannes* reads stiffly).
GENITIVE_OWNABLE = frozenset(["pet", "horse", "vehicle", "bag", "kite", "ball"])


def genitive_owners(possessed: Noun, exclude: Sequence[str]) -> list[Noun]:
    if not possessed.has(*GENITIVE_OWNABLE) or possessed.has("group", "boardable"):  # no "the farmer's bus"
        return []
    return [n for n in GENITIVE_OWNERS if n.de not in exclude and can_own([n], possessed)]


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
    avoid_adjectives: frozenset[str] = frozenset(),
    possessor: Noun | None = None,
) -> G.NP:
    """Choose number, numeral and adjective for ``noun`` with determiner ``det``."""
    if noun.has("pairnoun"):  # boots come in pairs: "trägt Stiefel", "zieht die Stiefel an"
        det, plural = ("bare" if det == "indef" else det), True
    if det == "defpl":  # "mit den Kindern": the definite article in the plural
        det, plural = "def", True
    if det == "num":
        plural = True
    elif det == "bare":
        plural = not (noun.has("mass") or noun.en_article)  # "spielt Gitarre": one instrument
    elif plural is None or not noun.de_pl or noun.has("mass"):
        plural = False
    adjectives = [a for a in fitting_adjectives(noun) if a.key not in avoid_adjectives]
    adj = None
    if adjectives and (noun.has("needs_adj") or rng.random() < adj_p):
        adj = rng.choice(adjectives)
    if noun.has("needs_adj") and adj is None:
        raise Retry
    number = rng.choice(NUMBERS) if det == "num" else None
    return G.NP(
        noun,
        det,
        plural=plural,
        adj=adj,
        owner=owner if det == "poss" else None,
        number=number,
        possessor=possessor if det == "gen" else None,
    )


# Subjects: fewer "Ein/Eine" than before (captions also start with "Der", "Zwei", "Kinder", ...).
_SUBJECT_DETS = ("indef",) * 3 + ("def",) * 4 + ("defpl", "num", "num", "bare", "gen", "gen")


@functools.cache
@functools.cache
def subject_nouns(verb: Verb) -> tuple[Noun, ...]:
    return tuple(
        n
        for n in NOUN_LIST
        if matches(n, verb.subject, verb.subject_excludes)
        and not n.has("kin", "thing", "place", "owneronly")
        and "unused" not in n.tags
        and n.de_pl is not None
    )


@functools.cache
def possessable_subject_nouns(verb: Verb) -> tuple[Noun, ...]:
    """People and animals that can be ``verb``'s subject, in lexicon order (owners are checked by the caller)."""
    return tuple(
        n for n in NOUN_LIST if matches(n, verb.subject, verb.subject_excludes) and n.has("person", "pet", "horse")
    )


def subject_adjective_ban(verb: Verb) -> frozenset[str]:
    return HAPPY_ADJECTIVES if "sad" in verb.roles else frozenset()


def sample_subject_np(rng: random.Random, verb: Verb, exclude: Sequence[str] = ()) -> G.NP:
    nouns = [n for n in subject_nouns(verb) if n.de not in exclude]
    if not nouns:
        raise Retry
    noun = rng.choices(nouns, [5 if n.has("common") else 1 for n in nouns])[0]
    det = rng.choice(_SUBJECT_DETS)
    possessor = None
    if det == "gen":  # "Der Hund des Nachbarn bellt."
        owners = genitive_owners(noun, exclude)
        if not owners:
            det = "def"
        else:
            possessor = rng.choice(owners)
    if det == "bare" and not noun.has("animal", "child"):
        det = "num"  # "Männer spielen ..." is fine, but numbers read more like captions
    if "sg" in verb.roles and det in ("num", "bare", "defpl"):
        det = "indef"  # one person scores a goal
    return make_np(rng, noun, det, avoid_adjectives=subject_adjective_ban(verb), possessor=possessor)


# ---------------------------------------------------------------------------------------------------
# Objects and places
# ---------------------------------------------------------------------------------------------------


def fits_subject(noun: Noun, subject_nouns_: Sequence[Noun], plural_subject: bool) -> bool:
    """Object restrictions that depend on who the subject is."""
    if noun.has("forfemale") and not all(n.has("female", "girl") for n in subject_nouns_):
        return False
    if noun.has("adultonly") and not all(n.has("adult") for n in subject_nouns_):
        return False  # children do not drink coffee
    if noun.has("childonly") and not all(n.has("child") for n in subject_nouns_):
        return False  # teddy bears are hugged by children
    return plural_subject or not noun.has("groupgame")  # tag and hide-and-seek need players


def sample_object(
    rng: random.Random,
    slot: Slot,
    subject: G.Subject,
    subject_nouns_: Sequence[Noun],
    exclude: Sequence[str],
    *,
    genitive_p: float = 0.45,
) -> G.NP:
    owner = G.OWNER_BY_SEX.get(subject.sex or "")
    owner_nouns = subject_nouns_ if owner is not None else None
    dets = slot.dets
    group_subject = semantically_plural(subject)
    plural_subject = group_subject and slot.distributive
    options: list[tuple[Noun, str]] = []
    subject_english = {n.en for n in subject_nouns_}
    for noun in slot_nouns(slot):
        if noun.de in exclude or noun.has("group", "owneronly"):  # couples and families are subjects only
            continue
        if noun.en in subject_english:
            continue  # "der Läufer spricht mit der Läuferin" would be "the runner is talking to the runner"
        if not fits_subject(noun, subject_nouns_, group_subject):
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
            if (
                matches(noun, slot.tags, slot.excludes)
                and noun.de not in exclude
                and noun.de_pl
                and not noun.has("mass", "owneronly", "group")
                and fits_subject(noun, subject_nouns_, group_subject)
            ):
                options.append((noun, "bare"))
    if not options:
        raise Retry
    noun, det = rng.choice(options)
    plural = plural_subject and det == "poss" and bool(noun.de_pl) and not noun.has("mass")
    if det == "bare" and plural_subject and noun.has("mass") and not noun.has("drink", "fodder", "music"):
        raise Retry
    possessor = None
    if det in ("def", "poss") and not plural and not slot.de_prep and rng.random() < genitive_p:
        owners = genitive_owners(noun, [*exclude, *(n.de for n in subject_nouns_)])
        if owners:  # "streichelt den Hund des Nachbarn" -> "is petting the neighbor's dog"
            det, possessor = "gen", rng.choice(owners)
    return make_np(rng, noun, det, owner=owner, plural=plural, adj_p=0.3, possessor=possessor)


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
# Clauses
# ---------------------------------------------------------------------------------------------------


def np_list(clause: G.Clause) -> list[G.NP]:
    return list(clause.subject.conjuncts) + list(clause.objects)


def features_of(clause: G.Clause) -> set[tuple[str, str, str]]:
    """The combinations a clause uses: adjective+noun and subject noun+verb."""
    out: set[tuple[str, str, str]] = set()
    for np in np_list(clause):
        if np.adj is not None:
            out.add(("adj", np.adj.key, np.noun.de))
    for np in clause.subject.conjuncts:
        out.add(("subj", np.noun.de, base(clause.verb)))
    return out


def complete_clause(
    rng: random.Random,
    subject: G.Subject,
    verb: Verb,
    tense: str,
    place_p: float = 0.6,
    need_place: bool = False,
    *,
    owners: Sequence[Noun] | None = None,
    modal: str | None = None,
    negated: bool = False,
) -> G.Clause:
    """Add objects and perhaps a place to ``subject`` + ``verb``.

    ``owners``: the nouns a pronoun subject stands for (they decide possessives, objects and places).
    """
    nouns = described_nouns(subject) if owners is None else list(owners)
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
    return G.Clause(
        subject, verb, tuple(objects), place, tense, modal=MODALS[modal] if modal else None, negated=negated
    )


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
    possessed = [n for n in possessable_subject_nouns(verb) if owner is not None and can_own([as_described(first)], n)]
    if possessed and rng.random() < 0.5:
        second = make_np(rng, rng.choice(possessed), "poss", owner=owner, adj_p=0.3)
    else:
        second = sample_subject_np(rng, verb, exclude=[first.noun.de])
        if second.noun.has("group") or second.noun.en == first.noun.en:
            raise Retry  # "der Koch und die Köchin": "the cook and the cook"
        if (second.noun.has("generic") and first.noun.has("child")) or (
            first.noun.has("generic") and second.noun.has("child")
        ):
            raise Retry  # "ein Mädchen und ein Kind": the girl is a child too
        second = G.NP(second.noun, first.det if first.det in ("indef", "def") else "indef", adj=second.adj)
    return G.Subject((first, second))


def possessed_subject(
    rng: random.Random, owner_subject: G.Subject, verb: Verb, exclude: Sequence[str] = ()
) -> G.Subject:
    """A subordinate clause's subject that belongs to the main subject: *ihr Sohn*, *sein Hund*.

    ``exclude``: nouns already in the main clause (its objects): *liest seiner Tochter vor, während
    seine Tochter aufräumt* would give one child two things to do.
    """
    owner = G.OWNER_BY_SEX.get(owner_subject.sex or "")
    if owner is None:
        raise Retry
    owners = described_nouns(owner_subject)
    nouns = [
        n for n in possessable_subject_nouns(verb) if can_own(owners, n) and n.de not in exclude and n.en not in exclude
    ]
    if not nouns:
        raise Retry
    noun = rng.choice(nouns)
    return G.Subject(
        (make_np(rng, noun, "poss", owner=owner, adj_p=0.2, avoid_adjectives=subject_adjective_ban(verb)),)
    )


def person_subject(rng: random.Random, verb: Verb) -> G.Subject:
    np = sample_subject_np(rng, verb)
    if not np.noun.has("person") or np.noun.has("baby", "group") or np.plural or np.det == "gen":
        raise Retry  # one person: "Ein Vater jubelt, weil sein Sohn ..."
    return G.Subject((np,))


def other_clause(rng: random.Random, main: G.Clause, verb: Verb, tense: str, **kwargs) -> G.Clause:
    """A clause about someone the main subject has (*sein Sohn*), never one of the main clause's objects,
    and whose own objects are not that person's relatives (no *while his son dances with his father*)."""
    # German and English words: "mit ihrer Freundin, während ihr Freund" is "her friend ... her friend"
    exclude = [word for np in main.objects for word in (np.noun.de, np.noun.en)]
    sub = complete_clause(rng, possessed_subject(rng, main.subject, verb, exclude), verb, tense, **kwargs)
    if any(np.det == "poss" and np.noun.has("kin", "parent", "baby", "person") for np in sub.objects):
        raise Retry
    if main.place and sub.place:
        raise Retry
    return sub


def pronoun_clause(
    rng: random.Random, main: G.Clause, verb: Verb, tense: str, *, simultaneous: bool, **kwargs
) -> G.Clause:
    """A clause whose subject is *er/sie*, the main subject: it must fit the verb and be free for it."""
    sex = main.subject.sex
    if sex is None or not compatible(main.verb, verb, simultaneous=simultaneous):
        raise Retry
    nouns = described_nouns(main.subject)
    if not all(matches(n, verb.subject, verb.subject_excludes) for n in nouns):
        raise Retry
    sub = complete_clause(rng, G.Subject(pronoun=sex), verb, tense, owners=nouns, **kwargs)
    main_nouns = {np.noun.de for np in np_list(main)}
    if any(np.noun.de in main_nouns for np in sub.objects):
        raise Retry  # "liest ein Buch, bevor er ein Buch ..." repeats itself
    if main.place and sub.place:
        raise Retry
    return sub


# ---------------------------------------------------------------------------------------------------
# Sentence patterns
# ---------------------------------------------------------------------------------------------------

PATTERN_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("simple", 14),
    ("front_place", 9),
    ("front_time", 6),
    ("perfect", 8),
    ("coordinated", 7),
    ("while", 10),
    ("because", 4),
    ("because_reason", 5),
    ("relative", 8),
    ("modal", 7),
    ("modal_not", 3),
    ("kein", 4),
    ("that", 6),
    ("when", 4),
    ("before", 5),
    ("after", 5),
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


def _finish(
    phrase: G.Phrase, clauses: Sequence[G.Clause], phenomena: set[str], extra_nps: Sequence[G.NP] = ()
) -> G.SentencePair:
    features: set[tuple[str, str, str]] = {("adj", np.adj.key, np.noun.de) for np in extra_nps if np.adj}
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
    if clause.tense == "modal":
        out.add("modal")
    if clause.negated or any(np.det == "kein" for np in clause.objects):
        out.add("negation")
    if clause.verb.particle and not clause.verb.particle_apart:
        out.add("separable")
    if len(clause.subject.conjuncts) > 1:
        out.add("coordinated_subject")
    if any(np.det == "poss" for np in np_list(clause)):
        out.add("possessive")
    if any(np.det == "gen" for np in np_list(clause)):
        out.add("genitive")
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
    assert clause.place is not None  # need_place: complete_clause retries until it has one
    if clause.place.place.case != "dat" or "goal" in clause.place.place.tags or clause.place.place.fixed:
        raise Retry  # directions stay after the verb
    return _finish(G.main_clause(clause, front_place=True), [clause], {"fronted_place"})


def time_fits(adverbial, clause: G.Clause) -> bool:
    if adverbial.subject_tags and not all(np.noun.tags & adverbial.subject_tags for np in clause.subject.conjuncts):
        return False
    if "morning" in clause.verb.roles and not adverbial.morning:
        return False  # breakfast is in the morning
    if clause.verb.key in adverbial.verb_excludes or base(clause.verb) in adverbial.verb_excludes:
        return False
    if adverbial.key == "nach dem Frühstück" and base(clause.verb) in MEALS:
        return False
    return not (
        adverbial.key == "im Sommer"
        and (
            (clause.place and "snow" in clause.place.place.tags)
            or any("snow" in np.noun.where for np in np_list(clause))
        )
    )


def _front_time(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng)
    options = [t for t in TIME_ADVERBIALS if time_fits(t, clause)]
    if not options:
        raise Retry
    adverbial = rng.choices(options, [t.weight for t in options])[0]
    return _finish(G.main_clause(clause, front=G.realise_time(adverbial)), [clause], {"fronted_time"})


def says_enough(clause: G.Clause) -> bool:
    """A finished activity needs an object, a fixed piece or a place: not just "ist geschwommen"."""
    return bool(clause.objects or clause.verb.fixed or clause.place)


def _perfect(rng: random.Random) -> G.SentencePair:
    clause = simple_clause(rng, tense="perfect")
    if not clause.verb.slots and not clause.verb.fixed and clause.place is None:
        raise Retry  # "Ein Junge hat gespielt." says too little
    return _finish(G.main_clause(clause), [clause], {"perfect"})


def _coordinated(rng: random.Random) -> G.SentencePair:
    tense = "perfect" if rng.random() < 0.2 else "present"
    verb = pick_verb(rng, tense=tense)
    subject = coordinated_subject(rng, verb)
    clause = complete_clause(rng, subject, verb, tense)
    if tense == "perfect" and not clause.verb.slots and not clause.verb.fixed and clause.place is None:
        raise Retry  # "Der Junge und das Mädchen haben geschaukelt." says too little
    return _finish(G.main_clause(clause), [clause], set())


def _while(rng: random.Random) -> G.SentencePair:
    """*Eine Mutter schaut zu, während ihr Sohn Fußball spielt.* / *Ein Mann pfeift, während er ...*"""
    if rng.random() < 0.35:  # same person: "..., während er in den Bus einsteigt"
        main_verb = pick_verb(rng, "manner")
        main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.0)
        sub_verb = pick_verb(rng, "while")
        if "manner" in sub_verb.roles:
            raise Retry
        sub = pronoun_clause(rng, main, sub_verb, "present", simultaneous=True)
    else:
        main_verb = pick_verb(rng, "calm")
        main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.4)
        sub = other_clause(rng, main, pick_verb(rng, "while"), "present")
        # one scene: a place bound to one activity must suit the other (no TV while she is on the beach)
        if sub.place and main.verb.places and not (sub.place.place.tags & main.verb.places):
            raise Retry
        if main.place and sub.verb.places and not (main.place.place.tags & sub.verb.places):
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
        sub = pronoun_clause(rng, main, sub_verb, tense, simultaneous=False)
    else:
        sub = other_clause(rng, main, sub_verb, tense)
    phrase = _comma_join(G.main_clause(main), G.subordinate_clause(sub, ("weil", "because")))
    return _finish(phrase, [main, sub], {"subordinate_because"})


def _reason_fits(reason: Reason, clause: G.Clause) -> bool:
    if clause.verb.key not in reason.verbs:
        return False
    if reason.objects and not all(labels(np.noun) & reason.objects for np in clause.objects):
        return False
    if reason.places and not (clause.place and clause.place.place.tags & reason.places):
        return False
    return not reason.person or all(np.noun.has("person") for np in clause.subject.conjuncts)


def realise_reason(reason: Reason, subject: G.Subject) -> G.Phrase:
    """The reason's tokens with their links, the placeholders filled for ``subject``."""
    sex = subject.sex or ("pl" if subject.plural else None)
    if sex is None and reason.person:
        raise Retry
    pronoun_de, pronoun_en = G.PRONOUN.get(sex or "", ("", ""))
    fill = {
        "de": {
            "{pron}": pronoun_de,
            "{be}": "sind" if subject.plural else "ist",
            "{have}": "haben" if subject.plural else "hat",
        },
        "en": {"{pron}": pronoun_en, "{be}": "are" if subject.plural else "is"},
    }
    groups: dict[str, int] = {}
    sides = []
    for side, text in (("de", reason.de), ("en", reason.en)):
        tokens: list[G.Token] = []
        for item in text.split():
            word, link = item.rsplit(":", 1)
            groups.setdefault(link, G._new_group())
            tokens.append((fill[side].get(word, word), (groups[link],)))
        sides.append(tokens)
    return G.Phrase(*sides)


def _because_reason(rng: random.Random) -> G.SentencePair:
    """*Eine Frau trägt einen Mantel, weil es kalt ist.* / *Der Junge isst einen Apfel, weil er Hunger hat.*"""
    reason = rng.choice(REASONS)
    verbs = [v for v in VERBS if v.key in reason.verbs]
    verb = rng.choice(verbs)
    np = sample_subject_np(rng, verb)
    if np.det == "gen" and reason.person:
        raise Retry
    if np.adj is not None and np.adj.key == reason.adjective:
        raise Retry  # "die müde Musikerin macht eine Pause, weil sie müde ist" says it twice
    clause = complete_clause(rng, G.Subject((np,)), verb, "present", place_p=0.5)
    if not _reason_fits(reason, clause):
        raise Retry
    phrase = _comma_join(G.main_clause(clause), realise_reason(reason, clause.subject))
    return _finish(phrase, [clause], {"subordinate_because", "reason"})


#: Main verbs one can do while waiting or walking, and while seated (for relative clauses below).
WAITING = frozenset(
    [
        "warten",
        "warten_auf",
        "gehen",
        "spazieren",
        "spazieren_mit",
        "stehen",
        "lachen",
        "lächeln",
        "winken",
        "sprechen_mit",
        "zuschauen",
        "zuschauen_dat",
        "beobachten",
        "einsteigen",
        "aussteigen",
    ]
)
SEATED = frozenset(
    [
        "lesen",
        "essen",
        "trinken",
        "halten",
        "telefonieren",
        "hören",
        "anschauen",
        "schreiben",
        "zeichnen",
        "malen_Bild",
        "lachen",
        "lächeln",
        "winken",
        "sprechen_mit",
        "beobachten",
        "zuschauen",
        "zuschauen_dat",
        "frühstücken",
        "genießen",
        "warten",
        "warten_auf",
        "fernsehen",
        "arbeiten_an",
        "lernen",
    ]
)
#: What a person is doing in a relative clause (*der einen Hut trägt*), with the main verbs it goes with
#: (None: any). A main clause with *trägt* (wearing) takes any relative clause instead.
RELATIVE_VERBS: dict[str, frozenset[str] | None] = {
    "tragen": None,
    "halten": WAITING | SEATED,
    "tragen_carry": WAITING,
    "hören": WAITING | SEATED | frozenset(["joggen", "laufen", "wandern", "kochen", "putzen", "fegen", "aufräumen"]),
    "essen": WAITING | SEATED,
    "trinken": WAITING | SEATED,
    "telefonieren": WAITING,
    "sitzen": SEATED,
    "stehen": WAITING | frozenset(["lesen", "essen", "trinken", "halten", "telefonieren"]),
}


DRESSING = frozenset(["anziehen", "ausziehen", "aufsetzen", "abnehmen"])


def _relative_verb(rng: random.Random, main: Verb) -> Verb:
    if main.key == "tragen":
        options = [
            v for v in VERBS if v.roles & {"while", "calm"} and (v.slots or v.fixed) and "matrixonly" not in v.roles
        ]
    else:
        options = [v for v in VERBS if v.key in RELATIVE_VERBS and main.key in (RELATIVE_VERBS[v.key] or {main.key})]
        if main.key in DRESSING:  # "der einen Helm trägt, nimmt seinen Hut ab": two things on one head
            options = [v for v in options if v.key != "tragen"]
    if not options:
        raise Retry
    return rng.choice(options)


def _relative(rng: random.Random) -> G.SentencePair:
    """*Ein Junge, der einen Hut trägt, spielt im Park.* → *A boy who is wearing a hat is playing ...*

    Both happen at once, so the relative clause says what the person is wearing, holding, eating or
    where they are sitting, and the main clause what they do meanwhile.
    """
    verb = pick_verb(rng)
    np = sample_subject_np(rng, verb)
    if np.noun.has("group") or np.det == "gen":
        raise Retry
    subject = G.Subject((np,))
    main = complete_clause(rng, subject, verb, "present")
    rel_verb = _relative_verb(rng, verb)
    if not compatible(verb, rel_verb) or not matches(np.noun, rel_verb.subject, rel_verb.subject_excludes):
        raise Retry
    if "sg" in rel_verb.roles and semantically_plural(subject):
        raise Retry
    seated = "needplace" in rel_verb.roles  # "der auf einer Bank sitzt": the place of both activities
    if seated and main.place:
        raise Retry
    rel = complete_clause(rng, subject, rel_verb, "present", place_p=0.0)
    if seated and rel.place is not None:
        if verb.places and not (rel.place.place.tags & verb.places):
            raise Retry  # "der auf der Bank sitzt, sieht fern" would watch TV on a bench
        if not place_fits(rel.place.place, rel.place.place.tags, [np.noun for np in np_list(main)]):
            raise Retry
    if {n.noun.de for n in rel.objects} & {n.noun.de for n in main.objects}:
        raise Retry
    phrase = G.main_clause(main, relative=G.relative_clause(rel))
    return _finish(phrase, [main, rel], {"relative_clause"})


#: What *können* asks about: skills (*kann schwimmen*, *kann nicht Fahrrad fahren*), not hugs or waving.
SKILLS = frozenset(
    [
        "schwimmen",
        "tanzen",
        "singen",
        "singen_Lied",
        "surfen",
        "Ski",
        "Fahrrad",
        "Handstand",
        "klettern",
        "klettern_Berg",
        "spielen_Sport",
        "spielen_Instrument",
        "reiten",
        "Seil",
        "paddeln",
        "tauchen",
        "Skateboard",
        "Roller",
        "segeln",
        "rudern",
        "backen",
    ]
)


def _modal_verb(rng: random.Random, modal: str, negated: bool) -> Verb:
    if modal == "können":
        options = [v for v in VERBS if v.key in SKILLS]
    elif modal == "müssen":
        options = [v for v in VERBS if v.key in CHORES]
    elif negated and modal == "wollen":
        options = [v for v in VERBS if v.key in NOT_WANTED or base(v) in NOT_WANTED]
    else:
        roles = MODAL_VERBS[modal]
        options = [v for v in VERBS if v.roles & roles and v.key not in STATIVE and "matrixonly" not in v.roles]
    return rng.choice(options)


def _modal(rng: random.Random, *, negated: bool = False) -> G.SentencePair:
    """*Ein Junge will auf einen Baum klettern.* → *A boy wants to climb a tree.* (infinitive at the end)"""
    modal = rng.choice(("wollen", "können") if negated else ("wollen", "möchten", "können", "müssen"))
    verb = _modal_verb(rng, modal, negated)
    np = sample_subject_np(rng, verb)
    if modal != "können" and not np.noun.has("person"):
        raise Retry  # wanting and having to are said of people here; a dog "can swim"
    subject = G.Subject((np,))
    # "kann (nicht) schwimmen" asks about a skill, so no place: not "kann im Gras einen Handstand machen"
    place_p = 0.0 if negated or modal == "können" else 0.5
    clause = complete_clause(rng, subject, verb, "modal", place_p, modal=modal, negated=negated)
    if negated and any(np.det in ("indef", "num") for np in clause.objects):
        raise Retry  # "will keinen Apfel essen" would need kein, not nicht
    front = None
    if not negated and modal != "können" and clause.place is None and rng.random() < 0.3:
        options = [t for t in TIME_ADVERBIALS if time_fits(t, clause)]
        if options:
            front = G.realise_time(rng.choices(options, [t.weight for t in options])[0])
    phrase = G.main_clause(clause, front=front)
    return _finish(phrase, [clause], {"modal_not" if negated else "modal"})


def _kein(rng: random.Random) -> G.SentencePair:
    """*Der Junge trägt keinen Helm.* → *The boy is not wearing a helmet.*"""
    verb = VERBS_FOR_KEIN[rng.randrange(len(VERBS_FOR_KEIN))]
    subject = G.Subject((sample_subject_np(rng, verb),))
    clause = complete_clause(rng, subject, verb, "present", place_p=0.5)
    (obj,) = clause.objects
    if obj.det not in ("indef", "bare") or obj.noun.has("forfemale") or obj.number:
        raise Retry
    if obj.det == "bare" and obj.noun.en_article:
        raise Retry
    clause = dataclasses.replace(clause, objects=(dataclasses.replace(obj, det="kein"),))
    return _finish(G.main_clause(clause), [clause], {"kein"})


#: Captions say what is missing from a picture: "is not wearing a helmet", not "is not eating an orange".
VERBS_FOR_KEIN: tuple[Verb, ...] = tuple(v for v in VERBS if v.key == "tragen")


NOT_AN_ACHIEVEMENT = frozenset(["umarmen", "aufmachen", "schaukeln", "rutschen", "Seil"])


def _that(rng: random.Random) -> G.SentencePair:
    """*Eine Mutter sieht, dass ihr Sohn ein Tor schießt.* / *Ein Vater ist stolz, dass seine Tochter ...*"""
    frame = rng.choice(("sehen", "freuen", "stolz"))
    tense = "present" if frame == "sehen" or rng.random() < 0.5 else "perfect"
    sub_verb = pick_verb(rng, "show" if frame == "stolz" else rng.choice(("show", "while")), tense=tense)
    if frame == "stolz" and (tense != "perfect" or sub_verb.key in NOT_AN_ACHIEVEMENT):
        raise Retry  # proud of a goal scored, not of a hug
    main_verb = pick_verb(rng, "react")  # picks a person who can react (the frame then replaces the verb)
    subject = person_subject(rng, main_verb)
    main = G.Clause(subject, main_verb)
    sub = other_clause(rng, main, sub_verb, tense)
    if tense == "perfect" and not says_enough(sub):
        raise Retry  # "ist stolz, dass ihr Freund geschwommen ist" says too little
    plural = subject.plural
    head = G.realise_subject(subject)
    for de_sg, de_pl, en_sg, en_pl in THAT_FRAMES[frame]:
        head += G.pair(de_pl if plural else de_sg, en_pl if plural else en_sg)
    phrase = _comma_join(head, G.subordinate_clause(sub, ("dass", "that")))
    return _finish(phrase, [sub], {"subordinate_that"}, extra_nps=subject.conjuncts)


def _when(rng: random.Random) -> G.SentencePair:
    """*Ein Vater jubelt, wenn sein Sohn ein Tor schießt.* → *A father cheers when his son scores a goal.*"""
    main_verb = pick_verb(rng, "react")
    main = complete_clause(rng, person_subject(rng, main_verb), main_verb, "present", place_p=0.0)
    sub = other_clause(rng, main, pick_verb(rng, "show"), "present")
    phrase = _comma_join(G.main_clause(main, form="simple"), G.subordinate_clause(sub, ("wenn", "when"), "simple"))
    return _finish(phrase, [main, sub], {"subordinate_when"})


def _sequence(rng: random.Random, conjunction: tuple[str, str], tense: str) -> G.SentencePair:
    """*Ein Mann liest die Zeitung, bevor er in den Bus einsteigt.* → *... before getting on the bus.*"""
    main_verb = pick_verb(rng, "while")
    if main_verb.key in STATIVE:
        raise Retry  # "trägt eine Mütze, nachdem er ..." : a state is not one step of a sequence
    np = sample_subject_np(rng, main_verb)
    if not np.noun.has("person") or np.plural or np.noun.has("baby", "group") or np.det == "gen":
        raise Retry
    main = complete_clause(rng, G.Subject((np,)), main_verb, "present", place_p=0.4)
    sub_verb = pick_verb(rng, rng.choice(("while", "show")), tense=tense)
    if sub_verb.key in STATIVE:
        raise Retry  # "bevor er eine Jacke trägt": a state does not follow an action
    sub = pronoun_clause(rng, main, sub_verb, tense, simultaneous=False)
    if tense == "perfect" and not says_enough(sub):
        raise Retry
    phrase = _comma_join(G.main_clause(main), G.subordinate_clause(sub, conjunction, "gerund"))
    name = "subordinate_before" if conjunction[0] == "bevor" else "subordinate_after"
    return _finish(phrase, [main, sub], {name})


def _comma_join(main: G.Phrase, sub: G.Phrase) -> G.Phrase:
    word, groups = main.de[-1]
    return G.Phrase([*main.de[:-1], (word + ",", groups), *sub.de], main.en + sub.en)


_PATTERNS: dict[str, Callable[[random.Random], G.SentencePair]] = {
    "simple": _simple,
    "front_place": _front_place,
    "front_time": _front_time,
    "perfect": _perfect,
    "coordinated": _coordinated,
    "while": _while,
    "because": _because,
    "because_reason": _because_reason,
    "relative": _relative,
    "modal": _modal,
    "modal_not": functools.partial(_modal, negated=True),
    "kein": _kein,
    "that": _that,
    "when": _when,
    "before": functools.partial(_sequence, conjunction=("bevor", "before"), tense="present"),
    "after": functools.partial(_sequence, conjunction=("nachdem", "after"), tense="perfect"),
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
