"""The course's own German–English corpus: a seeded grammar and lexicon in the picture-caption domain.

``python -m course.corpus --out data/captions`` (or ``make corpus``) regenerates the committed files
byte for byte. Modules, one concept each:

* ``morphology`` — German articles, possessives and adjective endings by gender, number and case;
  English a/an.
* ``lexicon`` — nouns, adjectives, verbs, places and adverbials, with the classes that decide who can
  do what to what and where.
* ``grammar`` — builds one sentence pair from a derivation, keeping track of which German tokens
  translate which English tokens (the gold alignment).
* ``sampling`` — draws derivations that make sense (selectional restrictions, possession, sentence
  patterns) from one seeded ``random.Random``.
* ``generate`` — collects sentences, holds out unseen combinations, splits and writes the files.
"""
