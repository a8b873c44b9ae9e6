"""The course's generated German–English corpus: reproducible, well-formed, aligned, and grammatical.

Most checks read the committed files in data/captions, so they test what learners actually get. The
grammar checks use hand-written expectations (genders, declension endings) independent of the
generator's own tables, so a wrong table fails here.
"""

from __future__ import annotations

import itertools
import os
import pickle
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from course.corpus import morphology
from course.corpus.generate import RUNNING_EXAMPLE_LINE, build_corpus, words

DATA = Path(__file__).resolve().parents[2] / "data" / "captions"
SPLITS = ("train", "val", "test")
FILES = [f"{s}.{ext}" for s in SPLITS for ext in ("de", "en", "align")] + ["test.unseen"]


def read_lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict[str, list[str]]]:
    return {s: {ext: read_lines(f"{s}.{ext}") for ext in ("de", "en", "align")} for s in SPLITS}


@pytest.fixture(scope="module")
def all_pairs(corpus) -> list[tuple[str, str, str]]:
    return [p for s in SPLITS for p in zip(corpus[s]["de"], corpus[s]["en"], corpus[s]["align"], strict=False)]


# `python -m course.corpus --out OUT` (what `make corpus` runs), in a fresh interpreter, which also hands back the
# corpus it built (pickled to PICKLE), so that one regeneration serves every test that needs one.
REGENERATE = """
import pickle, runpy, sys
import course.corpus.generate as generate
out, kept = sys.argv[1], sys.argv[2]
real_build = generate.build_corpus
def build_and_keep(*args, **kwargs):
    corpus = real_build(*args, **kwargs)
    with open(kept, "wb") as handle:
        pickle.dump(corpus, handle)
    return corpus
generate.build_corpus = build_and_keep
sys.argv = ["python -m course.corpus", "--out", out]
runpy.run_module("course.corpus", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """The corpus rebuilt from its seed by the command line, and the folder it was written to; under a hash seed
    of its own (12345, not this process's), so that no set or dict order may matter."""
    out = tmp_path_factory.mktemp("captions")
    kept = out.parent / "corpus.pickle"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-c", REGENERATE, str(out), str(kept)],
        check=True,
        env=env,
        cwd=DATA.parents[1],
        capture_output=True,
    )
    with open(kept, "rb") as handle:
        built = pickle.load(handle)  # written just now by the course's own generator
    return built, out


# --- reproducibility ---------------------------------------------------------------------------


def test_command_line_regenerates_committed_files_byte_for_byte_under_another_hash_seed(regenerated):
    _, out = regenerated
    for name in FILES:
        assert (out / name).read_bytes() == (DATA / name).read_bytes(), f"{name} differs from a fresh `make corpus`"


def test_writing_leaves_no_temporary_files(regenerated):
    _, out = regenerated
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)


def test_bad_sizes_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="n_unseen"):
        build_corpus(n_train=10, n_val=10, n_test=20, n_unseen=50)


# --- sizes, splits, unseen subset ----------------------------------------------------------------


def test_sizes_and_line_counts_match(corpus):
    assert len(set(corpus["train"]["de"])) == len(corpus["train"]["de"]) >= 20_000
    assert len(corpus["val"]["de"]) == 1000 and len(corpus["test"]["de"]) == 1000
    for s in SPLITS:
        assert len(corpus[s]["de"]) == len(corpus[s]["en"]) == len(corpus[s]["align"])


def test_no_validation_or_test_sentence_occurs_in_training(corpus):
    train = set(corpus["train"]["de"])
    assert not train & set(corpus["val"]["de"])
    assert not train & set(corpus["test"]["de"])
    assert not set(corpus["val"]["de"]) & set(corpus["test"]["de"])


def test_vocabulary_is_large_enough(corpus):
    de = {w.lower() for s in SPLITS for line in corpus[s]["de"] for w in words(line)}
    en = {w.lower() for s in SPLITS for line in corpus[s]["en"] for w in words(line)}
    assert len(de) >= 800 and len(en) >= 600


def test_every_val_and_test_word_occurs_in_training(corpus):
    known = {w for lang in ("de", "en") for line in corpus["train"][lang] for w in words(line)}
    for s in ("val", "test"):
        for lang in ("de", "en"):
            unknown = {w for line in corpus[s][lang] for w in words(line)} - known
            assert not unknown, f"{s}.{lang} has words never seen in training: {sorted(unknown)[:5]}"


def test_one_german_sentence_has_one_translation(all_pairs):
    translations: dict[str, set[str]] = {}
    for de, en, _ in all_pairs:
        translations.setdefault(de, set()).add(en)
    assert all(len(t) == 1 for t in translations.values())


def test_running_example_is_in_test_at_the_documented_line(corpus):
    assert corpus["test"]["de"][RUNNING_EXAMPLE_LINE] == (
        "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien."
    )
    assert corpus["test"]["en"][RUNNING_EXAMPLE_LINE] == (
        "A mother and her little son are enjoying a beautiful day outdoors."
    )


def test_unseen_lines_hold_combinations_never_seen_in_training(regenerated):
    built, _ = regenerated
    unseen = [int(line) for line in read_lines("test.unseen")]
    assert unseen == built.unseen and len(unseen) >= 200 and len(set(unseen)) == len(unseen)
    assert all(0 <= i < 1000 for i in unseen) and RUNNING_EXAMPLE_LINE not in unseen
    train_features = set().union(*(p.features for p in built.train))
    assert not train_features & built.held_out
    for i in unseen:
        assert built.test[i].features & built.held_out, f"test line {i} has no held-out combination"
    regular = [p for i, p in enumerate(built.test) if i not in set(unseen)]
    assert not any(p.features & built.held_out for p in regular)


# --- alignments --------------------------------------------------------------------------------


def parse_alignment(line: str) -> list[tuple[int, int]]:
    return [tuple(map(int, link.split("-"))) for link in line.split()]  # type: ignore[misc]


def test_alignments_are_in_range_and_cover_every_token(all_pairs):
    for de, en, align in all_pairs:
        links = parse_alignment(align)
        n_de, n_en = len(de.split()), len(en.split())
        assert all(0 <= i < n_de and 0 <= j < n_en for i, j in links), (de, align)
        assert {i for i, _ in links} == set(range(n_de)), f"unaligned German word in {de!r}"
        assert {j for _, j in links} == set(range(n_en)), f"unaligned English word in {en!r}"


def test_running_example_alignment_matches_a_hand_written_one(corpus):
    expected = {
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),  # Eine Mutter und ihr kleiner Sohn
        (6, 6),
        (6, 7),  # genießen -> are enjoying (one-to-many)
        (7, 8),
        (8, 9),
        (9, 10),  # einen schönen Tag -> a beautiful day
        (10, 11),
        (11, 11),  # im Freien. -> outdoors. (many-to-one idiom)
    }
    assert set(parse_alignment(corpus["test"]["align"][RUNNING_EXAMPLE_LINE])) == expected


def test_separable_verb_particle_aligns_with_the_english_verb(all_pairs):
    found = 0
    for de, en, align in all_pairs:
        tokens = de.split()
        if "steigt" in tokens and tokens[-1] == "ein." and "," not in de:
            k = tokens.index("steigt")
            links = parse_alignment(align)
            verb_targets = {j for i, j in links if i == k}
            particle_targets = {j for i, j in links if i == len(tokens) - 1}
            assert particle_targets == verb_targets
            assert "getting" in {en.split()[j] for j in verb_targets}, (de, en, align)
            found += 1
    assert found >= 5


# --- German grammar ----------------------------------------------------------------------------

# Hand-written genders and expected forms, independent of the generator's tables.
GENDER = {
    "Hund": "m",
    "Ball": "m",
    "Hut": "m",
    "Katze": "f",
    "Blume": "f",
    "Jacke": "f",
    "Pferd": "n",
    "Buch": "n",
    "Auto": "n",
    "Fahrrad": "n",
}
ARTICLE_ADJECTIVE_ENDING = {  # (article, gender) -> adjective ending, for nom/acc/dat contexts
    ("ein", "m"): "er",
    ("einen", "m"): "en",
    ("einem", "m"): "en",
    ("eine", "f"): "e",
    ("einer", "f"): "en",
    ("ein", "n"): "es",
    ("einem", "n"): "en",
    ("der", "m"): "e",
    ("den", "m"): "en",
    ("dem", "m"): "en",
    ("die", "f"): "e",
    ("der", "f"): "en",
    ("das", "n"): "e",
    ("dem", "n"): "en",
}


def test_article_adjective_noun_agree(all_pairs):
    checked = 0
    # Not after a comma: "..., die ihr Auto fährt" starts a relative clause, not a noun phrase.
    pattern = re.compile(r"(?<!, )\b(ein|einen|einem|eine|einer|der|den|dem|die|das) (\w+) (\w+)\b")
    for de, _, _ in all_pairs:
        for article, adjective, noun in pattern.findall(de):
            if noun not in GENDER or not adjective[0].islower() or adjective.startswith(("sein", "ihr")):
                continue
            key = (article, GENDER[noun])
            assert key in ARTICLE_ADJECTIVE_ENDING, f"article {article!r} cannot precede {noun}: {de!r}"
            assert adjective.endswith(ARTICLE_ADJECTIVE_ENDING[key]), f"{article} {adjective} {noun}: {de!r}"
            checked += 1
    assert checked >= 200


def test_dative_plural_nouns_end_in_n():
    # After 'mit den/zwei ...' the plural noun takes -n unless it already ends in -n or -s.
    with_plural = {"Hunde": "Hunden", "Kinder": "Kindern", "Pferde": "Pferden", "Äpfel": "Äpfeln"}
    from course.corpus.lexicon import NOUNS

    for plural, dative in with_plural.items():
        noun = next(n for n in NOUNS.values() if n.de_pl == plural)
        assert noun.german(True, "dat") == dative


def test_declension_tables_match_a_grammar_book():
    adj = morphology.adjective_form
    assert [adj("klein", "m", c, "strong") for c in ("nom", "acc", "dat")] == ["kleiner", "kleinen", "kleinem"]
    assert [adj("klein", "f", c, "strong") for c in ("nom", "acc", "dat")] == ["kleine", "kleine", "kleiner"]
    assert [adj("klein", "n", c, "strong") for c in ("nom", "acc", "dat")] == ["kleines", "kleines", "kleinem"]
    assert [adj("klein", "pl", c, "strong") for c in ("nom", "acc", "dat")] == ["kleine", "kleine", "kleinen"]
    assert [adj("klein", "n", c, "mixed") for c in ("nom", "acc", "dat")] == ["kleines", "kleines", "kleinen"]
    assert [adj("klein", "m", c, "weak") for c in ("nom", "acc", "dat")] == ["kleine", "kleinen", "kleinen"]
    assert [morphology.ein_word("sein", g, "dat") for g in ("m", "f", "n", "pl")] == [
        "seinem",
        "seiner",
        "seinem",
        "seinen",
    ]
    assert [morphology.definite_article(g, "dat") for g in ("m", "f", "n", "pl")] == ["dem", "der", "dem", "den"]
    with pytest.raises(ValueError, match="gender"):
        morphology.definite_article("x", "nom")  # type: ignore[arg-type]


def test_prepositions_with_articles_are_contracted(all_pairs):
    text = "\n".join(de for de, _, _ in all_pairs)
    for uncontracted in ("in dem", "an dem", "in das", "zu dem", "zu der", "bei dem", "von dem"):
        assert not re.search(rf"\b{uncontracted}\b", text, flags=re.IGNORECASE), uncontracted
    for contracted in ("im", "am", "ins", "zum", "zur", "beim"):
        assert len(re.findall(rf"\b{contracted}\b", text, flags=re.IGNORECASE)) >= 20, contracted


def test_sentences_are_capitalised_and_end_with_a_full_stop(all_pairs):
    for de, en, _ in all_pairs:
        for s in (de, en):
            assert s[0].isupper() and s.endswith(".") and not s.endswith(".."), s
            assert 4 <= len(s.split()) <= 22, s


def test_no_coordinated_duplicates(all_pairs):
    pattern = re.compile(r"^(?:Ein|Eine|Der|Die|Das) (?:\w+ )?(\w+) und (?:\w+ ){1,2}?(\w+) ")
    checked = 0
    for de, _, _ in all_pairs:
        m = pattern.match(de)
        if m:
            assert m.group(1) != m.group(2), de
            checked += 1
    assert checked >= 300


def test_subordinate_clauses_are_verb_final(all_pairs):
    # "..., weil sein Hund einen Ball fängt." -- the clause ends in a finite verb form we know.
    from course.corpus.lexicon import VERBS

    finite = {form for v in VERBS for form in (v.de3sg, v.de3pl)}
    finite |= {v.particle + f for v in VERBS if v.particle and not v.particle_apart for f in (v.de3sg, v.de3pl)}
    finite |= {"hat", "haben", "ist", "sind", "scheint", "regnet"}  # the last two: "weil die Sonne scheint"
    n = 0
    for de, _, _ in all_pairs:
        if ", weil " in de or ", während " in de:
            assert de.split()[-1].rstrip(".") in finite, de
            n += 1
    assert n >= 1000


def test_perfect_uses_sein_for_movement_and_haben_otherwise(all_pairs):
    lines = [de for de, _, _ in all_pairs]
    assert any(re.search(r"\bist \w+ .*gelaufen\.", de) for de in lines)
    assert any(re.search(r"\bhat .*gespielt\.", de) for de in lines)
    for de in lines:
        assert not re.search(r"\b(hat|haben)\b[^,]*\b(gelaufen|gesprungen|geschwommen|gegangen)\b", de), de
        assert not re.search(r"\b(ist|sind)\b[^,]*\b(gespielt|geworfen|gelesen|gekauft)\b", de), de


# --- English -----------------------------------------------------------------------------------


def test_english_indefinite_article_matches_the_next_sound(all_pairs):
    for _, en, _ in all_pairs:
        tokens = en.lower().split()
        for article, nxt in itertools.pairwise(tokens):
            if article in ("a", "an"):
                assert article == morphology.english_indefinite(nxt.strip(".,")), en


def test_english_uses_the_progressive_and_agrees_in_number(all_pairs):
    progressive = sum(bool(re.search(r"\b(is|are) \w+ing\b", en)) for _, en, _ in all_pairs)
    assert progressive >= 0.6 * len(all_pairs)
    for de, en, _ in all_pairs:
        if re.match(r"^(Ein|Eine) \w+ und (ein|eine|sein|seine|ihr|ihre) ", de):
            # plural agreement, or a simple past (which has none): never "is"/"has"
            assert re.search(r"\b(are|have)\b", en) or not re.search(r"\b(is|has)\b", en), (de, en)


def test_english_possessive_follows_the_german_antecedent(all_pairs):
    for de, en, _ in all_pairs:
        m = re.match(r"^(Ein|Eine) (\w+) und (sein|seine|ihr|ihre) ", de)
        if m:
            expected = "his" if m.group(3).startswith("sein") else "her"
            assert f" and {expected} " in en, (de, en)


# --- phenomena ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, pattern, minimum",
    [
        (
            "verb-second after a fronted place",
            r"^(Im|Am|Auf|In|An|Unter|Vor) [^,]*? (spielt|liest|sitzt|spielen|lesen) ",
            50,
        ),
        ("fronted time adverbial", r"^(Am Morgen|Am Abend|Heute|Am Wochenende) ", 200),
        ("weil clause", r", weil ", 500),
        ("während clause", r", während ", 500),
        ("separable verb in a main clause", r" steigt .* (ein|aus)\.$", 20),
        ("separable verb rejoined in a subordinate clause", r"(einsteigt|aussteigt|zuschaut|aufhebt)\.$", 20),
        ("perfect with sein", r" (ist|sind) .*(gelaufen|gesprungen|geklettert|geschwommen|gegangen)\.$", 100),
        ("perfect with haben", r" (hat|haben) .*ge\w+t\.$", 300),
        ("coordinated subject", r"^\w+ \w+ und ", 500),
        ("possessive in the dative", r"\b(seinem|seiner|ihrem|ihrer)\b", 300),
        ("dative plural", r"\b(mit|den|zwei|drei|vier) \w*(en|ern|eln)\b", 100),
        ("idiom im Freien", r"\bim Freien\b", 100),
        ("idiom zu Hause", r"\bzu Hause\b", 30),
        ("contraction ins", r"\bins\b", 30),
        ("strong adjective after a number", r"\b(zwei|drei|vier) \w+e \w+", 300),
    ],
)
def test_each_phenomenon_appears_often(all_pairs, name, pattern, minimum):
    count = sum(bool(re.search(pattern, de)) for de, _, _ in all_pairs)
    assert count >= minimum, f"{name}: {count} < {minimum}"


def test_sentence_lengths_are_short_to_medium(all_pairs):
    lengths = Counter(len(de.split()) for de, _, _ in all_pairs)
    short_to_medium = sum(n for length, n in lengths.items() if 5 <= length <= 20)
    assert short_to_medium >= 0.9 * sum(lengths.values())


def test_data_card_examples_occur_in_the_corpus(all_pairs):
    card = (DATA.parent / "README.md").read_text(encoding="utf-8")
    sentences = {de for de, _, _ in all_pairs} | {en for _, en, _ in all_pairs}
    examples = re.findall(r"(?<!\*)\*([A-ZÄÖÜ][^*\n]+?\.)\*(?!\*)", card)  # *Whole sentence.* in italics
    assert len(examples) >= 8
    missing = [s for s in examples if s not in sentences]
    assert not missing, f"data/README.md quotes sentences the corpus no longer has: {missing}"


def test_data_card_states_the_current_sizes_and_vocabulary(regenerated):
    from course.corpus.generate import statistics

    card = (DATA.parent / "README.md").read_text(encoding="utf-8")
    stats = statistics(regenerated[0])
    assert f"**{stats['german_types']} German**" in card and f"**{stats['english_types']} English**" in card
    assert f"({stats['held_out_combinations']} of them)" in card
    assert f"{stats['pairs']['train']:,} (all unique)" in card


def test_data_card_names_combinations_that_are_really_held_out(regenerated):
    built, _ = regenerated
    card = (DATA.parent / "README.md").read_text(encoding="utf-8")
    pairs = re.findall(r"\*(\w+)\* \+ \*(\w+)\*", card)
    assert len(pairs) >= 2
    for first, second in pairs:
        combo = ("adj", first, second) if first[0].islower() else ("subj", first, second)
        assert combo in built.held_out, f"data/README.md calls {combo} held out, but it is not"


# --- alignments of the constructions that reorder words ----------------------------------------


def _links_of(links: list[tuple[int, int]], i: int) -> set[int]:
    return {j for k, j in links if k == i}


def test_perfect_auxiliary_and_participle_both_align_with_the_english_simple_past(all_pairs):
    # "Ein Junge hat am Strand getanzt." -> "A boy danced on the beach.": hat-danced and getanzt-danced.
    checked = 0
    for de, en, align in all_pairs:
        tokens = de.split()
        auxiliaries = [i for i, t in enumerate(tokens[:5]) if t in ("hat", "ist", "haben", "sind")]
        if "," in de or not auxiliaries:
            continue
        links = parse_alignment(align)
        aux, participle = _links_of(links, auxiliaries[0]), _links_of(links, len(tokens) - 1)
        english = en.split()
        assert aux == participle, (de, en, align)
        assert not {english[j] for j in aux} & {"has", "have"}, f"present perfect in {en!r}"
        checked += 1
    assert checked >= 300


def test_modal_and_its_final_infinitive_cross_the_english_order(all_pairs):
    # "Der Junge will auf einen Baum klettern." -> "The boy wants to climb a tree.": will-wants to, klettern-climb.
    modals = {"will", "wollen", "kann", "können", "muss", "müssen", "möchte", "möchten"}
    crossing = 0
    for de, en, align in all_pairs:
        tokens = de.split()
        if "," in de or not (modals & set(tokens[1:4])):
            continue
        k = next(i for i, t in enumerate(tokens) if t in modals)
        links = parse_alignment(align)
        infinitive = _links_of(links, len(tokens) - 1)
        modal = _links_of(links, k)
        assert infinitive and modal and max(modal) < min(infinitive), (de, en, align)
        # German puts the objects before the infinitive, English after it: the links cross.
        if any(i < len(tokens) - 1 and j > max(infinitive) for i, j in links if i > k):
            crossing += 1
    assert crossing >= 300


def test_relative_pronoun_aligns_with_who_or_that(all_pairs):
    checked = 0
    for de, en, align in all_pairs:
        m = re.match(r"^((?:\S+ ){1,3}?\S+,) (der|die|das) ", de)
        if not m:
            continue
        k = len(m.group(1).split())
        targets = {en.split()[j] for j in _links_of(parse_alignment(align), k)}
        assert targets in ({"who"}, {"that"}), (de, en, align)
        checked += 1
    assert checked >= 500


def test_kein_aligns_with_not(all_pairs):
    checked = 0
    for de, en, align in all_pairs:
        tokens = de.split()
        for i, token in enumerate(tokens):
            if token.rstrip(".,") in ("kein", "keine", "keinen", "keinem", "keiner"):
                targets = {en.split()[j] for j in _links_of(parse_alignment(align), i)}
                assert "not" in targets, (de, en, align)
                checked += 1
    assert checked >= 300


def _lexicon_translations() -> dict[str, set[str]]:
    """German noun and adjective forms -> the English words the lexicon translates them with."""
    from course.corpus.lexicon import ADJECTIVES, NOUNS, PLACE_NOUNS, VERBS

    allowed: dict[str, set[str]] = {}

    def add(form: str | None, english: str) -> None:
        if form:
            allowed.setdefault(form, set()).update(english.lower().split())

    for noun in [*NOUNS.values(), *PLACE_NOUNS.values()]:
        english = " ".join([noun.en, noun.en_pl or "", *(" ".join(words) for _, words in noun.idioms)])
        for form in (noun.de, noun.de_pl, noun.oblique, noun.genitive):
            add(form, english)
        if noun.de_pl:
            add(noun.german(True, "dat"), english)
    for verb in VERBS:
        for de, en in verb.fixed:
            if en and de[:1].isupper():  # "Fahrrad fahren" -> "ride a bike"
                add(de, en)
    for adjective in ADJECTIVES.values():
        english = " ".join(word for _, word in adjective.en)
        for ending in ("e", "en", "er", "es", "em"):
            add(adjective.stem + ending, english)
    return allowed


def test_nouns_and_adjectives_align_with_their_lexicon_translation(all_pairs):
    allowed = _lexicon_translations()
    checked = 0
    for de, en, align in all_pairs:
        links = parse_alignment(align)
        english = [w.strip(".,").lower().removesuffix("'s") for w in en.split()]
        for i, token in enumerate(de.split()):
            word = token.strip(".,")
            if word in allowed and i > 0:
                targets = {english[j] for j in _links_of(links, i)}
                assert targets & allowed[word], f"{word} is aligned with {targets}: {de!r} / {en!r} / {align}"
                checked += 1
    assert checked >= 50_000


def test_alignment_lines_are_sorted_without_duplicates(corpus):
    for s in SPLITS:
        for line in corpus[s]["align"]:
            links = parse_alignment(line)
            assert links == sorted(set(links)), line


def test_genitive_owner_comes_first_in_english(all_pairs):
    # "den Hund des Nachbarn" -> "the neighbor's dog": the links cross.
    checked = 0
    for de, en, align in all_pairs:
        tokens = de.split()
        for i, token in enumerate(tokens[:-1]):
            if token == "des":
                links = parse_alignment(align)
                owner = _links_of(links, i + 1)
                head = _links_of(links, i - 1)
                assert max(owner) < min(head), (de, en, align)
                checked += 1
    assert checked >= 100
