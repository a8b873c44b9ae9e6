"""``python -m course.corpus --out data/captions``: regenerate the course corpus byte for byte."""

from __future__ import annotations

import argparse
import time

from course.corpus.generate import SEED, build_corpus, statistics, write_corpus


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course.corpus", description=__doc__)
    parser.add_argument("--out", required=True, help="folder to write {train,val,test}.{de,en,align} into")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED}, the committed corpus)")
    args = parser.parse_args(argv)
    start = time.process_time()
    corpus = build_corpus(args.seed)
    for path in write_corpus(corpus, args.out):
        print(path)
    for key, value in statistics(corpus).items():
        print(f"{key}: {value}")
    print(f"cpu seconds: {time.process_time() - start:.1f}")


if __name__ == "__main__":
    main()
