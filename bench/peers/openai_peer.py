"""A peer for weir-bench: the official openai SDK's way of running a batch of
chat completions, one request per row under an asyncio.Semaphore of the size it
is told, the SDK's own retries (which honour Retry-After) doing the retrying.
It writes one JSON line per answered row (id, answer) and prints a final JSON
line of counts, so its work can be checked against weir's.

    python openai_peer.py --base-url URL --rows rows.csv --out out.jsonl --concurrency 32
"""

import argparse
import asyncio
import csv
import json

import openai
from openai import AsyncOpenAI


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rows", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--max-retries", type=int, default=8)
    parser.add_argument("--model", default="bench")
    return parser.parse_args()


async def ask(client, sem, model, text, counts):
    async with sem:
        try:
            completion = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}]
            )
        except openai.APIStatusError as e:
            key = str(e.status_code)
            counts["failed_status"][key] = counts["failed_status"].get(key, 0) + 1
            return None
        return completion.choices[0].message.content


async def main():
    args = parse_args()
    with open(args.rows, newline="") as f:
        rows = [(r["id"], r["text"]) for r in csv.DictReader(f)]
    counts = {"rows": len(rows), "answered": 0, "failed": 0, "failed_status": {}}
    sem = asyncio.Semaphore(args.concurrency)
    client = AsyncOpenAI(base_url=args.base_url, api_key="bench", max_retries=args.max_retries)
    async with client:
        answers = await asyncio.gather(
            *(ask(client, sem, args.model, text, counts) for _, text in rows),
            return_exceptions=True,
        )
    with open(args.out, "w") as out:
        for (row_id, _), answer in zip(rows, answers):
            if isinstance(answer, str):
                counts["answered"] += 1
                out.write(json.dumps({"id": row_id, "answer": answer}) + "\n")
            else:
                counts["failed"] += 1
    print(json.dumps(counts))


if __name__ == "__main__":
    asyncio.run(main())
