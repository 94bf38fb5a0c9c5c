#!/usr/bin/env python3
"""The committed corpora, one file a target: `corpus/TARGET.b64`, one input a line (standard
base64; an empty line is the empty input), sorted, each input once. 19 files in git rather than
tens of thousands, so a clone, the CI's work copy and a review stay small; libFuzzer works on a
directory, so the scripts unpack a pack into one and pack a directory back.

    python3 conformance/fuzz/corpus.py unpack PACK DIR    # every input of PACK as a file of DIR
    python3 conformance/fuzz/corpus.py pack DIR PACK      # every file of DIR into PACK
"""
import base64
import hashlib
import os
import sys


def unpack(pack, directory):
    os.makedirs(directory, exist_ok=True)
    with open(pack, encoding="ascii") as lines:
        for line in lines:
            data = base64.b64decode(line.rstrip("\n"), validate=True)
            name = hashlib.sha1(data).hexdigest()
            with open(os.path.join(directory, name), "wb") as out:
                out.write(data)


def pack(directory, pack_path):
    inputs = set()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                inputs.add(base64.b64encode(f.read()).decode("ascii"))
    with open(pack_path, "w", encoding="ascii") as out:
        for line in sorted(inputs):
            out.write(line + "\n")
    return len(inputs)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__)
    if sys.argv[1] == "unpack":
        unpack(sys.argv[2], sys.argv[3])
    else:
        print(f"{pack(sys.argv[2], sys.argv[3])} inputs in {sys.argv[3]}")
