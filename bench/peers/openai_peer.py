"""A peer for weir-bench: the official openai SDK's way of running a batch of
chat completions, one request per row under an asyncio.Semaphore of the size it
is told, the SDK's own retries (which honour Retry-After) doing the retrying.
It writes one JSON line per answered row (id, answer) and prints a final JSON
line of counts, so its work can be checked against weir's.

    python openai_peer.py --base-url URL --rows rows.csv --out out.jsonl --concurrency 32
"""

import asyncio

import openai
from openai import AsyncOpenAI
from harness import parse_args, read_rows, write_answers


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
    rows = read_rows(args.rows)
    counts = {"rows": len(rows), "answered": 0, "failed": 0, "failed_status": {}}
    sem = asyncio.Semaphore(args.concurrency)
    client = AsyncOpenAI(base_url=args.base_url, api_key="bench", max_retries=args.max_retries)
    async with client:
        answers = await asyncio.gather(
            *(ask(client, sem, args.model, text, counts) for _, text in rows),
            return_exceptions=True,
        )
    write_answers(args.out, rows, answers, counts)


if __name__ == "__main__":
    asyncio.run(main())
