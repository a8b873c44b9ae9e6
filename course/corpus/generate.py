"""Build the corpus: sample sentence pairs, hold out unseen combinations, split, and write the files.

Layout (Multi30k's, plus alignments), in ``out_dir``:

* ``{train,val,test}.de`` / ``.en`` — one sentence per line, line i of ``.de`` translating line i of ``.en``;
* ``{train,val,test}.align`` — Pharaoh ``i-j`` pairs: German token i ↔ English token j (0-based,
  whitespace tokens, punctuation attached to its word as in Multi30k: ``Freien.``);
* ``test.unseen`` — 0-based line numbers of the test pairs that use a combination (adjective + noun,
  or subject noun + verb) that never occurs in training.

The same ``seed`` always writes the same bytes: all randomness comes from one ``random.Random(seed)``
and every choice iterates over lists in a fixed order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from course.corpus.grammar import SentencePair
from course.corpus.lexicon import ADJECTIVES, NOUNS, VERBS
from course.corpus.sampling import running_example, sample_sentence, subject_nouns
from helpers.tools.files import write_atomically

SEED = 2024
N_TRAIN = 24_000
N_VAL = 1_000
N_TEST = 1_000
N_UNSEEN = 300  # of the test pairs, how many use a held-out combination
RUNNING_EXAMPLE_LINE = 10  # 0-based line of test.de (line 11, as in Multi30k's test set 2016)
HELD_OUT_FRACTION = 0.05  # of the possible adjective+noun and subject+verb combinations

SPLITS = ("train", "val", "test")
PUNCTUATION = ".,"


@dataclass(frozen=True)
class Corpus:
    train: list[SentencePair]
    val: list[SentencePair]
    test: list[SentencePair]
    unseen: list[int]  # 0-based test lines with a held-out combination
    held_out: frozenset[tuple[str, str, str]]

    def split(self, name: str) -> list[SentencePair]:
        return {"train": self.train, "val": self.val, "test": self.test}[name]


def words(text: str) -> list[str]:
    """Whitespace tokens with attached punctuation stripped (how vocabulary sizes are counted)."""
    return [w.strip(PUNCTUATION) for w in text.split()]


def possible_combinations() -> list[tuple[str, str, str]]:
    """Every adjective+noun and subject noun+verb pair the lexicon allows, in a fixed order."""
    combos = [("adj", a.key, n.de) for a in ADJECTIVES.values() for n in NOUNS.values() if a.fits(n)]
    seen = set()
    for verb in VERBS:
        base = verb.key.split("_")[0]
        for noun in subject_nouns(verb):
            if (noun.de, base) not in seen:
                seen.add((noun.de, base))
                combos.append(("subj", noun.de, base))
    return combos


def choose_held_out(rng: random.Random, keep: Iterable[tuple[str, str, str]]) -> frozenset[tuple[str, str, str]]:
    """A fixed share of the possible combinations, never those of ``keep`` (the running example)."""
    keep = set(keep)
    candidates = [c for c in possible_combinations() if c not in keep]
    return frozenset(rng.sample(candidates, round(HELD_OUT_FRACTION * len(candidates))))


def build_corpus(
    seed: int = SEED, n_train: int = N_TRAIN, n_val: int = N_VAL, n_test: int = N_TEST, n_unseen: int = N_UNSEEN
) -> Corpus:
    """Sample and split the corpus; deterministic for a given seed and sizes."""
    if min(n_train, n_val, n_test) <= 0 or not 0 <= n_unseen < n_test - RUNNING_EXAMPLE_LINE:
        raise ValueError(
            f"sizes must be positive with n_unseen < n_test - {RUNNING_EXAMPLE_LINE}, got "
            f"train={n_train} val={n_val} test={n_test} unseen={n_unseen}"
        )
    rng = random.Random(seed)
    example = running_example()
    held_out = choose_held_out(rng, example.features)

    n_regular = n_train + n_val + (n_test - 1 - n_unseen)
    regular: list[SentencePair] = []
    unseen: list[SentencePair] = []
    seen_de: set[str] = {example.de}
    translation: dict[str, str] = {}
    # Draw until both pools are full (with room for pairs dropped below for unknown words).
    while len(regular) < n_regular * 1.03 or len(unseen) < n_unseen * 1.5:
        pair = sample_sentence(rng)
        if pair.de in seen_de:
            if translation.get(pair.de, pair.en) != pair.en:
                raise RuntimeError(f"one German sentence, two translations: {pair.de!r}")
            continue
        seen_de.add(pair.de)
        translation[pair.de] = pair.en
        (unseen if pair.features & held_out else regular).append(pair)

    train = regular[:n_train]
    vocabulary = {w for p in train for w in words(p.de) + words(p.en)}

    def known(pair: SentencePair) -> bool:  # every word of val/test also occurs in training
        return all(w in vocabulary for w in words(pair.de) + words(pair.en))

    rest = [p for p in regular[n_train:] if known(p)]
    val, test_regular = rest[:n_val], rest[n_val : n_val + n_test - 1 - n_unseen]
    test_unseen = [p for p in unseen if known(p)][:n_unseen]
    if len(val) < n_val or len(test_regular) < n_test - 1 - n_unseen or len(test_unseen) < n_unseen:
        raise RuntimeError("not enough sentences with known words for val/test; draw more")

    tagged = [(p, False) for p in test_regular] + [(p, True) for p in test_unseen]
    rng.shuffle(tagged)
    tagged.insert(RUNNING_EXAMPLE_LINE, (example, False))
    test = [p for p, _ in tagged]
    unseen_lines = [i for i, (_, is_unseen) in enumerate(tagged) if is_unseen]
    return Corpus(train, val, test, unseen_lines, held_out)


def write_corpus(corpus: Corpus, out_dir: str | os.PathLike) -> list[Path]:
    """Write every file; each is written to a temporary file first and then renamed into place."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    contents: dict[str, str] = {}
    for split in SPLITS:
        pairs = corpus.split(split)
        contents[f"{split}.de"] = "".join(p.de + "\n" for p in pairs)
        contents[f"{split}.en"] = "".join(p.en + "\n" for p in pairs)
        contents[f"{split}.align"] = "".join(p.alignment_text + "\n" for p in pairs)
    contents["test.unseen"] = "".join(f"{i}\n" for i in corpus.unseen)
    written = []
    for name, text in contents.items():
        write_atomically(out / name, text)
        written.append(out / name)
    return written


def statistics(corpus: Corpus) -> dict[str, object]:
    """Sizes and vocabulary counts, as reported in data/README.md."""

    def types(pairs: Sequence[SentencePair], side: str) -> int:
        return len({w.lower() for p in pairs for w in words(getattr(p, side))})

    everything = corpus.train + corpus.val + corpus.test
    lengths = [len(p.de.split()) for p in everything]
    return {
        "pairs": {s: len(corpus.split(s)) for s in SPLITS},
        "unseen_test_pairs": len(corpus.unseen),
        "german_types": types(everything, "de"),
        "english_types": types(everything, "en"),
        "german_types_train": types(corpus.train, "de"),
        "english_types_train": types(corpus.train, "en"),
        "german_tokens_min_mean_max": (min(lengths), round(sum(lengths) / len(lengths), 1), max(lengths)),
        "held_out_combinations": len(corpus.held_out),
    }
