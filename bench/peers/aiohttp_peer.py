"""A peer for weir-bench: the plain-aiohttp way of running a batch of chat
completions, one request per row under an asyncio.Semaphore of the size it is
told. It writes one JSON line per answered row (id, answer) and prints a final
JSON line of counts, so its work can be checked against weir's.

    python aiohttp_peer.py --base-url URL --rows rows.csv --out out.jsonl --concurrency 32
"""

import asyncio

import aiohttp
from harness import parse_args, read_rows, write_answers

RETRY_STATUSES = {429, 503}


def retry_delay(response, attempt):
    # Retry-After when the server gives one (this one sends 0 with its 429s),
    # else the usual doubling backoff.
    header = response.headers.get("Retry-After")
    if header is not None:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    return min(0.5 * 2**attempt, 8.0)


async def ask(session, sem, url, model, max_retries, text, counts):
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    async with sem:
        for attempt in range(max_retries + 1):
            async with session.post(url, json=body) as response:
                if response.status == 200:
                    data = await response.json()
                    return data["choices"][0]["message"]["content"]
                await response.read()
                if response.status not in RETRY_STATUSES or attempt == max_retries:
                    counts["failed_status"][str(response.status)] = (
                        counts["failed_status"].get(str(response.status), 0) + 1
                    )
                    return None
                counts["retries"] += 1
                # The slot is kept through the wait, as the common pattern does:
                # the semaphore bounds requests, not rows.
                await asyncio.sleep(retry_delay(response, attempt))
    return None


async def main():
    args = parse_args()
    rows = read_rows(args.rows)
    url = args.base_url.rstrip("/") + "/chat/completions"
    counts = {"rows": len(rows), "answered": 0, "failed": 0, "retries": 0, "failed_status": {}}
    sem = asyncio.Semaphore(args.concurrency)
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    headers = {"Authorization": "Bearer bench"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        answers = await asyncio.gather(
            *(ask(session, sem, url, args.model, args.max_retries, text, counts) for _, text in rows),
            return_exceptions=True,
        )
    write_answers(args.out, rows, answers, counts)


if __name__ == "__main__":
    asyncio.run(main())
