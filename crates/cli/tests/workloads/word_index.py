"""Index the words of the Linux source and query the index with a skewed
pattern: the workload of `zmem run`'s tests and of scripts/run-bench.

    python3 word_index.py TEXT QUERIES SEED [COPY]

TEXT is a text file (scripts/run-bench writes one from Debian's
linux-source tarball). The program reads it whole into one bytes object,
splits it into words and builds an index: a dict from each word to the list
of its positions (word numbers). It then draws QUERIES words from the
vocabulary, Zipf-distributed (s = 1.1) over a seeded shuffle of it (so the
hot words are spread over memory, not the most frequent ones), and for
each query reads its position list at three places. It prints the number
of words, the vocabulary's size and a checksum of every answer: the same
input and seed give the same three lines, with or without zmem. With COPY,
it also writes the text it holds back to that file (a system call reading
the program's large buffer; the caller compares the files).
"""

import bisect
import random
import sys


def main():
    path, queries, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, "rb") as f:
        data = f.read()
    index = {}
    pos = 0
    for w in data.split():
        lst = index.get(w)
        if lst is None:
            index[w] = [pos]
        else:
            lst.append(pos)
        pos += 1
    vocab = sorted(index)
    rng = random.Random(seed)
    rng.shuffle(vocab)
    # Zipf over ranks 1..V: a cumulative table and bisection.
    weights = [1.0 / (r ** 1.1) for r in range(1, len(vocab) + 1)]
    cum, t = [], 0.0
    for x in weights:
        t += x
        cum.append(t)
    check = 0
    for _ in range(queries):
        w = vocab[bisect.bisect_left(cum, rng.random() * t)]
        lst = index[w]
        k = rng.randrange(len(lst))
        check = (check * 1000003 + len(lst) + lst[0] + lst[k] + lst[-1]) % (1 << 61)
    print("words", pos)
    print("vocabulary", len(vocab))
    print("checksum", check)
    if len(sys.argv) > 4:
        with open(sys.argv[4], "wb") as f:
            f.write(data)


main()
