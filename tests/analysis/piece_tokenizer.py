"""A tokenizer of short pieces for the tests of lesson 17's tools: a stand-in for SmolLM2's byte-level BPE that
keeps what they rely on (a space carried on a word's first piece, several pieces to a word, character offsets)."""

from __future__ import annotations

import re

END = 0


class PieceTokenizer:
    """Pieces of up to three characters, a space before a word kept on its first piece (as byte-level BPE keeps it),
    each newline and other space a piece alone: "Der Musiker" -> "Der", " Mus", "ike", "r". Ids are given in order
    of first sight (0 is the end token, 1 the newline); offsets are the pieces' characters."""

    eos_token_id = END
    PIECE = re.compile(r" ?[^\s]{1,3}|\s")

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"<end>": END, "\n": 1}
        self.pieces = {0: "<end>", 1: "\n"}

    def __call__(self, text: str, add_special_tokens: bool = False, return_offsets_mapping: bool = False) -> dict:
        found = list(self.PIECE.finditer(text))
        ids = [self.ids.setdefault(m.group(), len(self.ids)) for m in found]
        self.pieces = {i: piece for piece, i in self.ids.items()}
        return {"input_ids": ids, "offset_mapping": [m.span() for m in found]}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i == END))
