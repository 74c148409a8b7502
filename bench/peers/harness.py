"""What both peers share, so that they differ only in how they send: the
command line weir-bench gives them, the rows they read, and the answers and
counts they write for weir-bench to check against weir's."""

import argparse
import csv
import json


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rows", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--max-retries", type=int, default=8)
    parser.add_argument("--model", default="bench")
    return parser.parse_args()


def read_rows(path):
    """(id, text) of every row of the CSV file at `path`."""
    with open(path, newline="") as f:
        return [(r["id"], r["text"]) for r in csv.DictReader(f)]


def write_answers(path, rows, answers, counts):
    """One JSON line (id, answer) per answered row, then the counts on stdout."""
    with open(path, "w") as out:
        for (row_id, _), answer in zip(rows, answers):
            if isinstance(answer, str):
                counts["answered"] += 1
                out.write(json.dumps({"id": row_id, "answer": answer}) + "\n")
            else:
                counts["failed"] += 1
    print(json.dumps(counts))
