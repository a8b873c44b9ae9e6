"""Scans of the committed captions corpus for nonsense, unnatural English and monotony.

Each scan is a regular expression (or a small function) over one German/English pair; the tests
require every nonsense and unnatural category to count zero and every construction to reach a share
of the corpus. The generator fixes these categories at their rules (``course/corpus/sampling.py``);
the scans only check that the rules hold, so they are written independently of the generator's tables.

``python tests/test_corpus_content.py [FOLDER]`` prints every count (default: data/captions), which is
how the before/after numbers in the data card were measured.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "captions"
SPLITS = ("train", "val", "test")

Pair = tuple[str, str]  # (German, English)

# English words for people and animals, independent of the lexicon.
CHILD = r"(?:boys?|girls?|child|children|sons?|daughters?|brothers?|sisters?|bab(?:y|ies))"
ANIMAL = r"(?:dogs?|pupp(?:y|ies)|cats?|horses?|pon(?:y|ies)|cows?|sheep|goats?|donkeys?|pigs?|elephants?|monkeys?)"
KIN = r"(?:sons?|daughters?|fathers?|mothers?|brothers?|sisters?|grandmothers?|grandfathers?|friends?|bab(?:y|ies))"
MOUTH = ("whistling", "singing", "eating", "drinking", "talking", "telling", "laughing", "having", "swimming", "diving")
SUBORDINATE = r"(?:while|because|when|that|before|after|who)"
PARTICIPLES = (
    r"(?:\w+ed|sung|swum|run|flown|done|drawn|drunk|driven|eaten|given|ridden|shown|taken|thrown|worn|written"
    r"|caught|built|bought|cut|dug|fed|held|read|slept|sold|stood|swept|swung|told|slid|gotten|put|hung)"
)


def _same_person_doing_two_incompatible_things(_: str, en: str) -> bool:
    """*is whistling while he is singing*, *who is eating ... is drinking*, anything while asleep."""
    # Each activity is its -ing word and the word after it ("taking a break" is not "taking off").
    activity = r"(\w+ing)(?: (\w+))?"
    pattern = rf"\b(?:is|are) {activity}\b[^.]*?\bwhile (?:he|she|they) (?:is|are) {activity}"
    for main, main_next, sub, sub_next in re.findall(pattern, en):
        if (main, main_next) == (sub, sub_next) or (main in MOUTH and sub in MOUTH) or "sleeping" in (main, sub):
            return True
    m = re.match(rf"^[^,]*? (?:who|that) (?:is|are) {activity}\b[^,]*? (?:is|are) {activity}\b", en)
    if not m:
        return False
    main, main_next, sub, sub_next = m.groups()
    return (main, main_next) == (sub, sub_next) or (main in MOUTH and sub in MOUTH) or "sleeping" in (main, sub)


def _main_object_busy_in_subordinate_clause(_: str, en: str) -> bool:
    """*reading a book to his son while his son is tidying up* -- one child, two things at once."""
    m = re.search(rf"\b(his|her|their) (?:\w+ )?({KIN})\b.*\b(?:while|because|when|that) \1 (?:\w+ )?\2\b", en)
    return bool(m)


def _kin_of_kin_in_subordinate_clause(_: str, en: str) -> bool:
    """*while his son is dancing with his father* -- where the father is the main clause's subject."""
    m = re.search(rf"\b(?:while|because|when|that) (?:his|her|their) (?:\w+ )?{KIN}\b(.*)$", en)
    parent = r"\b(?:his|her|their) (?:\w+ )?(?:fathers?|mothers?|grandfathers?|grandmothers?)\b"
    return bool(m) and bool(re.search(parent, m.group(1)))


NONSENSE: dict[str, Callable[[str, str], bool] | tuple[str, str]] = {
    # (German regex, English regex): the pair is counted when both match ("" matches anything).
    "hot/cold hot chocolate": ("", r"\b(?:hot|cold) hot chocolate\b"),
    "breakfast not in the morning": ("", r"(?:afternoon|evening|after school|after breakfast|summer)\b.*breakfast"),
    "animal drinking something other than water": (
        "",
        rf"\b{ANIMAL}\b (?:(?:that|who) )?(?:is |are |was |were )?(?:not )?"
        r"(?:drinking|drinks|drank) (?!(?:\w+ )?water\b)",
    ),
    "happy or cheerful person crying": ("", r"\b(?:happy|cheerful) \w+ (?:who )?(?:is|are) (?:\w+ )?crying\b"),
    "same person, incompatible activities": _same_person_doing_two_incompatible_things,
    "main clause's object busy in the subordinate clause": _main_object_busy_in_subordinate_clause,
    "relatives of relatives in a subordinate clause": _kin_of_kin_in_subordinate_clause,
    "couple or family wearing one garment": ("", r"\b(?:couple|family) (?:is|are) (?:not )?wearing (?:a|an) "),
    "elderly person with a grandparent": (
        "",
        r"\b(?:elderly|old|retirees?|lady|ladies)\b[^,]*\b(?:his|her|their) (?:grandmother|grandfather)s?\b",
    ),
}

UNNATURAL: dict[str, Callable[[str, str], bool] | tuple[str, str]] = {
    "malen for a door, fence or house": (
        r"\b(?:malt|malen|gemalt)\b[^,]*\b(?:Tür|Türen|Zaun|Zäune|Haus|Häuser)\b|\b(?:Tür|Türen|Zaun|Zäune|Haus|Häuser)\b[^,]*\b(?:malt|malen|gemalt)\b",
        "",
    ),
    "anziehen/ausziehen for hats, caps, helmets": (
        r"\b(?:Hut|Hüte|Mütze|Mützen|Helm|Helme)\b[^,]*\b(?:an|aus)(?:ziehen|gezogen|zieht)?\b|\b(?:zieht|ziehen)\b[^,]*\b(?:Hut|Hüte|Mütze|Mützen|Helm|Helme)\b[^,]*\b(?:an|aus)\b",
        "",
    ),
    "a single boot": ("", r"\b(?:a|an|one|his|her|their|the) (?:\w+ )?boot\b"),
    "a girl and a child": (
        "",
        r"\b(?:girls?|boys?) and (?:a|an|the|his|her) (?:\w+ )?child\b"
        r"|\bchild and (?:a|an|the) (?:\w+ )?(?:girl|boy)\b",
    ),
    "a child drinking coffee": (
        "",
        rf"\b{CHILD}\b(?:(?! while | because | when | that | before | after ).)*"
        r"\b(?:drinking|drinks|drank|drink) coffee",
    ),
    "an old person with a little son, daughter or baby": (
        "",
        r"^(?:(?:A|An|The|Two|Three|Four) )?(?:\w+ )?(?:retirees?|lady|ladies|(?:elderly|old) \w+)\b[^,]*?"
        r"\b(?:his|her|their) (?:\w+ )?(?:son|daughter|baby|sons|daughters|babies)\b",
    ),
    "a bicycle in a supermarket": ("", r"\bbicycles?\b.*\bsupermarket\b|\bsupermarket\b.*\bbicycles?\b"),
    "one person playing tag or hide-and-seek": (
        "",
        r"\b(?:is|was|wants to|has to|does not want to) (?:not )?play(?:ing)? (?:tag|hide-and-seek)\b"
        r"|\b(?:he|she) (?:\w+ )?play(?:s|ing|ed) (?:tag|hide-and-seek)\b|\bplays (?:tag|hide-and-seek)\b"
        r"|^(?:A|An) \w+(?: \w+)? (?:can |would like to )?play(?:ed)? (?:tag|hide-and-seek)\b"
        r"|\bis \w+ing\b.*\b(?:before|after) playing (?:tag|hide-and-seek)",
    ),
    "cutting a salad": ("", r"\bcut(?:s|ting)? (?:\w+ ){0,2}salads?\b"),
    "flying across": ("", r"\b(?:flying|flew|fly|flies) across\b"),
    "present perfect for a finished activity": ("", rf"\b(?:has|have) {PARTICIPLES}\b"),
}


def _count(pairs: list[Pair], scan: Callable[[str, str], bool] | tuple[str, str]) -> list[Pair]:
    if callable(scan):
        return [(de, en) for de, en in pairs if scan(de, en)]
    de_pattern, en_pattern = (re.compile(p) for p in scan)
    return [(de, en) for de, en in pairs if de_pattern.search(de) and en_pattern.search(en)]


#: Constructions and the share of all pairs (train + val + test) each must reach at least.
CONSTRUCTIONS: dict[str, tuple[str, float]] = {
    "relative clause, verb last (der Hund, der ... läuft,)": (r"^[^,]*\w, (?:der|die|das) [^,]*\w, ", 0.05),
    "modal verb, infinitive last (will ... spielen)": (
        r"\b(?:will|wollen|möchte|möchten|kann|können|muss|müssen)\b",
        0.07,
    ),
    "negation (nicht, kein)": (r"\b(?:nicht|kein|keine|keinen|keinem|keiner)\b", 0.04),
    "genitive (den Hund des Nachbarn)": (r"\b(?:des|der) \w+(?:s|n|in)\b[^,]*", 0.0),  # counted on English below
    "subordinate dass": (r", dass ", 0.03),
    "subordinate wenn": (r", wenn ", 0.02),
    "subordinate bevor": (r", bevor ", 0.02),
    "subordinate nachdem": (r", nachdem ", 0.02),
    "subordinate weil": (r", weil ", 0.03),
    "subordinate während": (r", während ", 0.03),
    "perfect (hat/ist ... participle)": (r"\b(?:hat|haben|ist|sind) (?:[^,]* )?ge\w+[.,]", 0.08),
}


def read_pairs(folder: Path = DATA) -> list[Pair]:
    pairs: list[Pair] = []
    for split in SPLITS:
        de = (folder / f"{split}.de").read_text(encoding="utf-8").splitlines()
        en = (folder / f"{split}.en").read_text(encoding="utf-8").splitlines()
        pairs += list(zip(de, en, strict=True))
    return pairs


def shares(pairs: list[Pair]) -> dict[str, float]:
    """The share of pairs showing each construction, plus openings and the English genitive."""
    n = len(pairs)
    out = {name: sum(bool(re.search(p, de)) for de, _ in pairs) / n for name, (p, _) in CONSTRUCTIONS.items()}
    out["genitive (den Hund des Nachbarn)"] = sum("'s " in en for _, en in pairs) / n
    out["starts with Ein/Eine"] = sum(de.split()[0] in ("Ein", "Eine") for de, _ in pairs) / n
    out["starts with Heute/Am Wochenende"] = sum(de.startswith(("Heute ", "Am Wochenende ")) for de, _ in pairs) / n
    return out


@pytest.fixture(scope="module")
def pairs() -> list[Pair]:
    return read_pairs()


@pytest.fixture(scope="module")
def measured_shares(pairs) -> dict[str, float]:
    """``shares`` once for the file: each scan reads every pair (about 1.5 s), and a dozen tests read the result."""
    return shares(pairs)


@pytest.mark.parametrize("name", list(NONSENSE))
def test_no_nonsense(pairs, name):
    found = _count(pairs, NONSENSE[name])
    assert not found, f"{name}: {len(found)} pairs, e.g. {found[:3]}"


@pytest.mark.parametrize("name", list(UNNATURAL))
def test_nothing_unnatural(pairs, name):
    found = _count(pairs, UNNATURAL[name])
    assert not found, f"{name}: {len(found)} pairs, e.g. {found[:3]}"


@pytest.mark.parametrize(
    "de, en, category",
    [
        ("Ein Hund trinkt heißen Kakao.", "A dog is drinking hot hot chocolate.", "hot/cold hot chocolate"),
        ("Ein Pferd trinkt Milch.", "A horse is drinking milk.", "animal drinking something other than water"),
        ("Am Abend frühstückt ein Mann.", "In the evening, a man is having breakfast.", "breakfast not in the morning"),
        (
            "Ein Mann pfeift, während er singt.",
            "A man is whistling while he is singing.",
            "same person, incompatible activities",
        ),
        (
            "Ein Mann singt, während er ein Lied singt.",
            "A man is singing while he is singing a song.",
            "same person, incompatible activities",
        ),
        (
            "Ein Junge tanzt, während sein Vater ...",
            "A father is waiting while his son is dancing with his father.",
            "relatives of relatives in a subordinate clause",
        ),
        (
            "Ein Vater liest seinem Sohn vor, während sein Sohn aufräumt.",
            "A father is reading to his son while his son is tidying up.",
            "main clause's object busy in the subordinate clause",
        ),
        ("Ein Paar trägt einen Hut.", "A couple is wearing a hat.", "couple or family wearing one garment"),
    ],
)
def test_scans_catch_what_they_look_for(de, en, category):
    assert _count([(de, en)], NONSENSE[category]), f"the scan for {category!r} misses {en!r}"


@pytest.mark.parametrize(
    "de, en, category",
    [
        ("Ein Mann malt die Tür.", "A man is painting the door.", "malen for a door, fence or house"),
        ("Ein Mann zieht den Hut an.", "A man is putting on the hat.", "anziehen/ausziehen for hats, caps, helmets"),
        ("Ein Mann trägt einen Stiefel.", "A man is wearing a boot.", "a single boot"),
        ("Ein Junge hat getanzt.", "A boy has danced on the beach.", "present perfect for a finished activity"),
        ("Ein Junge spielt Fangen.", "A boy is playing tag.", "one person playing tag or hide-and-seek"),
        ("Ein Vogel fliegt über die Brücke.", "A bird is flying across the bridge.", "flying across"),
        ("Ein Junge trinkt Kaffee.", "A boy is drinking coffee.", "a child drinking coffee"),
    ],
)
def test_unnatural_scans_catch_what_they_look_for(de, en, category):
    assert _count([(de, en)], UNNATURAL[category]), f"the scan for {category!r} misses {en!r}"


@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
def test_each_construction_has_a_visible_share(measured_shares, name):
    floor = CONSTRUCTIONS[name][1]
    share = measured_shares[name]
    assert share >= max(floor, 0.02), f"{name}: {share:.1%} of pairs, below {max(floor, 0.02):.0%}"


def test_openings_vary(pairs, measured_shares):
    share = measured_shares
    assert share["starts with Ein/Eine"] <= 0.25, share["starts with Ein/Eine"]
    assert share["starts with Heute/Am Wochenende"] <= 0.02, share["starts with Heute/Am Wochenende"]
    # no opening word in a quarter of the pairs or more (Ein alone opened 32 % before)
    first_words = Counter(de.split()[0] for de, _ in pairs)
    word, count = first_words.most_common(1)[0]
    assert count < len(pairs) / 4, (word, count)


def test_weil_clauses_follow_many_main_verbs(pairs):
    # The issue: every "weil" clause used to follow one of four verbs (laughs, smiles, cheers, claps).
    verbs = set()
    for _, en in pairs:
        m = re.match(r"^.*?\b(?:is|are) (\w+ing)\b.*\bbecause ", en)
        if m:
            verbs.add(m.group(1))
    assert len(verbs) >= 20, sorted(verbs)


def test_data_card_states_the_measured_shares(measured_shares):
    card = (DATA.parent / "README.md").read_text(encoding="utf-8")
    for name, share in measured_shares.items():
        assert f"| {name} | {100 * share:.1f} % |" in card, f"data/README.md should say {name}: {100 * share:.1f} %"


# --- crossing alignments (for lesson 06: a head that follows a reordering) --------------------------

MODALS = ("will", "wollen", "möchte", "möchten", "kann", "können", "muss", "müssen")
VERB_FINAL = re.compile(r", (?:weil|während|dass|wenn|bevor|nachdem|der|die|das) ")


def _crosses(links: list[tuple[int, int]], i: int) -> bool:
    """Whether German token i's links cross another link: (i, j) and (k, m) with i < k but j > m."""
    return any((k - i) * (m - j) < 0 for j in (j for a, j in links if a == i) for k, m in links if k != i)


def crossing_kind(de: str, alignment: str) -> str | None:
    """``modal`` (the infinitive at the end), ``verb-final`` (the verb closing a subordinate or relative
    clause) when that verb's links cross another link, else None."""
    tokens = de.split()
    links = [tuple(map(int, link.split("-"))) for link in alignment.split()]
    relative = re.match(r"^((?:\S+ )*?\S+,) (?:der|die|das) ", de)
    if relative:  # "Der Junge, der einen Hut trägt, ...": the clause ends at the next comma
        start = len(relative.group(1).split())
        end = next(i for i in range(start + 1, len(tokens)) if tokens[i].endswith(","))
        return "verb-final" if _crosses(links, end) else None
    if not _crosses(links, len(tokens) - 1):
        return None
    if "," not in de and set(MODALS) & set(tokens):
        return "modal"
    return "verb-final" if VERB_FINAL.search(de) else None


def test_test_split_has_crossing_alignments_for_lesson_06():
    de = (DATA / "test.de").read_text(encoding="utf-8").splitlines()
    align = (DATA / "test.align").read_text(encoding="utf-8").splitlines()
    kinds = [crossing_kind(d, a) for d, a in zip(de, align, strict=True)]
    assert kinds.count("modal") >= 30 and kinds.count("verb-final") >= 30, (
        kinds.count("modal"),
        kinds.count("verb-final"),
    )
    # the relative pronoun's clause: "Ein Junge, der einen Hut trägt, ..." crosses "who is wearing a hat"
    assert any(k == "verb-final" and re.search(r"\w, (?:der|die|das) ", d) for k, d in zip(kinds, de, strict=False))


def main(folder: str | None = None) -> None:
    pairs = read_pairs(Path(folder) if folder else DATA)
    print(f"{len(pairs)} pairs in {folder or DATA}")
    for title, scans in (("nonsense", NONSENSE), ("unnatural", UNNATURAL)):
        total = 0
        for name, scan in scans.items():
            found = _count(pairs, scan)
            total += len(found)
            print(f"  {title:9} {len(found):6}  {name}" + (f"   e.g. {found[0][1]}" if found else ""))
        print(f"  {title:9} {total:6}  in all")
    for name, share in shares(pairs).items():
        print(f"  share {share:7.1%}  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
